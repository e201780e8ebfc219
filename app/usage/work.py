"""The worker's side of usage: the usage pass and maintenance jobs.

- The usage pass (`measure`, every USAGE_SAMPLE_SECONDS under the `usage` lease): what finished
  executions wrote and each warehouse's live storage, read from table metadata through
  app/iceberg_reader.py and stored (`ExecutionUsage`, `StorageSample`) for pages to read.
- A maintenance job (lease `maintenance:<id>`, asked for by the owner: `service.request_maintenance`):
  a catalog token acting as the owner for this one warehouse is minted as for an execution, the
  warehouse's dataset tables are listed, a `maintenance` job runs on the unit's Spark host
  (snapshot expiry, orphan-file clean-up; the portal never runs Spark itself), and what it
  reports is recorded, with a log entry.
- A table's maintenance job (queued by the tables' policy pass, app/tables/work.py, which the
  usage pass runs last): the same job kind on that one table, compacting it and/or expiring its
  snapshots older than the job's `expire_before`; its data files before and after and the
  GB-hours it held the unit (wall time × the unit's memory over its nodes) are recorded. A
  compaction whose table a publish may have started into since it was queued does not run
  (`skipped` says why). A job whose unit was started for it (`started_unit`) waits, QUEUED,
  until that unit runs (or fails if it does not: app/tables/work.py `started_unit_ready`), and
  the unit is stopped once the job has ended (`stop_started_unit`).
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta

from flask import current_app
from sqlalchemy import delete
from sqlmodel import Session, select

from app import iceberg_reader, iceberg_storage, work_registry
from app.compute_units import door
from app.db import engine
from app.iceberg_catalogs import ResultReadError, catalog_for
from app.models import (
    ComputeUnit,
    Execution,
    ExecutionState,
    ExecutionUsage,
    JobState,
    MaintenanceJob,
    StorageSample,
    User,
    Warehouse,
    WarehouseStatus,
    utcnow,
)
from app.tables import queries as table_queries
from app.tables import work as table_work
from app.transitions import compare_and_set
from app.usage import service
from app.usage.queries import execution_tables
from app.workflows.dataset_tables import DATASETS_NAMESPACE, TPCH_NAMESPACE
from compute.contract import JobKind

logger = logging.getLogger(__name__)

USAGE_LEASE = "usage"
# Executions measured per pass (the oldest unmeasured first); the rest wait for the next pass.
EXECUTIONS_PER_PASS = 200
# Samples older than this are deleted by the usage pass.
SAMPLES_KEPT_DAYS = 400
DATASET_NAMESPACES = (DATASETS_NAMESPACE, TPCH_NAMESPACE)
MAINTENANCE_TIMEOUT_SECONDS = 1800.0


# --- The usage pass ------------------------------------------------------------------------------


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
    table_work.apply_policies()


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


# --- Maintenance jobs ---------------------------------------------------------------------------


def _end_maintenance(job_id: int, state: str, **changes) -> None:
    compare_and_set(
        MaintenanceJob, job_id, JobState.LIVE, state=state, ended_at=utcnow(), **changes
    )


def run_maintenance_job(job_id: int) -> None:
    """Run a maintenance job on its unit, record the outcome (a job taken over after a
    worker died is run again: expiring twice is harmless)."""
    with Session(engine(), expire_on_commit=False) as db:
        job = db.get(MaintenanceJob, job_id)
        warehouse = db.get(Warehouse, job.warehouse_id) if job else None
        owner = db.get(User, job.owner_id) if job else None
        unit = db.get(ComputeUnit, job.compute_unit_id) if job and job.compute_unit_id else None
    if job is None or not job.running:
        return
    if job.table_name is not None:
        if (
            job.started_unit
            and job.state == JobState.QUEUED
            and not table_work.started_unit_ready(job)
        ):
            table_work.stop_started_unit(job_id)  # only once the job has ended (its unit failed)
            return
        try:
            run_table_job(job, warehouse, owner, unit)
        finally:
            table_work.stop_started_unit(job_id)
        return
    if not compare_and_set(MaintenanceJob, job_id, JobState.LIVE, state=JobState.RUNNING):
        return
    try:
        outcome = _run_maintenance(job, warehouse, owner, unit)
    except service.MaintenanceRefused as refusal:
        _end_maintenance(job_id, JobState.FAILED, error=refusal.message)
        service.write_log(
            warehouse.id, "snapshots", f"Snapshot expiry did not run: {refusal.message}"
        )
        return
    failed = {name: result["error"] for name, result in outcome.items() if "error" in result}
    expired = sum(
        max(0, r["snapshots_before"] - r["snapshots_after"])
        for r in outcome.values()
        if "error" not in r
    )
    files = sum(
        r.get("deleted_files", 0) + r.get("orphan_files_removed", 0) for r in outcome.values()
    )
    message = (
        f"Snapshot expiry (keep the last {job.retain_last}) on {len(outcome)} dataset tables: "
        f"{expired} snapshots expired, {files} files deleted"
    )
    if failed:
        message += "; failed: " + "; ".join(f"{name}: {error}" for name, error in failed.items())
    _end_maintenance(
        job_id,
        JobState.FAILED if failed else JobState.DONE,
        result=json.dumps(outcome),
        error="; ".join(failed.values()),
    )
    service.write_log(warehouse.id, "snapshots", message, tables=len(outcome))


def run_table_job(
    job: MaintenanceJob, warehouse: Warehouse, owner: User, unit: ComputeUnit | None
) -> None:
    """Compact and/or expire one table on the job's unit; record the files before and after and
    the GB-hours spent (on a unit started for the job, from when it was asked for: its start is
    the job's too). A compaction is not started while a publish to the table may be in flight
    (one may have started since the job was queued)."""
    if job.compact and (in_flight := table_queries.publishes_in_flight(warehouse, job.table_name)):
        _end_maintenance(
            job.id,
            JobState.DONE,
            skipped=f"a publish to this table may be in flight (execution #{in_flight[0]})",
        )
        return
    started = utcnow()
    if not compare_and_set(
        MaintenanceJob, job.id, JobState.LIVE, state=JobState.RUNNING, started_at=started
    ):
        return
    extra = {"compact": job.compact, "expire_before_ms": None}
    if job.expire_before is not None:
        extra["expire_before_ms"] = int(job.expire_before.timestamp() * 1000)
    try:
        outcome = _run_maintenance(job, warehouse, owner, unit, [job.table_name], extra)
    except service.MaintenanceRefused as refusal:
        _end_maintenance(job.id, JobState.FAILED, error=refusal.message)
        return
    result = outcome.get(job.table_name, {"error": "the unit reported nothing of the table"})
    ended = utcnow()
    _end_maintenance(
        job.id,
        JobState.FAILED if "error" in result else JobState.DONE,
        result=json.dumps(result),
        error=str(result.get("error", "")),
        data_files_before=result.get("data_files_before", job.data_files_before),
        data_files_after=result.get("data_files_after"),
        gb_hours=_gb_hours(
            unit, (ended - (job.created_at if job.started_unit else started)).total_seconds()
        ),
    )


def _gb_hours(unit: ComputeUnit | None, seconds: float) -> float | None:
    if unit is None:
        return None
    return seconds / 3600 * unit.memory_gb * (1 + unit.worker_nodes)


def _dataset_tables(warehouse: Warehouse) -> list[str]:
    catalog = catalog_for(warehouse)
    return [
        name
        for namespace in iceberg_reader.list_namespaces(catalog)
        if namespace in DATASET_NAMESPACES
        for name in iceberg_reader.table_names(catalog, namespace)
    ]


def _run_maintenance(
    job: MaintenanceJob,
    warehouse: Warehouse,
    owner: User,
    unit: ComputeUnit | None,
    tables: list[str] | None = None,
    extra: dict | None = None,
) -> dict:
    """Run the job on its unit: on `tables` (by default the warehouse's datasets), with the
    job kind's `extra` arguments (a table's policy job: compact, expire_before_ms)."""
    try:
        with door.UnitDoor.running(unit.id if unit else None) as unit_door:
            tables = _dataset_tables(warehouse) if tables is None else tables
            if not tables:
                return {}
            args = {
                "warehouse": {"id": warehouse.id, "lakekeeper_id": warehouse.lakekeeper_id},
                "catalog": door.catalog_binding(warehouse, door.run_token(warehouse, owner)),
                "tables": tables,
                "retain_last": job.retain_last,
                "remove_orphans": job.remove_orphans,
                **(extra or {}),
            }
            return unit_door.run_to_end(
                JobKind.MAINTENANCE,
                args,
                name=f"maintenance-{job.id}",
                timeout_s=MAINTENANCE_TIMEOUT_SECONDS,
            )
    except (
        door.UnitUnavailable,
        door.NoCatalogToken,
        door.RunNotCompleted,
        ResultReadError,
    ) as error:
        raise service.MaintenanceRefused(str(error)) from None


work_registry.periodic_pass(
    USAGE_LEASE, "USAGE_SAMPLE_SECONDS", measure, work_registry.FirstPass.SOON
)
work_registry.pending_source(
    "maintenance",
    work_registry.JOBS + 3,
    lambda: work_registry.live_jobs(MaintenanceJob, "maintenance", run_maintenance_job),
)
