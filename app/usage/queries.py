"""What the usage pages read, from rows the worker stored: no catalog or storage call.

Storage and compute per execution, live storage per warehouse, totals per user; a warehouse's
retention policy, what it would drop now (`plan`) and its log; the latest maintenance job and
the owner's running unit. Compute comes from rows the portal has: an execution's wall time
(started to ended) times its unit's CPUs and memory (all its nodes).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func
from sqlmodel import Session, select

from app.charts import human_bytes
from app.db import engine
from app.iceberg_storage import StorageFigure
from app.models import (
    ComputeUnit,
    Execution,
    ExecutionState,
    ExecutionUsage,
    MaintenanceJob,
    RetentionLogEntry,
    RetentionPolicy,
    StorageSample,
    UnitState,
    User,
    Warehouse,
    utcnow,
)
from compute.contract import CONSOLE_LOGS, RUNTIME_STATS, table_name

# A warehouse's chart: the last CHART_DAYS, thinned to at most CHART_SAMPLES points.
CHART_DAYS = 30
CHART_SAMPLES = 200
LOG_ENTRIES_SHOWN = 20


def execution_tables(execution: Execution) -> tuple[list[str], list[str]]:
    """The execution's result tables, and its runtime_stats and console_logs tables."""
    outputs = list(json.loads(execution.outputs or "{}").get("outputs", {}).values())
    logs = [table_name(RUNTIME_STATS, execution.id), table_name(CONSOLE_LOGS, execution.id)]
    return outputs, (logs if execution.run_id else [])


@dataclass(frozen=True)
class Compute:
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    gib_seconds: float = 0.0

    def __add__(self, other: "Compute") -> "Compute":
        return Compute(
            self.seconds + other.seconds,
            self.cpu_seconds + other.cpu_seconds,
            self.gib_seconds + other.gib_seconds,
        )


def compute_of(execution: Execution, unit: ComputeUnit | None) -> Compute:
    """Wall time × the unit's CPUs and memory over all its nodes (head and workers)."""
    if execution.started_at is None or execution.ended_at is None or unit is None:
        return Compute()
    seconds = max(0.0, (execution.ended_at - execution.started_at).total_seconds())
    nodes = 1 + unit.worker_nodes
    return Compute(seconds, seconds * unit.cpus * nodes, seconds * unit.memory_gb * nodes)


@dataclass(frozen=True)
class Totals:
    days: int
    executions: int
    compute: Compute
    storage: StorageFigure  # written by those executions (measured ones)
    unmeasured: int  # finished executions whose storage is not measured yet


def user_totals(user: User, days: int, now: datetime | None = None) -> Totals:
    """What the user's executions that ended in the last `days` days used."""
    since = (now or utcnow()) - timedelta(days=days)
    with Session(engine()) as db:
        rows = db.exec(
            select(Execution, ComputeUnit, ExecutionUsage)
            .outerjoin(ComputeUnit, ComputeUnit.id == Execution.compute_unit_id)
            .outerjoin(ExecutionUsage, ExecutionUsage.execution_id == Execution.id)
            .where(
                Execution.owner_id == user.id,
                Execution.ended_at.is_not(None),
                Execution.ended_at >= since,
            )
        ).all()
    compute, storage, unmeasured = Compute(), StorageFigure(), 0
    for execution, unit, usage in rows:
        compute += compute_of(execution, unit)
        if usage is None:
            unmeasured += 1
        else:
            storage += StorageFigure(usage.bytes_written, usage.files_written)
    return Totals(days, len(rows), compute, storage, unmeasured)


def latest_samples(warehouse_ids: list[int]) -> dict[int, list[StorageSample]]:
    """Each warehouse's most recent samples (one per namespace), by warehouse id."""
    if not warehouse_ids:
        return {}
    with Session(engine()) as db:
        latest = (
            select(StorageSample.warehouse_id, func.max(StorageSample.measured_at).label("at"))
            .where(StorageSample.warehouse_id.in_(warehouse_ids))
            .group_by(StorageSample.warehouse_id)
            .subquery()
        )
        rows = db.exec(
            select(StorageSample)
            .join(
                latest,
                (StorageSample.warehouse_id == latest.c.warehouse_id)
                & (StorageSample.measured_at == latest.c.at),
            )
            .order_by(StorageSample.namespace)
        ).all()
    found: dict[int, list[StorageSample]] = {}
    for sample in rows:
        found.setdefault(sample.warehouse_id, []).append(sample)
    return found


