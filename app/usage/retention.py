"""Retention per warehouse: the owner's policy, a preview of what it would drop, and its enforcement.

Enforcement is two steps, like a purge: the owner previews (the tables and their bytes, from the
stored usage rows: no catalog call), then confirms exactly that list; what is still due of it is
dropped with purge through Lakekeeper, the executions are marked (`outputs_expired_at`,
`stats_expired_at`; the rows stay, with their compute figures and, while kept, their stats),
and one log entry says what went.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlmodel import Session, select

from app.charts import human_bytes
from app.db import engine
from app.errors import UserFacingError
from app.extensions import lakekeeper
from app.lakekeeper.errors import LakekeeperError
from app.lakekeeper.resources import TableIdentifier
from app.models import (
    Execution,
    ExecutionState,
    ExecutionUsage,
    RetentionLogEntry,
    RetentionPolicy,
    Warehouse,
    utcnow,
)
from app.usage.accounting import execution_tables

RESULTS_MODES = {
    "days": "Keep result tables for N days after their run ended",
    "last": "Keep the result tables of the last N executions of each workflow",
}
MAX_DAYS = 3650
MAX_KEEP_LAST = 10_000
MAX_RETAIN_SNAPSHOTS = 1000
LOG_ENTRIES_SHOWN = 20


class RetentionError(UserFacingError):
    """An enforcement failed; `message` is for the owner."""


# --- The policy --------------------------------------------------------------------------------


def policy_of(warehouse: Warehouse) -> RetentionPolicy | None:
    with Session(engine()) as db:
        return db.get(RetentionPolicy, warehouse.id)


def parse_policy(form) -> tuple[dict, dict[str, str]]:
    """The policy's values from the form, and a message per field that is not valid."""
    values: dict = {}
    errors: dict[str, str] = {}

    def whole_number(key: str, label: str, low: int, high: int) -> None:
        text = (form.get(key) or "").strip()
        values[key] = int(text) if text.isdigit() and low <= int(text) <= high else None
        if values[key] is None:
            errors[key] = f"{label}: a whole number from {low} to {high}."

    mode = form.get("results_mode", "")
    if mode not in RESULTS_MODES:
        errors["results_mode"] = "Choose how result tables are kept."
    else:
        values["results_mode"] = mode
        if mode == "days":
            whole_number("results_value", "Days", 0, MAX_DAYS)
        else:
            whole_number("results_value", "Executions per workflow", 1, MAX_KEEP_LAST)
    if form.get("logs_forever") == "on":
        values["logs_days"] = None
    else:
        whole_number("logs_days", "Days", 0, MAX_DAYS)
    values["snapshots_retain_last"] = None
    if (form.get("snapshots_retain_last") or "").strip():
        whole_number("snapshots_retain_last", "Snapshots", 1, MAX_RETAIN_SNAPSHOTS)
    if (
        not errors
        and values["logs_days"] is not None
        and values["results_mode"] == "days"
        and values["logs_days"] < values["results_value"]
    ):
        errors["logs_days"] = (
            "Keep runtime stats and console logs at least as long as the result tables."
        )
    return values, errors


def save_policy(warehouse: Warehouse, values: dict) -> RetentionPolicy:
    with Session(engine(), expire_on_commit=False) as db:
        policy = db.get(RetentionPolicy, warehouse.id) or RetentionPolicy(warehouse_id=warehouse.id)
        for key, value in values.items():
            setattr(policy, key, value)
        policy.updated_at = utcnow()
        db.add(policy)
        db.commit()
        return policy


def form_values(policy: RetentionPolicy | None) -> dict:
    if policy is None:
        return {
            "results_mode": "days",
            "results_value": "30",
            "logs_days": "",
            "logs_forever": "on",
            "snapshots_retain_last": "",
        }
    return {
        "results_mode": policy.results_mode,
        "results_value": str(policy.results_value),
        "logs_days": "" if policy.logs_days is None else str(policy.logs_days),
        "logs_forever": "on" if policy.logs_days is None else "",
        "snapshots_retain_last": ""
        if policy.snapshots_retain_last is None
        else str(policy.snapshots_retain_last),
    }


# --- Preview -----------------------------------------------------------------------------------


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


# --- Enforcement -------------------------------------------------------------------------------


def enforce(
    warehouse: Warehouse, policy: RetentionPolicy, confirmed: set[str]
) -> RetentionLogEntry:
    """Drop the tables of the confirmed preview that are still due (a table confirmed but no
    longer due is kept; one not previewed is never dropped), mark their executions, log it."""
    due = plan(warehouse, policy)
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
            results, logs = execution_tables(execution)
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


def confirmed_tables(form) -> set[str]:
    return {name for name in form.getlist("table") if name}
