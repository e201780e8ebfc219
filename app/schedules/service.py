"""What users do with schedules: make one (every field checked), pause, resume, delete; and when
one runs next, in its own time zone (cron through croniter, zones from the IANA database)."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter

from app.audit import service as audit
from app.db import get_db
from app.errors import UserFacingError
from app.executions import notifications
from app.models import ComputeUnit, Schedule, User, Warehouse, Workflow
from app.schedules import queries
from app.warehouses import sharing

CATCH_UP = {
    "skip": "Skip the times missed while Lakeport was down",
    "once": "Run once for all the times missed",
}
MAX_PER_WORKFLOW = 10
# A schedule that would fire more often than this is refused (a unit is not a queue).
MIN_INTERVAL_SECONDS = 60
# The options of a schedule: (field, lowest, highest, what it is) and their defaults.
OPTIONS = (
    ("max_retries", 0, 5, "Retries"),
    ("retry_backoff_seconds", 10, 3600, "Seconds before the first retry"),
    ("timeout_minutes", 0, 1440, "Timeout in minutes (0: none)"),
    ("max_running", 1, 10, "Runs at once"),
)
DEFAULTS = {"max_retries": 0, "retry_backoff_seconds": 60, "timeout_minutes": 0, "max_running": 1}


def now() -> datetime:
    """The schedules' clock (the firing, the pages' next times, a resume); tests replace it."""
    return datetime.now(timezone.utc)


class ScheduleRefused(UserFacingError):
    """A schedule could not be made or changed; `message` for the user, `field` the form field."""


def next_times(schedule: Schedule, after: datetime, count: int = 3) -> list[datetime]:
    """The schedule's next `count` due times after `after`, in its own time zone."""
    times = croniter(schedule.cron, after.astimezone(ZoneInfo(schedule.timezone)))
    return [times.get_next(datetime) for _ in range(count)]


def due_between(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """The due times in (start, end], in UTC."""
    times, found = croniter(schedule.cron, start.astimezone(ZoneInfo(schedule.timezone))), []
    while (moment := times.get_next(datetime)) <= end and len(found) < 10_000:
        found.append(moment.astimezone(timezone.utc))
    return found


def check(values: dict, owner: User) -> dict[str, str]:
    """field → message for what is wrong in a schedule's form ({} when it is fine)."""
    errors: dict[str, str] = {}
    cron = (values.get("cron") or "").strip()
    if not cron or len(cron) > 100 or len(cron.split()) != 5:
        errors["cron"] = (
            "Five fields: minute hour day-of-month month day-of-week, e.g. “30 6 * * 1-5”."
        )
    else:
        try:
            times = croniter(cron, datetime(2026, 1, 1, tzinfo=timezone.utc))
            first, second = times.get_next(datetime), times.get_next(datetime)
            if (second - first).total_seconds() < MIN_INTERVAL_SECONDS:
                errors["cron"] = "At most one run a minute."
        except (
            CroniterBadCronError,
            CroniterBadDateError,
            CroniterNotAlphaError,
            ValueError,
            KeyError,
        ):
            errors["cron"] = "Not a cron expression Lakeport understands, e.g. “30 6 * * 1-5”."
    if (values.get("timezone") or "") not in available_timezones():
        errors["timezone"] = "Choose a time zone by its IANA name, e.g. Europe/Lisbon or UTC."
    db = get_db()
    unit = db.get(ComputeUnit, _int(values.get("compute_unit_id")))
    if unit is None or unit.owner_id != owner.id:
        errors["compute_unit_id"] = "Choose one of your compute units."
    warehouse = db.get(Warehouse, _int(values.get("warehouse_id")))
    if warehouse is None or sharing.access_of(owner, warehouse) not in (
        sharing.OWNER,
        sharing.WRITE,
    ):
        errors["warehouse_id"] = "Choose a warehouse you may write into."
    if values.get("catch_up") not in CATCH_UP:
        errors["catch_up"] = "Choose what happens to missed times."
    errors.update(notifications.check(values))
    for field, low, high, words in OPTIONS:
        number = _int(values.get(field, DEFAULTS[field]), None)
        if number is None or not low <= number <= high:
            errors[field] = f"{words}: a whole number from {low} to {high}."
    return errors


def _int(value, default: int | None = 0) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def create(owner: User, workflow: Workflow, values: dict, now: datetime) -> Schedule:
    if errors := check(values, owner):
        field, message = next(iter(errors.items()))
        raise ScheduleRefused(message, field)
    if len(queries.schedules_of(workflow)) >= MAX_PER_WORKFLOW:
        raise ScheduleRefused(f"A workflow has at most {MAX_PER_WORKFLOW} schedules.")
    schedule = Schedule(
        owner_id=owner.id,
        workflow_id=workflow.id,
        cron=values["cron"].strip(),
        timezone=values["timezone"],
        compute_unit_id=int(values["compute_unit_id"]),
        warehouse_id=int(values["warehouse_id"]),
        catch_up=values["catch_up"],
        handled_until=now,
        start_unit=values.get("start_unit") in ("on", "true", True),
        **{field: _int(values.get(field, DEFAULTS[field])) for field in DEFAULTS},
        **notifications.fields(values),
    )
    db = get_db()
    db.add(schedule)
    db.commit()
    audit.record(
        "schedule.create",
        schedule,
        workflow_id=workflow.id,
        cron=schedule.cron,
        timezone=schedule.timezone,
        unit_id=schedule.compute_unit_id,
        warehouse_id=schedule.warehouse_id,
        start_unit=schedule.start_unit,
    )
    return schedule


def set_paused(schedule: Schedule, paused: bool, now: datetime) -> None:
    """Pause, or resume from now on (times that passed while paused are not run)."""
    schedule.paused = paused
    if not paused:
        schedule.handled_until = max(schedule.handled_until or now, now)
    db = get_db()
    db.add(schedule)
    db.commit()
    audit.record("schedule.pause" if paused else "schedule.resume", schedule)


def delete(schedule: Schedule) -> None:
    db = get_db()
    db.delete(schedule)
    db.commit()
    audit.record("schedule.delete", schedule, cron=schedule.cron)
