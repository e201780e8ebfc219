"""The worker's side of schedules: fire each due time exactly once.

One pass (`fire_due`, under the worker's lease "scheduler") looks at every active schedule's
due times since the one it handled last. Each due time is recorded as a `ScheduledRun` row
before anything is started, and the row's (schedule, due time) is unique: whatever the number
of workers, their restarts or a pass that runs twice, a due time is handled once (the second
insert fails and that worker moves on). The clock is `service.now()`, which a test may replace; a
clock that jumps back finds its due times handled already, one that jumps ahead finds them missed.

Times missed while no worker ran (more than GRACE_SECONDS late) follow the schedule's catch-up
policy: `skip` records each as skipped; `once` runs the latest and records the rest as caught up.
A due time whose unit is not running, whose warehouse takes no runs, or that finds
`max_running` of the schedule's runs still going is recorded as skipped, with the reason; with
`start_unit`, a unit that has ended is copied and started for the run instead (the due time
"waiting" until it runs, the schedule naming the copy from then on), and stopped once the run and
its retries are over. Each pass also cancels runs over the schedule's timeout, and retries a
failed run (a row of its own, `attempt` 1, 2…, as unique as the first) once its backoff has passed.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app import leases, roles, work_registry
from app.compute_units import queries as unit_queries
from app.compute_units import service as unit_service
from app.db import engine, get_db
from app.executions import delivery
from app.executions import service as execution_service
from app.models import (
    ComputeUnit,
    Execution,
    ExecutionState,
    Schedule,
    ScheduledRun,
    UnitState,
    User,
    Warehouse,
    Workflow,
)
from app.schedules import service
from app.schedules.service import due_between
from app.transitions import set_fields
from app.untrusted import fit_column
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
        if not leases.still_held():
            return  # the worker stops, or another took the pass over: it goes on from here
        try:
            _follow_waiting(schedule_id)
            _follow_runs(schedule_id, moment)
            _fire_schedule(schedule_id, moment)
        except Exception:
            logger.exception("schedule %s: its due times could not be handled", schedule_id)
    delivery.queue_ended_executions()


def _started(schedule_id: int) -> list[tuple[ScheduledRun, Execution]]:
    """The schedule's runs that started an execution, with it, the newest attempt of each due time last."""
    with Session(engine(), expire_on_commit=False) as db:
        return list(
            db.exec(
                select(ScheduledRun, Execution)
                .join(Execution, Execution.id == ScheduledRun.execution_id)
                .where(ScheduledRun.schedule_id == schedule_id)
                .order_by(ScheduledRun.due_at, ScheduledRun.attempt)
            )
        )


def _follow_runs(schedule_id: int, moment: datetime) -> None:
    """Cancel what is over its timeout; retry the last attempt of a due time that FAILED."""
    with Session(engine(), expire_on_commit=False) as db:
        schedule = db.get(Schedule, schedule_id)
    latest: dict[datetime, tuple[ScheduledRun, Execution]] = {}
    for run, execution in _started(schedule_id):
        latest[run.due_at] = (run, execution)
        if schedule.notify_on and not _will_retry(schedule, run, execution):
            delivery.queue(schedule, execution)
        if (
            schedule.timeout_minutes
            and execution.state not in ExecutionState.FINAL
            and not run.reason
            and moment - execution.created_at > timedelta(minutes=schedule.timeout_minutes)
        ):
            _settle(run.id, reason=f"cancelled: over its timeout of {schedule.timeout_minutes} min")
            try:
                execution_service.cancel(get_db().get(Execution, execution.id))
            except execution_service.RunRefused:
                pass  # it ended meanwhile
    for run, execution in latest.values():
        if _will_retry(schedule, run, execution):
            if moment >= (execution.ended_at or execution.created_at) + timedelta(
                seconds=schedule.retry_backoff_seconds * 2**run.attempt
            ):
                _fire(
                    schedule,
                    run.due_at,
                    attempt=run.attempt + 1,
                    started_unit_id=run.started_unit_id,
                )
        elif run.started_unit_id and execution.state in ExecutionState.FINAL:
            _stop_started_unit(run, "its scheduled run has ended")


def _follow_waiting(schedule_id: int) -> None:
    """Run each due time waiting for the unit it started once that unit runs; give up on one
    that ended or takes too long to start."""
    with Session(engine(), expire_on_commit=False) as db:
        schedule = db.get(Schedule, schedule_id)
        waiting = db.exec(
            select(ScheduledRun).where(
                ScheduledRun.schedule_id == schedule_id, ScheduledRun.outcome == "waiting"
            )
        ).all()
    for run in waiting:
        unit = get_db().get(ComputeUnit, run.started_unit_id) if run.started_unit_id else None
        given_up = unit_service.started_unit_given_up(unit, run.created_at)
        if given_up:
            _settle(run.id, outcome="skipped", reason=f"the unit started for this run {given_up}")
            _stop_started_unit(run, "it did not start in time for its scheduled run")
        elif unit.state == UnitState.RUNNING:
            _start_execution(schedule, run, unit)


def _stop_started_unit(run: ScheduledRun, why: str) -> None:
    """Stop the unit a due time started, unless something else now runs on it."""
    unit = get_db().get(ComputeUnit, run.started_unit_id)
    if (
        unit is None
        or unit.state not in (UnitState.PENDING, UnitState.STARTING, UnitState.RUNNING)
        or unit_queries.running_executions(unit)
    ):
        return
    unit_service.terminate(unit, reason=f"stopped by its schedule: {why}")
    logger.info("schedule %s: stopped unit %s (%s)", run.schedule_id, unit.id, why)


