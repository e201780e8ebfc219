"""Stopping a warehouse's executions from outside: the warehouse is archived, deactivated or
about to be purged (`app.signals.warehouse_closing`). Nothing here calls a unit: queued and
initializing executions end at once, and running ones get the warehouse's reason and a cancel
request that the worker passes to their units (`runner.pass_cancel`); their watchers record
FAILED with that reason once the runs have stopped. The warehouse's catalog step waits for
that (app/warehouses/closing.py).
"""
from __future__ import annotations

from flask import current_app
from sqlmodel import select

from app.db import get_db
from app.executions import runner
from app.executions.history import stopped_progress
from app.models import Execution, ExecutionState as State, Warehouse, utcnow
from app.transitions import compare_and_set


def stop_in_warehouse(warehouse: Warehouse, why: str) -> int:
    """Stop every live execution writing into `warehouse`, with the reason "the warehouse <name>
    <why>" (archived, deactivated, about to be purged). A running one is cancelled on its unit
    by the worker, which drops its partial outputs, and ends FAILED; one that has begun to
    complete there (a cancel is then refused) completes, because its tables say so. Returns how
    many were stopped or asked to stop."""
    live = (State.QUEUED, State.INITIALIZING, State.RUNNING)
    stopped = 0
    for execution in get_db().exec(select(Execution).where(Execution.warehouse_id == warehouse.id,
                                                           Execution.state.in_(live))).all():
        reason = f"the warehouse {warehouse.name} {why}"
        # The reason with the request: a watcher that sees the run end cancelled records FAILED with it.
        if compare_and_set(Execution, execution.id, (State.RUNNING,), reason=reason, cancel_requested_at=utcnow()):
            stopped += 1
            current_app.logger.info("execution %s asked to stop: %s", execution.id, reason)
        elif runner.finish(execution.id, State.FAILED, reason=reason, progress=stopped_progress(execution.progress)):
            # A thread still initializing it sees the final state before it submits, or cancels
            # what it submitted; a watcher cancels the run when it finds the row final.
            stopped += 1
            current_app.logger.info("execution %s stopped: %s", execution.id, reason)
    return stopped
