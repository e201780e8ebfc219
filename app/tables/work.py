"""The worker's side of table policies: the policy pass, run at the end of each usage pass
(app/usage/work.py `measure`, under the `usage` lease, every USAGE_SAMPLE_SECONDS).

For each policy of an active warehouse, with no maintenance of that table live: the table's
health is read; compaction is due when its small files reach the policy's threshold, expiry when
a snapshot other than the current one is older than the policy's age (and older than every
snapshot a pinned re-run reads: `queries.expire_before`). What is due is queued as one
`MaintenanceJob` of that table on an idle RUNNING unit of the warehouse's owner (one with no
live execution, query or maintenance), which the maintenance job source runs
(app/usage/work.py `run_maintenance_job`, the `maintenance` job kind on the unit). It is not
queued, and a DONE job records why (`skipped`; once until the reason changes), when a publish to
the table may be in flight, or when no unit of the owner's is running or idle. A compaction that
ran less than COMPACTION_SPACING ago is not asked again (small files it could not merge would
ask for it every pass).

A unit started for it: with the policy's `start_unit`, a due job that finds no idle unit starts
one for itself instead of being skipped, as the SQL console's "start one for me" does: a local
unit of the warm pool's size (LAKEPORT_CU_POOL_CPUS, _MEMORY_GB, no worker nodes), claimed from
the pool when one is ready, else started, within the owner's unit limit (a refusal is recorded
as the skip's reason). The job is queued on it at once, marked `started_unit`, and waits QUEUED
while it starts (`started_unit_ready`, asked by the job's runner); the table's live job keeps a
second unit from being started for it meanwhile. A unit that ends before it runs, or is not
RUNNING after START_PATIENCE (app/compute_units/service.py, as for a schedule's), fails the job
with why; and once the job has ended (done, skipped at its start, failed) the unit is stopped
(`stop_started_unit`), unless something else now runs on it. After such a failed start, no unit is started for that table for START_SPACING (the job
is skipped, saying so) rather than one failing start every pass.
"""

from __future__ import annotations

import logging
import secrets
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import exists
from sqlmodel import Session, select

from app.compute_units import pool
from app.compute_units import service as unit_service
from app.db import engine, get_db
from app.iceberg_catalogs import ResultReadError
from app.models import (
    ComputeUnit,
    Execution,
    ExecutionState,
    JobState,
    MaintenanceJob,
    Query,
    TablePolicy,
    UnitState,
    User,
    Warehouse,
    WarehouseStatus,
    utcnow,
)
from app.states import QueryState
from app.tables import queries
from app.transitions import compare_and_set

logger = logging.getLogger(__name__)

COMPACTION_SPACING = timedelta(hours=1)
NO_UNIT = "no compute unit of the warehouse's owner was running"
BUSY_UNITS = "every running compute unit of the warehouse's owner was busy"
# After a unit started for a table's job did not start, none is started for that table for this long.
START_SPACING = timedelta(hours=1)
STARTED_UNIT_NAME = "maintenance-"
# The states of a unit started for a job that `stop_started_unit` stops.
STOPPABLE = (UnitState.PENDING, UnitState.STARTING, UnitState.RUNNING)


def apply_policies(now: datetime | None = None) -> list[MaintenanceJob]:
    """One policy pass over every table policy; returns the jobs it queued. A table whose
    catalog fails is logged and left for the next pass."""
    now = now or utcnow()
    with Session(engine(), expire_on_commit=False) as db:
        rows = db.exec(
            select(TablePolicy, Warehouse)
            .join(Warehouse, Warehouse.id == TablePolicy.warehouse_id)
            .where(
                Warehouse.status == WarehouseStatus.ACTIVE,
                (TablePolicy.compact_small_files.is_not(None))
                | (TablePolicy.expire_days.is_not(None)),
            )
            .order_by(TablePolicy.id)
        ).all()
    queued = []
    for policy, warehouse in rows:
        try:
            job = apply_policy(policy, warehouse, now)
        except ResultReadError as error:
            logger.warning(
                "table %s of warehouse %s not checked: %s", policy.table_name, warehouse.id, error
            )
            continue
        if job is not None and not job.skipped:
            queued.append(job)
    return queued


