"""Accounting: storage and compute per execution, live storage per warehouse, totals per user.

Only the worker measures (`measure`, every USAGE_SAMPLE_SECONDS under the `usage` lease): it
reads table metadata through app/iceberg_reader.py and stores what it found
(`ExecutionUsage`, `StorageSample`). Pages read those rows only, so they cost no catalog or
storage call. Compute comes from rows the portal has: an execution's wall time (started to
ended) times its unit's CPUs and memory (all its nodes).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import delete, func
from sqlmodel import Session, select

from app import iceberg_reader, iceberg_storage
from app.db import engine
from app.iceberg_catalogs import ResultReadError, catalog_for
from app.iceberg_storage import StorageFigure
from app.models import (
    ComputeUnit,
    Execution,
    ExecutionState,
    ExecutionUsage,
    StorageSample,
    User,
    Warehouse,
    WarehouseStatus,
    utcnow,
)
from compute.contract import CONSOLE_LOGS, RUNTIME_STATS, table_name

logger = logging.getLogger(__name__)

USAGE_LEASE = "usage"
# Executions measured per pass (the oldest unmeasured first); the rest wait for the next pass.
EXECUTIONS_PER_PASS = 200
# A warehouse's chart: the last CHART_DAYS, thinned to at most CHART_SAMPLES points.
CHART_DAYS = 30
CHART_SAMPLES = 200
# Samples older than this are deleted by the usage pass.
SAMPLES_KEPT_DAYS = 400


# --- Measuring (the worker) ------------------------------------------------------------------


def measure() -> None:
    """One pass: what finished executions wrote, then the live storage of every warehouse not
    measured within half a period (several workers each start passes; one sample is enough)."""
    measure_executions()
    fresh_since = utcnow() - timedelta(seconds=current_app.config["USAGE_SAMPLE_SECONDS"] / 2)
    with Session(engine()) as db:
        db.exec(
            delete(StorageSample).where(
                StorageSample.measured_at < utcnow() - timedelta(days=SAMPLES_KEPT_DAYS)
            )
        )
        db.commit()
        fresh = set(
            db.exec(
                select(StorageSample.warehouse_id).where(StorageSample.measured_at >= fresh_since)
            )
        )
        # A deactivated warehouse refuses all access in the catalog: its last samples stand.
        warehouses = [
            warehouse
            for warehouse in db.exec(
                select(Warehouse).where(Warehouse.status != WarehouseStatus.INACTIVE)
            )
            if warehouse.id not in fresh
        ]
    for warehouse in warehouses:
        try:
            measure_warehouse(warehouse)
        except ResultReadError as error:
            logger.warning("storage of warehouse %s not measured: %s", warehouse.id, error)


def measure_warehouse(warehouse: Warehouse) -> list[StorageSample]:
    """Live bytes and files per namespace, from each table's current snapshot; stored as samples
    (an empty warehouse gets one sample with no namespace, so its page knows when it was measured)."""
    catalog = catalog_for(warehouse)
    measured_at = utcnow()
    samples = []
    for namespace in iceberg_reader.list_namespaces(catalog):
        figure = iceberg_storage.namespace_storage(catalog, namespace)
        samples.append(
            StorageSample(
                warehouse_id=warehouse.id,
                namespace=namespace,
                tables=figure.tables,
                files=figure.files,
                bytes=figure.bytes,
                measured_at=measured_at,
            )
        )
    if not samples:
        samples.append(
            StorageSample(warehouse_id=warehouse.id, namespace="", measured_at=measured_at)
        )
    with Session(engine(), expire_on_commit=False) as db:
        db.add_all(samples)
        db.commit()
    return samples


def execution_tables(execution: Execution) -> tuple[list[str], list[str]]:
    """The execution's result tables, and its runtime_stats and console_logs tables."""
    outputs = list(json.loads(execution.outputs or "{}").get("outputs", {}).values())
    logs = [table_name(RUNTIME_STATS, execution.id), table_name(CONSOLE_LOGS, execution.id)]
    return outputs, (logs if execution.run_id else [])


def measure_execution(execution: Execution, warehouse: Warehouse) -> ExecutionUsage:
    """What the execution wrote, from its tables' snapshot summaries (`added-files-size`)."""
    catalog = catalog_for(warehouse)
    results, logs = (
        iceberg_storage.tables_written(catalog, tables) for tables in execution_tables(execution)
    )
    return ExecutionUsage(
        execution_id=execution.id,
        results_bytes=results.bytes,
        results_files=results.files,
        logs_bytes=logs.bytes,
        logs_files=logs.files,
    )


def measure_executions(limit: int = EXECUTIONS_PER_PASS) -> int:
    """Measure finished executions not measured yet, newest first; returns how many. A warehouse
    whose catalog fails is not asked again in this pass (its executions wait for the next)."""
    with Session(engine(), expire_on_commit=False) as db:
        rows = db.exec(
            select(Execution, Warehouse)
            .join(Warehouse, Warehouse.id == Execution.warehouse_id)
            .outerjoin(ExecutionUsage, ExecutionUsage.execution_id == Execution.id)
            .where(
                ExecutionUsage.execution_id.is_(None),
                Execution.state.in_(ExecutionState.FINAL),
                Execution.outputs_expired_at.is_(None),
                Execution.stats_expired_at.is_(None),
            )
            .order_by(Execution.id.desc())
            .limit(limit)
        ).all()
    measured, failing = 0, set()
    for execution, warehouse in rows:
        if warehouse.id in failing:
            continue
        try:
            usage = measure_execution(execution, warehouse)
        except ResultReadError as error:
            logger.warning("execution %s not measured: %s", execution.id, error)
            failing.add(warehouse.id)
            continue
        with Session(engine()) as db:
            db.merge(usage)
            db.commit()
        measured += 1
    return measured


# --- Reading (pages) ---------------------------------------------------------------------------


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
