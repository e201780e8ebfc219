"""Executions, what pages read: lists with filters, the choices of the run dialog, and what a
finished execution recorded (its progress, its output tables)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import timezone

from sqlmodel import select

from app.db import get_db
from app.executions import unit_reports
from app.models import (
    ComputeUnit,
    Execution,
    ExecutionState,
    SampleDataJob,
    UnitState,
    User,
    Warehouse,
    Workflow,
    WorkflowVersion,
)
from app.states import JobState
from app.warehouses import sharing
from compute.contract import CONSOLE_LOGS, RUNTIME_STATS, table_name

HISTORY_LIMIT = 200
# A step that reads the sample data names a table `tpch.<table>` (app/workflows/dataset_tables.py).
_TPCH_TABLE = re.compile(r"\btpch\.\w", re.IGNORECASE)


@dataclass(frozen=True)
class ExecutionRow:
    """An execution with the names a list shows beside it."""

    execution: Execution
    workflow_name: str
    compute_unit_name: str | None


@dataclass(frozen=True)
class Filters:
    state: str | None = None
    warehouse_id: int | None = None
    compute_unit_id: int | None = None

    @classmethod
    def from_args(cls, args) -> Filters:
        """Filters from query parameters; values that are not valid choices are ignored."""
        state = args.get("state")
        return cls(
            state=state if state in ExecutionState.ALL else None,
            warehouse_id=_int_or_none(args.get("warehouse_id")),
            compute_unit_id=_int_or_none(args.get("compute_unit_id")),
        )

    @property
    def active(self) -> bool:
        return any((self.state, self.warehouse_id, self.compute_unit_id))


def _int_or_none(value) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def user_executions(
    owner: User, filters: Filters = Filters(), workflow_id: int | None = None
) -> list[ExecutionRow]:
    """The user's executions, newest first, narrowed by `filters` and optionally to one workflow."""
    statement = (
        select(Execution, Workflow.name, ComputeUnit.name)
        .join(Workflow, Workflow.id == Execution.workflow_id)
        .outerjoin(ComputeUnit, ComputeUnit.id == Execution.compute_unit_id)
        .where(Execution.owner_id == owner.id)
    )
    for column, value in (
        (Execution.workflow_id, workflow_id),
        (Execution.state, filters.state),
        (Execution.warehouse_id, filters.warehouse_id),
        (Execution.compute_unit_id, filters.compute_unit_id),
    ):
        if value is not None:
            statement = statement.where(column == value)
    statement = statement.order_by(Execution.created_at.desc(), Execution.id.desc()).limit(
        HISTORY_LIMIT
    )
    return [
        ExecutionRow(execution, workflow_name, cu_name)
        for execution, workflow_name, cu_name in get_db().exec(statement)
    ]


def user_warehouses(owner: User) -> list[Warehouse]:
    return list(
        get_db().exec(
            select(Warehouse).where(Warehouse.owner_id == owner.id).order_by(Warehouse.name)
        )
    )


def user_compute_units(owner: User) -> list[ComputeUnit]:
    return list(
        get_db().exec(
            select(ComputeUnit)
            .where(ComputeUnit.owner_id == owner.id)
            .order_by(ComputeUnit.created_at.desc())
        )
    )


def running_compute_units(owner: User) -> list[ComputeUnit]:
    return [cu for cu in user_compute_units(owner) if cu.state == UnitState.RUNNING]


def active_warehouses(owner: User) -> list[Warehouse]:
    """The active warehouses `owner` may run into: their own, then those shared with them to write."""
    return sharing.writable_by(owner)


def last_warehouse_id(owner: User, workflow: Workflow) -> int | None:
    """The warehouse this workflow's latest execution wrote to (None if never run, or purged)."""
    statement = (
        select(Execution.warehouse_id)
        .where(Execution.owner_id == owner.id, Execution.workflow_id == workflow.id)
        .order_by(Execution.created_at.desc(), Execution.id.desc())
        .limit(1)
    )
    return get_db().exec(statement).first()


def run_form_warehouse_id(owner: User, workflow: Workflow) -> int | None:
    """The warehouse the run form starts on, among those `owner` may run into: the one this
    workflow last ran into for them, else the one its inputs live in, else the first."""
    offered = [warehouse.id for warehouse in active_warehouses(owner)]
    for candidate in (last_warehouse_id, inputs_warehouse_id):
        if (chosen := candidate(owner, workflow)) in offered:
            return chosen
    return offered[0] if offered else None


def inputs_warehouse_id(owner: User, workflow: Workflow) -> int | None:
    """Where the workflow's inputs live: the warehouse of its latest completed run (by `owner` or
    the workflow's owner) that read a table; else, when its latest version names a TPC-H table,
    the warehouse `owner` last loaded TPC-H sample data into."""
    db = get_db()
    runs = db.exec(
        select(Execution.warehouse_id, Execution.lineage)
        .where(
            Execution.workflow_id == workflow.id,
            Execution.owner_id.in_((owner.id, workflow.owner_id)),
            Execution.state == ExecutionState.COMPLETED,
            Execution.warehouse_id.is_not(None),
        )
        .order_by(Execution.created_at.desc(), Execution.id.desc())
        .limit(20)
    ).all()
    for warehouse_id, lineage in runs:
        if json.loads(lineage or "{}").get("read"):
            return warehouse_id
    steps = db.exec(
        select(WorkflowVersion.steps).where(
            WorkflowVersion.workflow_id == workflow.id,
            WorkflowVersion.version == workflow.latest_version,
        )
    ).first()
    if not steps or not _TPCH_TABLE.search(steps):
        return None
    return db.exec(
        select(SampleDataJob.warehouse_id)
        .where(SampleDataJob.owner_id == owner.id, SampleDataJob.state == JobState.DONE)
        .order_by(SampleDataJob.ended_at.desc(), SampleDataJob.id.desc())
        .limit(1)
    ).first()