def apply_policy(policy: TablePolicy, warehouse: Warehouse, now: datetime) -> MaintenanceJob | None:
    """Queue (or record as skipped) the maintenance the policy asks of its table now; None when
    nothing is due or a maintenance of the table is live."""
    latest = _latest_job(warehouse.id, policy.table_name)
    if latest is not None and latest.running:
        return None
    health = queries.health(warehouse, policy.table_name, policy)
    compact = (
        policy.compact_small_files is not None
        and health.small_files >= policy.compact_small_files
        and not _compacted_since(warehouse.id, policy.table_name, now - COMPACTION_SPACING)
    )
    before = None
    if policy.expire_days is not None:
        cutoff = queries.expire_before(
            health,
            queries.pinned_snapshots(warehouse, policy.table_name),
            now,
            policy.expire_days,
        )
        before = cutoff if queries.expiry_due(health, cutoff) else None
    if not compact and before is None:
        return None
    job = MaintenanceJob(
        owner_id=warehouse.owner_id,
        warehouse_id=warehouse.id,
        table_name=policy.table_name,
        retain_last=1,
        compact=compact,
        expire_before=before,
        data_files_before=health.data_files,
    )
    if in_flight := queries.publishes_in_flight(warehouse, policy.table_name):
        return _skip(
            job, latest, f"a publish to this table may be in flight (execution #{in_flight[0]})"
        )
    unit, reason = idle_unit(warehouse.owner_id)
    if unit is None and policy.start_unit:
        return _start_unit_for(job, latest, reason, now)
    if unit is None:
        return _skip(job, latest, reason)
    job.compute_unit_id = unit.id
    return _save(job)


def _start_unit_for(
    job: MaintenanceJob, latest: MaintenanceJob | None, why: str, now: datetime
) -> MaintenanceJob:
    """Start a unit of the pool's size for the job (claimed from the pool when one is ready) and
    queue the job on it; or record the job as skipped, with why no unit was started."""
    if _start_failed_since(job.warehouse_id, job.table_name, now - START_SPACING):
        return _skip(
            job,
            latest,
            f"{why}; a unit started for this table's maintenance did not start within the "
            f"last {START_SPACING.total_seconds() / 3600:g} h",
        )
    values = {
        **pool.unit_values(current_app.config),
        "name": f"{STARTED_UNIT_NAME}{secrets.token_hex(3)}",
    }
    try:
        unit = unit_service.create(get_db().get(User, job.owner_id), values)
    except unit_service.ComputeUnitError as refusal:
        return _skip(job, latest, f"{why}; no unit could be started for it: {refusal.message}")
    job.compute_unit_id, job.started_unit = unit.id, True
    try:
        job = _save(job)
    except Exception:
        unit_service.terminate(unit, reason="stopped: its maintenance job could not be recorded")
        raise
    logger.info(
        "table %s of warehouse %s: unit %s started for maintenance job %s",
        job.table_name,
        job.warehouse_id,
        unit.id,
        job.id,
    )
    return job


def started_unit_ready(job: MaintenanceJob) -> bool:
    """A QUEUED job whose unit was started for it may run: its unit is RUNNING. While the unit
    starts, False (the job waits); a unit that ended, or is not RUNNING after START_PATIENCE,
    fails the job with why and False (`stop_started_unit` then stops the unit)."""
    with Session(engine(), expire_on_commit=False) as db:
        unit = db.get(ComputeUnit, job.compute_unit_id) if job.compute_unit_id else None
    given_up = unit_service.started_unit_given_up(unit, job.created_at)
    if given_up is None:
        return unit.state == UnitState.RUNNING
    error = f"the unit started for it {given_up}"
    compare_and_set(
        MaintenanceJob,
        job.id,
        (JobState.QUEUED,),
        state=JobState.FAILED,
        error=error[:2000],
        ended_at=utcnow(),
    )
    return False