def storage_history(
    warehouse: Warehouse, days: int = CHART_DAYS, points: int = CHART_SAMPLES
) -> list[tuple[datetime, int]]:
    """(measured at, live bytes of the whole warehouse) over the last `days`, oldest first, at
    most `points` of them evenly spread (the latest always among them)."""
    with Session(engine()) as db:
        rows = db.exec(
            select(StorageSample.measured_at, func.sum(StorageSample.bytes))
            .where(
                StorageSample.warehouse_id == warehouse.id,
                StorageSample.measured_at >= utcnow() - timedelta(days=days),
            )
            .group_by(StorageSample.measured_at)
            .order_by(StorageSample.measured_at)
        ).all()
    step = max(1, -(-len(rows) // points))
    kept = rows[::-1][::step][::-1]
    return [(at, int(total or 0)) for at, total in kept]


def usage_of(execution_id: int) -> ExecutionUsage | None:
    with Session(engine()) as db:
        return db.get(ExecutionUsage, execution_id)


def policy_of(warehouse: Warehouse) -> RetentionPolicy | None:
    with Session(engine()) as db:
        return db.get(RetentionPolicy, warehouse.id)


@dataclass(frozen=True)
class DueTable:
    name: str
    execution_id: int
    kind: str  # results | logs


@dataclass
class Plan:
    """What the policy drops now: tables, and their bytes as measured (None: not measured yet)."""

    tables: list[DueTable] = field(default_factory=list)
    bytes: int = 0
    unmeasured: int = 0  # executions among them whose storage is not measured yet
    results_of: set[int] = field(default_factory=set)  # executions whose results expire
    logs_of: set[int] = field(default_factory=set)  # executions whose stats and logs expire

    @property
    def summary(self) -> str:
        """ "will drop 14 tables, 2.3 GiB"."""
        count = len(self.tables)
        return f"will drop {count} table{'s' if count != 1 else ''}, {human_bytes(self.bytes)}"


def plan(warehouse: Warehouse, policy: RetentionPolicy, now: datetime | None = None) -> Plan:
    """What enforcing `policy` on the warehouse would drop now (database rows only)."""
    now = now or utcnow()
    with Session(engine()) as db:
        rows = db.exec(
            select(Execution, ExecutionUsage)
            .outerjoin(ExecutionUsage, ExecutionUsage.execution_id == Execution.id)
            .where(
                Execution.warehouse_id == warehouse.id,
                Execution.state.in_(ExecutionState.FINAL),
                Execution.ended_at.is_not(None),
            )
            .order_by(Execution.workflow_id, Execution.created_at.desc(), Execution.id.desc())
        ).all()
    result = Plan()
    seen_per_workflow: Counter[int] = Counter()
    for execution, usage in rows:
        results, logs = execution_tables(execution)
        if execution.state == ExecutionState.COMPLETED and results:
            seen_per_workflow[execution.workflow_id] += 1
        if (
            execution.outputs_expired_at is None
            and results
            and execution.state == ExecutionState.COMPLETED
        ):
            if policy.results_mode == "days":
                due = execution.ended_at <= now - timedelta(days=policy.results_value)
            else:
                due = seen_per_workflow[execution.workflow_id] > policy.results_value
            if due:
                result.results_of.add(execution.id)
                result.tables += [DueTable(name, execution.id, "results") for name in results]
                result.bytes += usage.results_bytes if usage else 0
        if (
            policy.logs_days is not None
            and execution.stats_expired_at is None
            and logs
            and execution.ended_at <= now - timedelta(days=policy.logs_days)
        ):
            result.logs_of.add(execution.id)
            result.tables += [DueTable(name, execution.id, "logs") for name in logs]
            result.bytes += usage.logs_bytes if usage else 0
        if usage is None and execution.id in result.results_of | result.logs_of:
            result.unmeasured += 1
    return result


def log_of(warehouse: Warehouse, limit: int = LOG_ENTRIES_SHOWN) -> list[RetentionLogEntry]:
    with Session(engine()) as db:
        return list(
            db.exec(
                select(RetentionLogEntry)
                .where(RetentionLogEntry.warehouse_id == warehouse.id)
                .order_by(RetentionLogEntry.at.desc(), RetentionLogEntry.id.desc())
                .limit(limit)
            )
        )


def running_unit(owner_id: int) -> ComputeUnit | None:
    """One of the owner's RUNNING units (the most recently started), or None."""
    with Session(engine()) as db:
        return db.exec(
            select(ComputeUnit)
            .where(ComputeUnit.owner_id == owner_id, ComputeUnit.state == UnitState.RUNNING)
            .order_by(ComputeUnit.started_at.desc(), ComputeUnit.id.desc())
        ).first()


def latest_job(warehouse: Warehouse) -> MaintenanceJob | None:
    with Session(engine()) as db:
        return db.exec(
            select(MaintenanceJob)
            .where(MaintenanceJob.warehouse_id == warehouse.id, MaintenanceJob.table_name.is_(None))
            .order_by(MaintenanceJob.id.desc())
        ).first()
