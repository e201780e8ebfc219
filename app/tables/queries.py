"""What a table's page sections read, and what the worker's policy pass respects.

- Health: the table's current data and delete files counted from its manifests
  (`app.iceberg_storage.table_health`, the portal's one way into Iceberg), small files measured
  against the table's policy (or the default size).
- The story: every snapshot of the table, newest first, with the execution that wrote it (from
  the executions' lineage: each `wrote` entry names the table, the step and the snapshot) or the
  maintenance job that compacted it; a publish whose snapshot has since expired is still listed.
  The workflows that wrote it and those that read it (its consumers) come from the same lineage.
- Pins: the snapshots of this table that recorded pinned re-runs read (`Execution.pinned_to`),
  and those their originals' incremental reads started after: snapshot expiry keeps them, so
  such a run can be run again on the same inputs.
- Publishes in flight: the live executions into the warehouse whose workflow version publishes
  to this table (a step's `{"publish": {"table": "ns.t"}}`); a live execution whose steps carry
  no publish spec at all may write the table by its own code and counts as in flight too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

from sqlmodel import Session, select

from app import iceberg_reader
from app.db import engine
from app.iceberg_catalogs import catalog_for
from app.iceberg_storage import TableHealth, table_health
from app.models import (
    Execution,
    ExecutionState,
    MaintenanceJob,
    TablePolicy,
    User,
    Warehouse,
    Workflow,
    WorkflowVersion,
)
from app.tables.forms import DEFAULT_SMALL_FILE_MB

MIB = 1024 * 1024
HISTORY_ROWS = 50
# Executions whose lineage is searched for this table's publishes (the newest first).
STORY_EXECUTIONS = 500


def policy_of(warehouse: Warehouse, table_name: str) -> TablePolicy | None:
    with Session(engine()) as db:
        return db.exec(
            select(TablePolicy).where(
                TablePolicy.warehouse_id == warehouse.id, TablePolicy.table_name == table_name
            )
        ).first()


def small_file_bytes(policy: TablePolicy | None) -> int:
    return (policy.small_file_mb if policy else DEFAULT_SMALL_FILE_MB) * MIB


def health(warehouse: Warehouse, table_name: str, policy: TablePolicy | None) -> TableHealth:
    """Raises ResultReadError (its message for the viewer)."""
    return table_health(catalog_for(warehouse), table_name, small_file_bytes(policy))


def history(warehouse: Warehouse, table_name: str) -> list[MaintenanceJob]:
    """The table's maintenance jobs, newest first (skipped ones with their reason)."""
    with Session(engine()) as db:
        return list(
            db.exec(
                select(MaintenanceJob)
                .where(
                    MaintenanceJob.warehouse_id == warehouse.id,
                    MaintenanceJob.table_name == table_name,
                )
                .order_by(MaintenanceJob.id.desc())
                .limit(HISTORY_ROWS)
            )
        )


@dataclass
class StoryEntry:
    """One snapshot of the table, or a publish whose snapshot is gone (`expired`)."""

    snapshot_id: int
    committed_at_ms: int
    operation: str
    added_records: int | None
    execution_id: int | None = None
    execution_link: bool = False  # the viewer owns the execution: its page is theirs to open
    step: str = ""
    expired: bool = False


@dataclass
class Story:
    entries: list[StoryEntry] = field(default_factory=list)
    # The workflows that wrote it, and those that read it (its consumers):
    # id → (name, whether the viewer's execution ran it).
    workflows: dict[int, tuple[str, bool]] = field(default_factory=dict)
    consumers: dict[int, tuple[str, bool]] = field(default_factory=dict)


def _lineage_entries(warehouse: Warehouse, table_name: str) -> list[tuple[Execution, str, dict]]:
    """(execution, "wrote" or "read", the lineage's entry) for each write and read of this table
    by the warehouse's last STORY_EXECUTIONS executions that name it, newest first."""
    with Session(engine()) as db:
        executions = db.exec(
            select(Execution)
            .where(
                Execution.warehouse_id == warehouse.id,
                Execution.lineage.contains(json.dumps(table_name)),
            )
            .order_by(Execution.id.desc())
            .limit(STORY_EXECUTIONS)
        ).all()
    found = []
    for execution in executions:
        lineage = _json_object(execution.lineage)
        for kind, key in (("wrote", "wrote"), ("read", "read"), ("read", "changes")):
            entries = lineage.get(key)
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict) and entry.get("table") == table_name:
                    found.append((execution, kind, entry))
    return found


