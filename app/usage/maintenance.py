"""Snapshot expiry and orphan-file clean-up of a warehouse's datasets, on one of its owner's
running compute units (the portal never runs Spark itself).

The owner asks (a `MaintenanceJob` row, only while one of their units runs); the worker takes
the job (lease `maintenance:<id>`), mints a catalog token acting as the owner for this one
warehouse as it does for an execution, lists the warehouse's dataset tables, submits
`MAINTENANCE_CODE` to the unit's Spark host and records what it reports, and a log entry.
"""

from __future__ import annotations

import json
import logging

from sqlmodel import Session, select

from app import iceberg_reader
from app.compute_units import door
from app.db import engine
from app.errors import UserFacingError
from app.iceberg_catalogs import ResultReadError, catalog_for
from app.models import (
    ComputeUnit,
    JobState,
    MaintenanceJob,
    UnitState,
    User,
    Warehouse,
    WarehouseStatus,
    utcnow,
)
from app.transitions import compare_and_set
from app.usage.retention import write_log
from app.workflows.datasets import DATASETS_NAMESPACE, TPCH_NAMESPACE
from compute.contract import MAINTENANCE_CODE

logger = logging.getLogger(__name__)

DATASET_NAMESPACES = (DATASETS_NAMESPACE, TPCH_NAMESPACE)
RUN_TIMEOUT_SECONDS = 1800.0


class MaintenanceRefused(UserFacingError):
    """A maintenance run was refused or failed on the unit."""


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
            .where(MaintenanceJob.warehouse_id == warehouse.id)
            .order_by(MaintenanceJob.id.desc())
        ).first()


def request(warehouse: Warehouse, retain_last: int | None, remove_orphans: bool) -> MaintenanceJob:
    """Queue a maintenance job for the worker; refused without a policy, a running unit, or
    while one is under way."""
    if retain_last is None:
        raise MaintenanceRefused(
            "Set how many snapshots datasets keep in the retention policy first."
        )
    if warehouse.status != WarehouseStatus.ACTIVE:
        raise MaintenanceRefused("Only an active warehouse can be maintained.")
    unit = running_unit(warehouse.owner_id)
    if unit is None:
        raise MaintenanceRefused(
            "None of your compute units is running: start one, then expire snapshots."
        )
    latest = latest_job(warehouse)
    if latest is not None and latest.running:
        raise MaintenanceRefused("A maintenance of this warehouse is under way.")
    with Session(engine(), expire_on_commit=False) as db:
        job = MaintenanceJob(
            owner_id=warehouse.owner_id,
            warehouse_id=warehouse.id,
            compute_unit_id=unit.id,
            retain_last=retain_last,
            remove_orphans=remove_orphans,
        )
        db.add(job)
        db.commit()
        return job


def _end(job_id: int, state: str, **changes) -> None:
    compare_and_set(
        MaintenanceJob, job_id, JobState.LIVE, state=state, ended_at=utcnow(), **changes
    )


def run_job(job_id: int) -> None:
    """The worker's part: run the job on its unit, record the outcome (a job taken over after a
    worker died is run again: expiring twice is harmless)."""
    with Session(engine(), expire_on_commit=False) as db:
        job = db.get(MaintenanceJob, job_id)
        warehouse = db.get(Warehouse, job.warehouse_id) if job else None
        owner = db.get(User, job.owner_id) if job else None
        unit = db.get(ComputeUnit, job.compute_unit_id) if job and job.compute_unit_id else None
    if job is None or not job.running:
        return
    if not compare_and_set(MaintenanceJob, job_id, JobState.LIVE, state=JobState.RUNNING):
        return
    try:
        outcome = _run(job, warehouse, owner, unit)
    except MaintenanceRefused as refusal:
        _end(job_id, JobState.FAILED, error=refusal.message[:2000])
        write_log(warehouse.id, "snapshots", f"Snapshot expiry did not run: {refusal.message}")
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
    _end(
        job_id,
        JobState.FAILED if failed else JobState.DONE,
        result=json.dumps(outcome),
        error="; ".join(failed.values())[:2000],
    )
    write_log(warehouse.id, "snapshots", message, tables=len(outcome))


def _run(job: MaintenanceJob, warehouse: Warehouse, owner: User, unit: ComputeUnit | None) -> dict:
    try:
        unit, handle = door.running_host(unit.id if unit else None)
        catalog = catalog_for(warehouse)
        tables = [
            name
            for namespace in iceberg_reader.list_namespaces(catalog)
            if namespace in DATASET_NAMESPACES
            for name in iceberg_reader.table_names(catalog, namespace)
        ]
        if not tables:
            return {}
        args = {
            "warehouse": {"id": warehouse.id, "lakekeeper_id": warehouse.lakekeeper_id},
            "catalog": door.catalog_binding(warehouse, door.run_token(warehouse, owner)),
            "tables": tables,
            "retain_last": job.retain_last,
            "remove_orphans": job.remove_orphans,
        }
        return door.run_to_end(
            unit,
            handle,
            MAINTENANCE_CODE,
            args,
            name=f"maintenance-{job.id}",
            timeout_s=RUN_TIMEOUT_SECONDS,
        )
    except (
        door.UnitUnavailable,
        door.NoCatalogToken,
        door.RunNotCompleted,
        ResultReadError,
    ) as error:
        raise MaintenanceRefused(str(error)) from None