def progress_of(execution: Execution) -> dict:
    """{"steps": [{"name", "state", "rows_out", "started_at", "ended_at"}], "logs": [...], "phase": "..."};
    `phase` says what an INITIALIZING execution is doing."""
    progress = json.loads(execution.progress or "{}")
    return {
        "steps": progress.get("steps") or [],
        "logs": progress.get("logs") or [],
        "phase": progress.get("phase") or "",
    }


def last_change(execution: Execution, now: float) -> float | None:
    """When the running execution last showed something new (epoch seconds): its start, a step's
    start or end, or its latest log line; None before it started. The unit reports the moments,
    so none counts as later than `now`."""
    if execution.started_at is None:
        return None
    progress = progress_of(execution)
    moments = [
        execution.started_at.replace(tzinfo=execution.started_at.tzinfo or timezone.utc).timestamp()
    ]
    moments += [step.get(key) for step in progress["steps"] for key in ("started_at", "ended_at")]
    moments += [line.get("ts") for line in progress["logs"][-1:] if isinstance(line, dict)]
    return min(now, max(moment for moment in moments if isinstance(moment, (int, float))))


def live_version(execution: Execution, poll_delay: int) -> tuple:
    """Everything a running execution's live partials show: the row's every value and the delay
    of their next poll (app/live_partials.py tags them with it)."""
    return tuple(getattr(execution, column) for column in Execution.__table__.columns.keys()) + (
        poll_delay,
    )


def stopped_progress(progress: str) -> str:
    """The progress (JSON) of a run stopped from outside: steps not finished are cancelled."""
    parsed = json.loads(progress or "{}")
    steps = [
        {**step, "state": "cancelled"} if step.get("state") in ("pending", "running") else step
        for step in parsed.get("steps") or []
    ]
    return json.dumps({"steps": steps, "logs": parsed.get("logs") or []})


_FAILED_STEP = re.compile(r"^step '([a-z][a-z0-9_]*)' failed")


def failed_step(execution: Execution) -> str | None:
    """The step a FAILED execution failed in: the one its progress marks failed, or the one its
    reason names ("step 'x' failed: ..."); None when it failed outside any step."""
    if execution.state != ExecutionState.FAILED:
        return None
    for step in progress_of(execution)["steps"]:
        if step.get("state") == "failed" and step.get("name"):
            return str(step["name"])
    named = _FAILED_STEP.match(execution.reason or "")
    return named.group(1) if named else None


def output_tables(execution: Execution) -> dict[str, str]:
    """Output step → its table (`results.e42_big`), once the execution COMPLETED."""
    if execution.state != ExecutionState.COMPLETED or execution.outputs_purged:
        return {}
    return dict(json.loads(execution.outputs or "{}").get("outputs") or {})


def published_outputs(execution: Execution) -> list[dict]:
    """The named tables a COMPLETED run published (compute/run/publish.py), one per step:
    {"step", "table", "mode", "snapshot_id", "rows_added"}. A run that did not complete
    published nothing."""
    if execution.state != ExecutionState.COMPLETED:
        return []
    published = json.loads(execution.outputs or "{}").get("published") or {}
    return [{"step": step, **entry} for step, entry in published.items()]


def check_results(execution: Execution) -> list[dict]:
    """The quality checks the run made before publishing (compute/run/checks.py), one per check:
    {"step", "table", "kind", "check", "severity", "offending", "passed", "detail", "sample"}.
    A completed run's come from its result; a failed run's from its steps' progress (a failing
    check fails the run before any result is kept)."""
    if execution.state == ExecutionState.COMPLETED:
        kept = json.loads(execution.outputs or "{}").get("checks")
        if kept:
            return unit_reports.reported_checks(kept)
    return unit_reports.reported_checks(
        [
            entry
            for step in progress_of(execution)["steps"]
            if isinstance(step, dict) and isinstance(step.get("checks"), list)
            for entry in step["checks"]
        ]
    )


def runtime_stats_table(execution: Execution) -> str:
    return table_name(RUNTIME_STATS, execution.id)


def console_logs_table(execution: Execution) -> str:
    return table_name(CONSOLE_LOGS, execution.id)


def lineage_of(execution: Execution) -> dict:
    """What the run read and wrote ({"read": [...], "wrote": [...], "changes": [...]}: its
    incremental reads; compute/contract.py Lineage)."""
    lineage = json.loads(execution.lineage or "{}")
    return {
        "read": lineage.get("read") or [],
        "wrote": lineage.get("wrote") or [],
        "changes": lineage.get("changes") or [],
    }


def pinned_of(execution: Execution) -> dict:
    """For a re-run on the same inputs: {"execution_id": the run re-run, "tables": {table: snapshot id}}."""
    return json.loads(execution.pinned_to or "{}")


def completed_runs_of(owner: User, workflow_id: int, but: int) -> list[Execution]:
    """The owner's other COMPLETED executions of a workflow, newest first (to compare with)."""
    statement = (
        select(Execution)
        .where(
            Execution.owner_id == owner.id,
            Execution.workflow_id == workflow_id,
            Execution.state == ExecutionState.COMPLETED,
            Execution.id != but,
        )
        .order_by(Execution.id.desc())
        .limit(100)
    )
    return list(get_db().exec(statement).all())