def story(warehouse: Warehouse, table_name: str, viewer: User) -> Story:
    """The table's snapshots, newest first, each with the run that wrote it. Raises
    ResultReadError."""
    overview = iceberg_reader.table_overview(catalog_for(warehouse), table_name)
    by_snapshot = {}
    result = Story()
    for execution, kind, entry in _lineage_entries(warehouse, table_name):
        if kind == "read":
            own = execution.owner_id == viewer.id
            result.consumers.setdefault(execution.workflow_id, ("", own))
        elif _is_snapshot(entry.get("snapshot_id")):
            by_snapshot.setdefault(entry["snapshot_id"], (execution, entry))
    for snapshot in overview.snapshots:
        item = StoryEntry(
            snapshot.snapshot_id,
            snapshot.committed_at_ms,
            snapshot.operation,
            snapshot.added_records,
        )
        if written := by_snapshot.pop(snapshot.snapshot_id, None):
            _attach(item, *written, viewer, result)
        result.entries.append(item)
    for snapshot_id, (execution, entry) in by_snapshot.items():
        item = StoryEntry(
            snapshot_id,
            int(entry.get("snapshot_at_ms") or 0),
            "",
            entry.get("added_records"),
            expired=True,
        )
        _attach(item, execution, entry, viewer, result)
        result.entries.append(item)
    result.entries.sort(key=lambda item: item.committed_at_ms, reverse=True)
    named = set(result.workflows) | set(result.consumers)
    with Session(engine()) as db:
        for workflow in db.exec(select(Workflow).where(Workflow.id.in_(named))):
            for listing in (result.workflows, result.consumers):
                if workflow.id in listing:
                    listing[workflow.id] = (workflow.name, listing[workflow.id][1])
    return result


def _attach(item: StoryEntry, execution: Execution, entry: dict, viewer: User, story_: Story):
    item.execution_id = execution.id
    item.execution_link = execution.owner_id == viewer.id
    item.step = str(entry.get("step") or "")
    if item.added_records is None and isinstance(entry.get("added_records"), int):
        item.added_records = entry["added_records"]
    story_.workflows.setdefault(execution.workflow_id, ("", execution.owner_id == viewer.id))


def pinned_snapshots(warehouse: Warehouse, table_name: str) -> set[int]:
    """The snapshots of this table that recorded pinned re-runs read: their pins, and the
    snapshots the originals' incremental reads of it started after (a re-run reads the same
    increment again)."""
    with Session(engine()) as db:
        rows = db.exec(
            select(Execution.pinned_to).where(
                Execution.warehouse_id == warehouse.id,
                Execution.pinned_to.contains(json.dumps(table_name)),
            )
        ).all()
        pinned, originals = set(), set()
        for text in rows:
            pins = _json_object(text)
            snapshot = _json_object(pins.get("tables")).get(table_name)
            if _is_snapshot(snapshot):
                pinned.add(snapshot)
            if _is_snapshot(pins.get("execution_id")):
                originals.add(pins["execution_id"])
        lineages = db.exec(select(Execution.lineage).where(Execution.id.in_(originals))).all()
    for lineage in lineages:
        for entry in _json_object(lineage).get("changes") or []:
            if isinstance(entry, dict) and entry.get("table") == table_name:
                if _is_snapshot(start := entry.get("from_snapshot_id")):
                    pinned.add(start)
    return pinned


def _json_object(value) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value or "{}")
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _is_snapshot(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def expire_before(
    health_: TableHealth, pinned: set[int], now: datetime, expire_days: int
) -> datetime:
    """The instant before which snapshots expire: `expire_days` ago, or earlier, so that no
    pinned snapshot is older than it (a snapshot committed exactly then is kept)."""
    cutoff_ms = int(now.timestamp() * 1000) - expire_days * 86_400_000
    for snapshot_id, committed_ms in health_.snapshot_commits:
        if snapshot_id in pinned:
            cutoff_ms = min(cutoff_ms, committed_ms)
    return datetime.fromtimestamp(cutoff_ms / 1000, timezone.utc)


def expiry_due(health_: TableHealth, before: datetime) -> int:
    """How many snapshots other than the current one were committed before `before`."""
    before_ms = int(before.timestamp() * 1000)
    return sum(
        1
        for snapshot_id, committed_ms in health_.snapshot_commits
        if committed_ms < before_ms and snapshot_id != health_.current_snapshot_id
    )


def publishes_in_flight(warehouse: Warehouse, table_name: str) -> list[int]:
    """The live executions into the warehouse that may publish to this table (see above)."""
    with Session(engine()) as db:
        rows = db.exec(
            select(Execution.id, WorkflowVersion.steps)
            .join(WorkflowVersion, WorkflowVersion.id == Execution.workflow_version_id)
            .where(
                Execution.warehouse_id == warehouse.id,
                Execution.state.not_in(ExecutionState.FINAL),
            )
        ).all()
    return [execution_id for execution_id, steps in rows if _may_publish(steps, table_name)]


def _may_publish(steps_json: str, table_name: str) -> bool:
    try:
        steps = json.loads(steps_json or "[]")
    except ValueError:
        return True
    specs = [step.get("publish") for step in steps if isinstance(step, dict) and "publish" in step]
    if not specs:  # no named outputs in this version: its code may write the table itself
        return True
    return any(isinstance(spec, dict) and spec.get("table") == table_name for spec in specs)
