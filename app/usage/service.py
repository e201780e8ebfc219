"""What owners do with their warehouses' usage: a retention policy saved and enforced (the
confirmed preview's tables dropped through Lakekeeper, their executions marked, a log entry), and
a maintenance (snapshot expiry) asked of the worker, only while one of their units runs.

Enforcement is two steps, like a purge: the owner previews (the tables and their bytes, from the
stored usage rows: no catalog call; `queries.plan`), then confirms exactly that list; what is
still due of it is dropped with purge through Lakekeeper, the executions are marked
(`outputs_expired_at`, `stats_expired_at`; the rows stay, with their compute figures and, while
kept, their stats), and one log entry says what went.
"""

from __future__ import annotations

from sqlmodel import Session, select

from app.db import engine
from app.errors import UserFacingError
from app.extensions import lakekeeper
from app.lakekeeper.errors import LakekeeperError
from app.lakekeeper.resources import TableIdentifier
from app.models import (
    Execution,
    ExecutionUsage,
    MaintenanceJob,
    RetentionLogEntry,
    RetentionPolicy,
    Warehouse,
    WarehouseStatus,
    utcnow,
)
from app.usage import queries
from app.usage.queries import DueTable


class RetentionError(UserFacingError):
    """An enforcement failed; `message` is for the owner."""


class MaintenanceRefused(UserFacingError):
    """A maintenance run was refused or failed on the unit."""


def save_policy(warehouse: Warehouse, values: dict) -> RetentionPolicy:
    with Session(engine(), expire_on_commit=False) as db:
        policy = db.get(RetentionPolicy, warehouse.id) or RetentionPolicy(warehouse_id=warehouse.id)
        for key, value in values.items():
            setattr(policy, key, value)
        policy.updated_at = utcnow()
        db.add(policy)
        db.commit()
        return policy


def enforce_retention(
    warehouse: Warehouse, policy: RetentionPolicy, confirmed: set[str]
) -> RetentionLogEntry:
    """Drop the tables of the confirmed preview that are still due (a table confirmed but no
    longer due is kept; one not previewed is never dropped), mark their executions, log it."""
    due = queries.plan(warehouse, policy)
    tables = [table for table in due.tables if table.name in confirmed]
    if not tables:
        raise RetentionError("Nothing of what you confirmed is due any more: preview again.")
    client = lakekeeper()
    dropped: list[DueTable] = []
    failure = None
    try:
        prefix = client.catalog_prefix(warehouse.lakekeeper_name)
        for table in tables:
            namespace, name = table.name.split(".", 1)
            try:
                client.drop_table(prefix, TableIdentifier((namespace,), name), purge=True)
            except LakekeeperError as error:
                if error.status != 404:  # already gone counts as dropped
                    raise
            dropped.append(table)
    except LakekeeperError as error:
        failure = error.user_message
    except Exception as error:  # unreachable, token refused
        failure = getattr(error, "user_message", None) or str(error)
    entry = _record(warehouse, dropped, failure)
    if failure:
        raise RetentionError(f"Stopped after {len(dropped)} of {len(tables)} tables: {failure}")
    return entry


def _record(
    warehouse: Warehouse, dropped: list[DueTable], failure: str | None
) -> RetentionLogEntry:
    """Mark executions whose tables of a kind are all gone, and write the log entry."""
    now = utcnow()
    with Session(engine(), expire_on_commit=False) as db:
        executions = {
            e.id: e
            for e in db.exec(
                select(Execution).where(Execution.id.in_({table.execution_id for table in dropped}))
            )
        }
        freed = 0
        for execution in executions.values():
            results, logs = queries.execution_tables(execution)
            names = {table.name for table in dropped if table.execution_id == execution.id}
            usage = db.get(ExecutionUsage, execution.id)
            if results and set(results) <= names:
                execution.outputs_expired_at = now
                freed += usage.results_bytes if usage else 0
            if logs and set(logs) <= names:
                execution.stats_expired_at = now
                freed += usage.logs_bytes if usage else 0
            db.add(execution)
        message = f"Dropped {len(dropped)} table{'s' if len(dropped) != 1 else ''}"
        if dropped:
            message += ": " + ", ".join(table.name for table in dropped)
        if failure:
            message += f". Stopped: {failure}"
        entry = RetentionLogEntry(
            warehouse_id=warehouse.id,
            at=now,
            kind="expiry",
            tables=len(dropped),
            bytes=freed,
            message=message[:4000],
        )
        db.add(entry)
        db.commit()
        return entry


def write_log(
    warehouse_id: int, kind: str, message: str, tables: int = 0, bytes_freed: int = 0
) -> None:
    with Session(engine()) as db:
        db.add(
            RetentionLogEntry(
                warehouse_id=warehouse_id,
                kind=kind,
                tables=tables,
                bytes=bytes_freed,
                message=message[:4000],
            )
        )
        db.commit()


def request_maintenance(
    warehouse: Warehouse, retain_last: int | None, remove_orphans: bool
) -> MaintenanceJob:
    """Queue a maintenance job for the worker; refused without a policy, a running unit, or
    while one is under way."""
    if retain_last is None:
        raise MaintenanceRefused(
            "Set how many snapshots datasets keep in the retention policy first."
        )
    if warehouse.status != WarehouseStatus.ACTIVE:
        raise MaintenanceRefused("Only an active warehouse can be maintained.")
    unit = queries.running_unit(warehouse.owner_id)
    if unit is None:
        raise MaintenanceRefused(
            "None of your compute units is running: start one, then expire snapshots."
        )
    latest = queries.latest_job(warehouse)
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
