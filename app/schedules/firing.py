"""The worker's part of schedules: fire each due time exactly once.

One pass (`fire_due`, under the worker's lease "scheduler") looks at every active schedule's
due times since the one it handled last. Each due time is recorded as a `ScheduledRun` row
before anything is started, and the row's (schedule, due time) is unique: whatever the number
of workers, their restarts or a pass that runs twice, a due time is handled once (the second
insert fails and that worker moves on). The clock is `service.now()`, which a test may replace; a clock
that jumps back finds its due times handled already, one that jumps ahead finds them missed.

Times missed while no worker ran (more than GRACE_SECONDS late) follow the schedule's catch-up
policy: `skip` records each as skipped; `once` runs the latest and records the rest as caught up.
A due time whose unit is not running, whose warehouse takes no runs, or that finds
`max_running` of the schedule's runs still going is recorded as skipped, with the reason. Each
pass also cancels runs over the schedule's timeout, and retries a failed run (a row of its own,
`attempt` 1, 2…, as unique as the first) once its backoff has passed.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app.db import engine, get_db
from app.executions import runner
from app.models import ComputeUnit, Execution, ExecutionState, Schedule, ScheduledRun, User, Warehouse, Workflow
from app.schedules import notifications, service
from app.schedules.service import due_between
from app.workflows.service import latest_version

logger = logging.getLogger(__name__)

LEASE = "scheduler"
# A due time handled later than this counts as missed (the worker was down or stopped).
GRACE_SECONDS = 120.0


def fire_due() -> None:
    """One scheduler pass over every active schedule: its runs' timeouts and retries, then its
    due times."""
    moment = service.now()
    with Session(engine()) as db:
        ids = db.exec(select(Schedule.id).where(Schedule.paused == False)).all()  # noqa: E712
    for schedule_id in ids:
        try:
            _follow_runs(schedule_id, moment)
            _fire_schedule(schedule_id, moment)
        except Exception:
            logger.exception("schedule %s: its due times could not be handled", schedule_id)


def _started(schedule_id: int) -> list[tuple[ScheduledRun, Execution]]:
    """The schedule's runs that started an execution, with it, the newest attempt of each due time last."""
    with Session(engine(), expire_on_commit=False) as db:
        return list(db.exec(select(ScheduledRun, Execution).join(Execution, Execution.id == ScheduledRun.execution_id)
                            .where(ScheduledRun.schedule_id == schedule_id)
                            .order_by(ScheduledRun.due_at, ScheduledRun.attempt)))


def _follow_runs(schedule_id: int, moment: datetime) -> None:
    """Cancel what is over its timeout; retry the last attempt of a due time that FAILED."""
    with Session(engine(), expire_on_commit=False) as db:
        schedule = db.get(Schedule, schedule_id)
    latest: dict[datetime, tuple[ScheduledRun, Execution]] = {}
    for run, execution in _started(schedule_id):
        latest[run.due_at] = (run, execution)
        if schedule.notify_on and not _will_retry(schedule, run, execution):
            notifications.queue(schedule, execution)
        if (schedule.timeout_minutes and execution.state not in ExecutionState.FINAL and not run.reason
                and moment - execution.created_at > timedelta(minutes=schedule.timeout_minutes)):
            _settle(run.id, reason=f"cancelled: over its timeout of {schedule.timeout_minutes} min")
            try:
                runner.cancel(get_db().get(Execution, execution.id))
            except runner.RunRefused:
                pass  # it ended meanwhile
    for run, execution in latest.values():
        if _will_retry(schedule, run, execution) and moment >= (execution.ended_at or execution.created_at) \
                + timedelta(seconds=schedule.retry_backoff_seconds * 2 ** run.attempt):
            _fire(schedule, run.due_at, attempt=run.attempt + 1)


def _will_retry(schedule: Schedule, run: ScheduledRun, execution: Execution) -> bool:
    """A failed attempt with retries left (one cancelled for its timeout is not retried)."""
    return (execution.state == ExecutionState.FAILED and run.attempt < schedule.max_retries
            and not run.reason.startswith("cancelled"))


def _still_running(schedule_id: int) -> int:
    return sum(execution.state not in ExecutionState.FINAL for _, execution in _started(schedule_id))


def _fire_schedule(schedule_id: int, moment: datetime) -> None:
    with Session(engine(), expire_on_commit=False) as db:
        schedule = db.get(Schedule, schedule_id)
    if schedule is None or schedule.paused:
        return
    since = schedule.handled_until or schedule.created_at
    due = due_between(schedule, since, moment)
    if not due:
        return
    missed = [time for time in due if (moment - time).total_seconds() > GRACE_SECONDS]
    on_time = [time for time in due if time not in missed]
    if missed and schedule.catch_up == "once":
        for time in missed[:-1]:
            _record(schedule, time, "skipped", f"missed while Lakeport was down; caught up by one run for {missed[-1]:%Y-%m-%d %H:%M} UTC")
        _fire(schedule, missed[-1])
    else:
        for time in missed:
            _record(schedule, time, "skipped", "missed while Lakeport was down (this schedule skips missed times)")
    for time in on_time:
        _fire(schedule, time)
    with Session(engine()) as db:
        row = db.get(Schedule, schedule_id)
        if row is not None and (row.handled_until is None or row.handled_until < due[-1]):
            row.handled_until = due[-1]
            db.add(row)
            db.commit()


def _record(schedule: Schedule, due_at: datetime, outcome: str, reason: str = "",
            attempt: int = 0) -> ScheduledRun | None:
    """The due time's row (of this attempt), or None when another pass handled it first."""
    with Session(engine(), expire_on_commit=False) as db:
        run = ScheduledRun(schedule_id=schedule.id, due_at=due_at, outcome=outcome, reason=reason[:500],
                           attempt=attempt)
        db.add(run)
        try:
            db.commit()
        except IntegrityError:
            db.rollback()
            return None
        return run


def _fire(schedule: Schedule, due_at: datetime, attempt: int = 0) -> None:
    """Start the workflow's latest version for this due time (or its retry), once; or record why not."""
    running = _still_running(schedule.id) if attempt == 0 else 0
    if running >= schedule.max_running:
        _record(schedule, due_at, "skipped", f"{running} run{'s' if running > 1 else ''} of this schedule "
                                              "still going (its limit of runs at once)")
        return
    run = _record(schedule, due_at, "started", attempt=attempt)
    if run is None:
        return  # handled elsewhere
    db = get_db()
    owner, workflow = db.get(User, schedule.owner_id), db.get(Workflow, schedule.workflow_id)
    cu = db.get(ComputeUnit, schedule.compute_unit_id) if schedule.compute_unit_id else None
    warehouse = db.get(Warehouse, schedule.warehouse_id) if schedule.warehouse_id else None
    try:
        execution = runner.start(owner, workflow, latest_version(workflow), cu, warehouse)
    except runner.RunRefused as refusal:
        _settle(run.id, outcome="skipped", reason=refusal.message)
        logger.info("schedule %s at %s skipped: %s", schedule.id, due_at, refusal.message)
        return
    _settle(run.id, execution_id=execution.id)
    logger.info("schedule %s at %s started execution %s", schedule.id, due_at, execution.id)


def _settle(run_id: int, **changes) -> None:
    with Session(engine()) as db:
        run = db.get(ScheduledRun, run_id)
        for name, value in changes.items():
            setattr(run, name, value[:500] if isinstance(value, str) else value)
        db.add(run)
        db.commit()