def stop_started_unit(job_id: int) -> None:
    """Stop the unit started for this job once the job has ended, unless something else now runs
    on it (an execution, a console query or another maintenance job: it is the owner's unit)."""
    with Session(engine(), expire_on_commit=False) as db:
        job = db.get(MaintenanceJob, job_id)
    if job is None or not job.started_unit or job.running or job.compute_unit_id is None:
        return
    db = get_db()
    db.expire_all()
    unit = db.get(ComputeUnit, job.compute_unit_id)
    if unit is None or unit.state not in STOPPABLE or _busy_units([unit.id]):
        return
    unit_service.terminate(
        unit, reason=f"stopped by its table's maintenance: job {job.id} it was started for ended"
    )
    logger.info("maintenance job %s: stopped unit %s started for it", job.id, unit.id)


def idle_unit(owner_id: int) -> tuple[ComputeUnit | None, str]:
    """The owner's most recently started RUNNING unit with no live execution, query or
    maintenance on it; or None and why."""
    with Session(engine(), expire_on_commit=False) as db:
        units = db.exec(
            select(ComputeUnit)
            .where(ComputeUnit.owner_id == owner_id, ComputeUnit.state == UnitState.RUNNING)
            .order_by(ComputeUnit.started_at.desc(), ComputeUnit.id.desc())
        ).all()
    if not units:
        return None, NO_UNIT
    busy = _busy_units([unit.id for unit in units])
    return next((unit for unit in units if unit.id not in busy), None), BUSY_UNITS


def _busy_units(unit_ids: list[int]) -> set[int]:
    """Those of the units with a live execution, console query or maintenance job on them."""
    busy = (
        exists().where(
            Execution.compute_unit_id == ComputeUnit.id,
            Execution.state.not_in(ExecutionState.FINAL),
        )
        | exists().where(Query.compute_unit_id == ComputeUnit.id, Query.state.in_(QueryState.LIVE))
        | exists().where(
            MaintenanceJob.compute_unit_id == ComputeUnit.id,
            MaintenanceJob.state.in_(JobState.LIVE),
        )
    )
    with Session(engine()) as db:
        return set(db.exec(select(ComputeUnit.id).where(ComputeUnit.id.in_(unit_ids), busy)))


def _latest_job(warehouse_id: int, table_name: str) -> MaintenanceJob | None:
    with Session(engine(), expire_on_commit=False) as db:
        return db.exec(
            select(MaintenanceJob)
            .where(
                MaintenanceJob.warehouse_id == warehouse_id,
                MaintenanceJob.table_name == table_name,
            )
            .order_by(MaintenanceJob.id.desc())
        ).first()


def _compacted_since(warehouse_id: int, table_name: str, since: datetime) -> bool:
    return _a_job(
        warehouse_id,
        table_name,
        MaintenanceJob.compact.is_(True),
        MaintenanceJob.skipped == "",
        MaintenanceJob.created_at >= since,
    )


def _start_failed_since(warehouse_id: int, table_name: str, since: datetime) -> bool:
    """A job of the table failed since `since` before it ran because its started unit did not
    start (it never reached RUNNING: no `started_at`)."""
    return _a_job(
        warehouse_id,
        table_name,
        MaintenanceJob.started_unit.is_(True),
        MaintenanceJob.state == JobState.FAILED,
        MaintenanceJob.started_at.is_(None),
        MaintenanceJob.ended_at >= since,
    )


def _a_job(warehouse_id: int, table_name: str, *conditions) -> bool:
    """Whether the table has a maintenance job that meets `conditions`."""
    with Session(engine()) as db:
        return (
            db.exec(
                select(MaintenanceJob.id).where(
                    MaintenanceJob.warehouse_id == warehouse_id,
                    MaintenanceJob.table_name == table_name,
                    *conditions,
                )
            ).first()
            is not None
        )


def _skip(job: MaintenanceJob, latest: MaintenanceJob | None, reason: str) -> MaintenanceJob:
    """Record the job as not run, with why; once: the same reason as the last job's is not
    recorded again."""
    reason = reason[:500]
    if latest is not None and latest.skipped == reason:
        return latest
    job.state, job.skipped, job.ended_at = JobState.DONE, reason, utcnow()
    return _save(job)


def _save(job: MaintenanceJob) -> MaintenanceJob:
    with Session(engine(), expire_on_commit=False) as db:
        db.add(job)
        db.commit()
        return job
