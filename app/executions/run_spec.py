"""What an execution's run is given: its ExecutionSpec (compute/contract.py, the one model of
a spec and its steps), with the catalog binding of its one warehouse, and where its code runs: a
workflow its user did not write (shared with them to run) runs in a sandbox of its own on the unit,
apart from everything the unit's warm host holds (compute/run/sandboxed_runs.py).

Where each incremental read (`changes('ns.table')`) starts is decided here, from recorded lineage,
never by the step: the snapshot at which the same user's last COMPLETED, unpinned execution of the
same workflow into the same warehouse that read the table read it (`increment_starts`). A pinned
re-run starts where its original run started (its pins are the ends)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from sqlmodel import Session, select

from app.compute_units import door
from app.db import engine
from app.models import ComputeUnit, Execution, User, Warehouse, Workflow, WorkflowVersion
from app.states import ExecutionState
from compute.contract import (
    ExecutionSpec,
    Isolation,
    SpecCatalog,
    SpecComputeUnit,
    SpecUser,
    SpecWarehouse,
    SpecWorkflow,
    Step,
)

# How many of the workflow's last completed runs are searched for a table's last read: a table
# none of them read is read whole, as on a first run.
RUNS_SEARCHED = 100
_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")


def execution_spec(
    execution: Execution,
    workflow: Workflow,
    version: WorkflowVersion,
    owner: User,
    cu: ComputeUnit,
    warehouse: Warehouse,
    token: str,
) -> ExecutionSpec:
    """Everything the compute unit needs to run this execution, and no more: typed until the
    transport to the unit's Spark host serializes it."""
    return ExecutionSpec(
        execution_id=execution.id,
        workflow=SpecWorkflow(workflow.id, workflow.name, version.version),
        user=SpecUser(owner.id, owner.email),
        compute_unit=SpecComputeUnit(cu.id, cu.name),
        warehouse=SpecWarehouse(warehouse.id, warehouse.name, warehouse.lakekeeper_id),
        catalog=SpecCatalog(**door.catalog_binding(warehouse, token)),
        steps=tuple(Step.from_dict(step) for step in json.loads(version.steps)),
        pinned=json.loads(execution.pinned_to or "{}").get("tables") or {},
        isolation=Isolation.PROCESS if workflow.owner_id == owner.id else Isolation.SANDBOX,
        changes=increment_starts(execution),
    )


def publish_targets(execution: Execution) -> dict[str, tuple[str, str]]:
    """Step name → (table, mode) of each step of the execution's version that publishes: what the
    portal keeps of a unit's report of what it published (unit_reports.reported_result)."""
    with Session(engine()) as db:
        version = db.get(WorkflowVersion, execution.workflow_version_id)
    steps = (Step.from_dict(step) for step in json.loads(version.steps if version else "[]"))
    return {step.name: (step.publish.table, step.publish.mode) for step in steps if step.publish}


def increment_starts(execution: Execution) -> dict[str, int | None]:
    """Table → the snapshot its increment starts after (None: read it whole), for `execution`."""
    pinned = json.loads(execution.pinned_to or "{}")
    with Session(engine()) as db:
        if pinned.get("execution_id") is not None:
            original = db.get(Execution, int(pinned["execution_id"]))
            if original is None or not _same_run_line(original, execution):
                return {}
            return starts_of_rerun(json.loads(original.lineage or "{}"))
        lineages = db.exec(
            select(Execution.lineage)
            .where(
                Execution.owner_id == execution.owner_id,
                Execution.workflow_id == execution.workflow_id,
                Execution.warehouse_id == execution.warehouse_id,
                Execution.state == ExecutionState.COMPLETED,
                Execution.pinned_to == "{}",  # a re-run read the past, not the latest
                Execution.id != execution.id,
            )
            .order_by(Execution.id.desc())
            .limit(RUNS_SEARCHED)
        ).all()
    return starts_from(json.loads(lineage or "{}") for lineage in lineages)


def _same_run_line(original: Execution, execution: Execution) -> bool:
    return (original.owner_id, original.workflow_id, original.warehouse_id) == (
        execution.owner_id,
        execution.workflow_id,
        execution.warehouse_id,
    )


def starts_from(lineages: Iterable[dict]) -> dict[str, int | None]:
    """Each table's start: the snapshot the newest of `lineages` (newest first) that read the
    table read it at, None when it found the table empty. Lineage came from a unit: entries that
    are not a table's name with a snapshot id are passed over."""
    starts: dict[str, int | None] = {}
    for lineage in lineages:
        for entry in _entries(lineage, "read"):
            table, snapshot = entry.get("table"), entry.get("snapshot_id")
            if _is_table(table) and (snapshot is None or _is_snapshot(snapshot)):
                starts.setdefault(table.lower(), snapshot)
    return starts


def starts_of_rerun(lineage: dict) -> dict[str, int | None]:
    """The starts the original run's incremental reads began after (a pinned re-run reads the
    same increments: the original's ends are its pins)."""
    return {
        entry["table"].lower(): entry.get("from_snapshot_id")
        for entry in _entries(lineage, "changes")
        if _is_table(entry.get("table"))
        and (entry.get("from_snapshot_id") is None or _is_snapshot(entry["from_snapshot_id"]))
    }


def _entries(lineage: object, key: str) -> list[dict]:
    entries = lineage.get(key) if isinstance(lineage, dict) else None
    return (
        [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []
    )


def _is_table(name: object) -> bool:
    return isinstance(name, str) and bool(_TABLE.fullmatch(name))


def _is_snapshot(snapshot: object) -> bool:
    return isinstance(snapshot, int) and not isinstance(snapshot, bool)
