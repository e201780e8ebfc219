"""Stopping executions from outside, for two kinds of reasons:

- the warehouse is archived, deactivated or about to be purged (`app.signals.warehouse_closing`):
  every execution writing into it stops;
- a share changed (`app.signals.shares_changed`): an execution whose user may no longer write
  into its warehouse (a warehouse share revoked or downgraded to read), or no longer run its
  workflow (a workflow share revoked or downgraded to view) stops, with that reason on its page.
  A warehouse's grants in the catalog change at the same moment, so the run's token could not
  write any more, yet storage credentials the catalog vended to it earlier stay valid until
  they expire (devstack/devcatalog/README.md): stopping the run ends what Lakeport holds.
  A workflow share stops only runs that have not reached their unit (queued, initializing):
  a run already running keeps the code it was started with.

Nothing here calls a unit: queued and initializing executions end at once, and running ones get
the reason and a cancel request that the worker passes to their units (`work.pass_cancel`);
their watchers record FAILED with that reason once the runs have stopped. A warehouse's catalog
step waits for that (app/warehouses/work.py).
"""

from __future__ import annotations

from flask import current_app
from sqlmodel import select

from app.db import get_db
from app.executions import service
from app.executions.queries import stopped_progress
from app.models import Execution, ExecutionState, User, Warehouse, Workflow, utcnow
from app.transitions import compare_and_set
from app.warehouses import sharing as warehouse_sharing
from app.workflows import sharing as workflow_sharing

_LIVE = (ExecutionState.QUEUED, ExecutionState.INITIALIZING, ExecutionState.RUNNING)
_NOT_ON_A_UNIT = (ExecutionState.QUEUED, ExecutionState.INITIALIZING)


def _stop(execution: Execution, reason: str) -> bool:
    """Stop one live execution with `reason`: a running one is cancelled on its unit by the
    worker, which drops its partial outputs, and ends FAILED; one that has begun to complete
    there (a cancel is then refused) completes, because its tables say so. True if it was
    stopped or asked to stop."""
    # The reason with the request: a watcher that sees the run end cancelled records FAILED with it.
    if compare_and_set(
        Execution,
        execution.id,
        (ExecutionState.RUNNING,),
        reason=reason,
        cancel_requested_at=utcnow(),
    ):
        current_app.logger.info("execution %s asked to stop: %s", execution.id, reason)
        return True
    if service.finish(
        execution.id,
        ExecutionState.FAILED,
        reason=reason,
        progress=stopped_progress(execution.progress),
    ):
        # A thread still initializing it sees the final state before it submits, or cancels
        # what it submitted; a watcher cancels the run when it finds the row final.
        current_app.logger.info("execution %s stopped: %s", execution.id, reason)
        return True
    return False


def stop_in_warehouse(warehouse: Warehouse, why: str) -> int:
    """Stop every live execution writing into `warehouse`, with the reason "the warehouse <name>
    <why>" (archived, deactivated, about to be purged). Returns how many were stopped or asked to stop."""
    live = (
        get_db()
        .exec(
            select(Execution).where(
                Execution.warehouse_id == warehouse.id, Execution.state.in_(_LIVE)
            )
        )
        .all()
    )
    return sum(_stop(execution, f"the warehouse {warehouse.name} {why}") for execution in live)


def stop_unshared(thing: Warehouse | Workflow) -> int:
    """After a share of `thing` was revoked or changed: stop the live executions whose user's
    access no longer allows them (into a warehouse: `write`; of a workflow: `run`), each with
    the reason. Returns how many were stopped or asked to stop."""
    db = get_db()
    if isinstance(thing, Warehouse):
        sharing, needed, states = warehouse_sharing, warehouse_sharing.WRITE, _LIVE
        column, what = Execution.warehouse_id, f"the warehouse {thing.name}"
    else:
        sharing, needed, states = workflow_sharing, workflow_sharing.RUN, _NOT_ON_A_UNIT
        column, what = Execution.workflow_id, f"the workflow {thing.name}"
    stopped = 0
    for execution, user in db.exec(
        select(Execution, User)
        .join(User, User.id == Execution.owner_id)
        .where(
            column == thing.id, Execution.owner_id != thing.owner_id, Execution.state.in_(states)
        )
    ).all():
        access = sharing.access_of(user, thing)
        if access in (sharing.OWNER, needed):
            continue
        change = (
            "is no longer shared with you"
            if access is None
            else f"is now shared with you to {access} only"
        )
        stopped += _stop(execution, f"{what} {change}")
    return stopped
