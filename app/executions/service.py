"""Executions, the request side: an execution's rules and its recorded intent.

`start` checks the workflow version, the unit and the warehouse (the runner's, live) and records
the execution QUEUED; `rerun_pinned` starts one again on the inputs it read; `cancel` ends a
QUEUED or INITIALIZING one at once and records the cancel of a RUNNING one, which the worker
passes on to its unit. The worker (app/executions/work.py) then drives the execution:
QUEUED → INITIALIZING → RUNNING → COMPLETED | FAILED(reason) | CANCELLED, and records each state
through the changes here (`transition`, `finish`). The owner's cancel races with the worker, so
each change is compare-and-set: whichever comes first wins, and a final state is never
overwritten.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from flask import current_app
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app.audit import service as audit
from app.db import engine, get_db
from app.errors import UserFacingError
from app.models import (
    ComputeUnit,
    Execution,
    ExecutionState,
    UnitState,
    User,
    Warehouse,
    WarehouseStatus,
    Workflow,
    WorkflowVersion,
    utcnow,
)
from app.transitions import compare_and_set
from app.warehouses import sharing
from app.workflows import sharing as workflow_sharing


class RunRefused(UserFacingError):
    """A run or a cancel was refused; `message` is for the user, `field` the form field at fault."""


class AlreadyStarted(Exception):
    """A start with an idempotency key that started an execution before (`execution`)."""

    def __init__(self, execution: Execution) -> None:
        super().__init__(f"execution {execution.id} was started with this key")
        self.execution = execution


def check_runnable(
    owner: User, cu: ComputeUnit | None, warehouse: Warehouse | None
) -> dict[str, str]:
    """Why this unit and this warehouse cannot take a new execution (field → message); {} if they can."""
    errors: dict[str, str] = {}
    if cu is None or cu.owner_id != owner.id:
        errors["compute_unit_id"] = "Choose one of your running compute units."
    elif cu.state != UnitState.RUNNING:
        errors["compute_unit_id"] = f"Compute unit {cu.name} is {cu.state.lower()}, not running."
    if warehouse is None or sharing.access_of(owner, warehouse) not in (
        sharing.OWNER,
        sharing.WRITE,
    ):
        errors["warehouse_id"] = "Choose an active warehouse you may write into."
    elif warehouse.status == WarehouseStatus.ARCHIVED:
        errors["warehouse_id"] = (
            f"Warehouse {warehouse.name} is archived: it takes no new executions."
        )
    elif warehouse.status != WarehouseStatus.ACTIVE:
        errors["warehouse_id"] = f"Warehouse {warehouse.name} is deactivated; activate it first."
    return errors


def started_with(owner: User, idempotency_key: str) -> Execution | None:
    """The execution `owner` started with this idempotency key (the API's), if any."""
    return (
        get_db()
        .exec(
            select(Execution).where(
                Execution.owner_id == owner.id, Execution.idempotency_key == idempotency_key
            )
        )
        .first()
    )


def start(
    owner: User,
    workflow: Workflow,
    version: WorkflowVersion | None,
    cu: ComputeUnit | None,
    warehouse: Warehouse | None,
    pinned_to: dict | None = None,
    idempotency_key: str | None = None,
    notify: dict | None = None,
) -> Execution:
    """Record a QUEUED execution of `version` (the caller's choice: for a runner, the version they
    saw, `seen_version.version_to_run`); the worker runs that version's steps (reading its inputs at the
    snapshots of `pinned_to`, see `rerun_pinned`). With `idempotency_key`, one execution per key:
    a second start with it raises AlreadyStarted. `notify`: who is told when it ends
    (`notifications.fields` of a checked request)."""
    if workflow_sharing.access_of(owner, workflow) not in (
        workflow_sharing.OWNER,
        workflow_sharing.RUN,
    ):
        raise RunRefused("This workflow is not yours to run (or no longer shared with you).")
    if version is None or not json.loads(version.steps or "[]"):
        raise RunRefused("This workflow has no steps yet. Add steps in the editor and save first.")
    if (
        version.workflow_id != workflow.id
    ):  # the row the worker runs must be one of the workflow checked above
        raise RunRefused("This version is not one of this workflow's.", "version")
    if errors := check_runnable(owner, cu, warehouse):
        field, message = next(iter(errors.items()))
        raise RunRefused(message, field)
    db = get_db()
    steps = [{"name": step["name"], "state": "pending"} for step in json.loads(version.steps)]
    execution = Execution(
        owner_id=owner.id,
        workflow_id=workflow.id,
        workflow_version_id=version.id,
        workflow_version=version.version,
        compute_unit_id=cu.id,
        warehouse_id=warehouse.id,
        warehouse_name=warehouse.name,
        progress=json.dumps({"steps": steps, "logs": []}),
        pinned_to=json.dumps(pinned_to or {}),
        idempotency_key=idempotency_key,
        **(notify or {}),
    )
    db.add(execution)
    # A unit idle for long would be stopped at the next check, under this execution.
    cu.last_activity_at = utcnow()
    db.add(cu)
    try:
        db.commit()
    except IntegrityError:
        db.rollback()
        if (
            idempotency_key is not None
            and (earlier := started_with(owner, idempotency_key)) is not None
        ):
            raise AlreadyStarted(earlier) from None
        raise
    current_app.logger.info(
        "user %s started execution %s of workflow %s v%s on compute unit %s into warehouse %s",
        owner.id,
        execution.id,
        workflow.id,
        version.version,
        cu.id,
        warehouse.id,
    )
    audit.record(
        "execution.start",
        execution,
        workflow_id=workflow.id,
        version=version.version,
        unit_id=cu.id,
        warehouse_id=warehouse.id,
        actor=owner,
        **({"pinned": True} if pinned_to else {}),
    )
    return execution


def rerun_pinned(owner: User, execution: Execution) -> Execution:
    """Run `execution`'s workflow version again, on its unit into its warehouse, with every table
    it read pinned to the snapshot it read (Iceberg time travel on the unit)."""
    if execution.state != ExecutionState.COMPLETED:
        raise RunRefused("Only a completed execution can be run again on the same inputs.")
    lineage = json.loads(execution.lineage or "{}")
    if "read" not in lineage:
        raise RunRefused(
            "This execution recorded no lineage (it ran before Lakeport kept it): there is "
            "nothing to pin a re-run to."
        )
    db = get_db()
    tables = {
        entry["table"]: entry["snapshot_id"]
        for entry in lineage["read"]
        if entry.get("snapshot_id") is not None
    }
    return start(
        owner,
        db.get(Workflow, execution.workflow_id),
        db.get(WorkflowVersion, execution.workflow_version_id),
        db.get(ComputeUnit, execution.compute_unit_id) if execution.compute_unit_id else None,
        db.get(Warehouse, execution.warehouse_id) if execution.warehouse_id else None,
        pinned_to={"execution_id": execution.id, "tables": tables},
    )


def cancel(execution: Execution, by: str = "its owner") -> None:
    """Cancel a QUEUED or INITIALIZING execution at once, or record the cancel request of a
    RUNNING one: the worker passes it to the unit (`pass_cancel`, at its next pass) and its
    watcher again at its checks until the run has stopped, and records CANCELLED then."""
    if execution.state in ExecutionState.FINAL:
        raise RunRefused("This execution has already finished.")
    audit.record("execution.cancel", execution, before=execution.state)
    if not transition(
        execution.id,
        (ExecutionState.QUEUED, ExecutionState.INITIALIZING),
        state=ExecutionState.CANCELLED,
        reason=f"cancelled by {by} before it ran",
        ended_at=utcnow(),
    ):
        transition(execution.id, (ExecutionState.RUNNING,), cancel_requested_at=utcnow())
    get_db().refresh(execution)


def transition(execution_id: int, from_states: Iterable[str], **changes) -> bool:
    return compare_and_set(Execution, execution_id, from_states, **changes) is not None


def finish(execution_id: int, state: str, **changes) -> bool:
    """Record a final state, unless another one was recorded first."""
    live = [s for s in ExecutionState.ALL if s not in ExecutionState.FINAL]
    return transition(execution_id, live, state=state, ended_at=utcnow(), **changes)


def load(execution_id: int) -> Execution | None:
    with Session(engine(), expire_on_commit=False) as db:
        return db.get(Execution, execution_id)
