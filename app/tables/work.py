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
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import exists
from sqlmodel import Session, select

from app.db import engine
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
    Warehouse,
    WarehouseStatus,
    utcnow,
)
from app.states import QueryState
from app.tables import queries

logger = logging.getLogger(__name__)

COMPACTION_SPACING = timedelta(hours=1)
NO_UNIT = "no compute unit of the warehouse's owner was running"
BUSY_UNITS = "every running compute unit of the warehouse's owner was busy"


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
    if unit is None:
        return _skip(job, latest, reason)
    job.compute_unit_id = unit.id
    return _save(job)


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
        busy = (
            exists().where(
                Execution.compute_unit_id == ComputeUnit.id,
                Execution.state.not_in(ExecutionState.FINAL),
            )
            | exists().where(
                Query.compute_unit_id == ComputeUnit.id, Query.state.in_(QueryState.LIVE)
            )
            | exists().where(
                MaintenanceJob.compute_unit_id == ComputeUnit.id,
                MaintenanceJob.state.in_(JobState.LIVE),
            )
        )
        idle = set(
            db.exec(
                select(ComputeUnit.id).where(ComputeUnit.id.in_([unit.id for unit in units]), ~busy)
            )
        )
    return next((unit for unit in units if unit.id in idle), None), BUSY_UNITS


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
    with Session(engine()) as db:
        return (
            db.exec(
                select(MaintenanceJob.id).where(
                    MaintenanceJob.warehouse_id == warehouse_id,
                    MaintenanceJob.table_name == table_name,
                    MaintenanceJob.compact.is_(True),
                    MaintenanceJob.skipped == "",
                    MaintenanceJob.created_at >= since,
                )
            ).first()
            is not None
        )


def _skip(job: MaintenanceJob, latest: MaintenanceJob | None, reason: str) -> MaintenanceJob:
    """Record the job as not run, with why; once: the same reason as the last job's is not
    recorded again."""
    if latest is not None and latest.skipped == reason:
        return latest
    job.state, job.skipped, job.ended_at = JobState.DONE, reason, utcnow()
    return _save(job)


def _save(job: MaintenanceJob) -> MaintenanceJob:
    with Session(engine(), expire_on_commit=False) as db:
        db.add(job)
        db.commit()
        return job