def _will_retry(schedule: Schedule, run: ScheduledRun, execution: Execution) -> bool:
    """A failed attempt with retries left (one cancelled for its timeout is not retried)."""
    return (
        execution.state == ExecutionState.FAILED
        and run.attempt < schedule.max_retries
        and not run.reason.startswith("cancelled")
    )


def _still_running(schedule_id: int) -> int:
    """The schedule's runs still going: waiting for their unit, starting (a row whose execution
    another pass is creating this moment) or with an execution not ended."""
    with Session(engine()) as db:
        rows = db.exec(
            select(ScheduledRun.outcome, Execution.state)
            .join(Execution, Execution.id == ScheduledRun.execution_id, isouter=True)
            .where(
                ScheduledRun.schedule_id == schedule_id,
                ScheduledRun.outcome.in_(("started", "waiting")),
            )
        ).all()
    return sum(state is None or state not in ExecutionState.FINAL for _, state in rows)


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
            _record(
                schedule,
                time,
                "skipped",
                f"missed while Lakeport was down; caught up by one run for {missed[-1]:%Y-%m-%d %H:%M} UTC",
            )
        _fire(schedule, missed[-1])
    else:
        for time in missed:
            _record(
                schedule,
                time,
                "skipped",
                "missed while Lakeport was down (this schedule skips missed times)",
            )
    for time in on_time:
        _fire(schedule, time)
    with Session(engine()) as db:
        row = db.get(Schedule, schedule_id)
        if row is not None and (row.handled_until is None or row.handled_until < due[-1]):
            row.handled_until = due[-1]
            db.add(row)
            db.commit()


def _record(
    schedule: Schedule,
    due_at: datetime,
    outcome: str,
    reason: str = "",
    attempt: int = 0,
    started_unit_id: int | None = None,
) -> ScheduledRun | None:
    """The due time's row (of this attempt), or None when another pass handled it first."""
    with Session(engine(), expire_on_commit=False) as db:
        run = ScheduledRun(
            schedule_id=schedule.id,
            due_at=due_at,
            outcome=outcome,
            reason=fit_column(reason, ScheduledRun.__table__.c.reason, "a scheduled run's reason"),
            attempt=attempt,
            started_unit_id=started_unit_id,
        )
        db.add(run)
        try:
            db.commit()
        except IntegrityError:
            db.rollback()
            return None
        return run


def _fire(
    schedule: Schedule, due_at: datetime, attempt: int = 0, started_unit_id: int | None = None
) -> None:
    """Start the workflow's latest version for this due time (or its retry), once; or start the
    unit it needs first; or record why not."""
    running = _still_running(schedule.id) if attempt == 0 else 0
    if running >= schedule.max_running:
        _record(
            schedule,
            due_at,
            "skipped",
            f"{running} run{'s' if running > 1 else ''} of this schedule "
            "still going (its limit of runs at once)",
        )
        return
    db = get_db()
    if roles.suspended(db.get(User, schedule.owner_id)):
        # The provider refused its owner (app/auth/work.py): nothing runs as them until they sign in.
        _record(
            schedule,
            due_at,
            "skipped",
            "its owner's sign-in was refused by the identity provider; "
            "it runs again once they sign in",
        )
        return
    unit = db.get(ComputeUnit, schedule.compute_unit_id) if schedule.compute_unit_id else None
    needs_unit = schedule.start_unit and unit is not None and unit.state in UnitState.FINAL
    run = _record(
        schedule,
        due_at,
        "waiting" if needs_unit else "started",
        attempt=attempt,
        started_unit_id=started_unit_id,
    )
    if run is None:
        return  # handled elsewhere
    if needs_unit:
        _start_unit(schedule, run, unit)
    else:
        _start_execution(schedule, run, unit)


def _start_unit(schedule: Schedule, run: ScheduledRun, ended: ComputeUnit) -> None:
    """Start a copy of the schedule's ended unit for this due time; the schedule names it from now on."""
    db = get_db()
    values = {
        field: getattr(ended, field)
        for field in ("name", "kind", "cpus", "memory_gb", "worker_nodes", "ray_cluster")
    }
    try:
        unit = unit_service.create(db.get(User, schedule.owner_id), values)
    except unit_service.ComputeUnitError as refusal:
        _settle(
            run.id, outcome="skipped", reason=f"its unit could not be started: {refusal.message}"
        )
        return
    _settle(run.id, started_unit_id=unit.id)
    set_fields(Schedule, schedule.id, compute_unit_id=unit.id)
    logger.info("schedule %s at %s started unit %s for its run", schedule.id, run.due_at, unit.id)


def _start_execution(schedule: Schedule, run: ScheduledRun, cu: ComputeUnit | None) -> None:
    db = get_db()
    owner, workflow = db.get(User, schedule.owner_id), db.get(Workflow, schedule.workflow_id)
    warehouse = db.get(Warehouse, schedule.warehouse_id) if schedule.warehouse_id else None
    try:
        execution = execution_service.start(
            owner, workflow, latest_version(workflow), cu, warehouse
        )
    except execution_service.RunRefused as refusal:
        _settle(run.id, outcome="skipped", reason=refusal.message)
        logger.info("schedule %s at %s skipped: %s", schedule.id, run.due_at, refusal.message)
        if run.started_unit_id:
            _stop_started_unit(run, "its scheduled run could not start")
        return
    _settle(run.id, outcome="started", execution_id=execution.id)
    logger.info("schedule %s at %s started execution %s", schedule.id, run.due_at, execution.id)


def _settle(run_id: int, **changes) -> None:
    set_fields(
        ScheduledRun,
        run_id,
        **{
            name: value[:500] if isinstance(value, str) else value
            for name, value in changes.items()
        },
    )


work_registry.periodic_pass(LEASE, "SCHEDULER_SECONDS", fire_due, work_registry.FirstPass.AT_ONCE)
