"""Stopping a warehouse's executions from outside: the warehouse is archived, deactivated or
about to be purged (`app.signals.warehouse_closing`). Their runs are cancelled on their units
and end FAILED with the warehouse's reason; the caller takes the warehouse's access away only
once they have stopped.
"""
from __future__ import annotations

import json
import time

from flask import current_app
from sqlmodel import select

from app.compute_units import lifecycle
from app.db import get_db
from app.executions import runner
from app.executions.history import progress_of
from app.models import ComputeUnit, Execution, ExecutionState as State, Warehouse
from app.ray_clusters.spark_host_client import SparkHostClient, SparkHostError


def stop_in_warehouse(warehouse: Warehouse, why: str) -> int:
    """Fail every live execution writing into `warehouse` with the reason "the warehouse <name>
    <why>" (archived, deactivated, about to be purged). Queued and initializing ones end at once;
    running ones are cancelled on their unit first, which drops their partial outputs, and end
    FAILED; one that has begun to complete there (a cancel is then refused) completes, because
    its tables say so. Returns once the cancelled runs have stopped on their units (or after
    runner.STOP_WAIT_SECONDS): their clean-up still needs the warehouse, so the caller takes the
    warehouse's access away only then. Returns how many were stopped."""
    live = (State.QUEUED, State.INITIALIZING, State.RUNNING)
    stopped = 0
    cancelled: list[Execution] = []
    for execution in get_db().exec(select(Execution).where(Execution.warehouse_id == warehouse.id,
                                                           Execution.state.in_(live))).all():
        reason = f"the warehouse {warehouse.name} {why}"
        asked_unit = execution.state == State.RUNNING and bool(execution.run_id)
        if asked_unit:
            # The reason first: a watcher that sees the run end cancelled records FAILED with it.
            runner._transition(execution.id, (State.RUNNING,), reason=reason)
            try:
                answer = runner.cancel_on_unit(execution)
                cancelled.append(execution)
                if answer.get("completing"):
                    current_app.logger.info("execution %s completes: it had begun to before %s", execution.id, reason)
                    continue
            except (LookupError, SparkHostError) as error:
                current_app.logger.warning("cancelling execution %s on its unit: %s", execution.id, error)
        if not runner._finish(execution.id, State.FAILED, reason=reason, progress=_stopped_progress(execution)):
            continue  # it ended on its own meanwhile
        stopped += 1
        current_app.logger.info("execution %s stopped: %s", execution.id, reason)
        execution = runner._load(execution.id)  # it may have been submitted since the query
        if execution.run_id and not asked_unit:
            try:
                runner.cancel_on_unit(execution)
                cancelled.append(execution)
            except (LookupError, SparkHostError) as error:
                # The row is final already; the run on the unit ends without marking anything complete.
                current_app.logger.warning("cancelling execution %s on its unit: %s", execution.id, error)
        # A thread still initializing it sees the final state before it submits, or cancels what
        # it submitted (see _run); a watcher cancels the run when it finds the row final.
    _wait_on_units(cancelled, runner.STOP_WAIT_SECONDS)
    return stopped


def _wait_on_units(executions: list[Execution], timeout_s: float) -> None:
    """Wait (at most `timeout_s` in all) until these executions' runs have ended on their units."""
    deadline = time.monotonic() + timeout_s
    for execution in executions:
        cu = get_db().get(ComputeUnit, execution.compute_unit_id) if execution.compute_unit_id else None
        handle = lifecycle.handle_of(cu) if cu is not None else None
        if handle is None or (left := deadline - time.monotonic()) <= 0:
            continue
        try:
            with SparkHostClient(handle, timeout=runner.HOST_CALL_TIMEOUT_SECONDS) as client:
                client.wait(execution.run_id, timeout_s=left)
        except SparkHostError as error:
            current_app.logger.warning("waiting for execution %s to stop on its unit: %s", execution.id, error)


def _stopped_progress(execution: Execution) -> str:
    """The progress of a run stopped from outside: steps not finished are cancelled."""
    progress = progress_of(execution)
    for step in progress["steps"]:
        if step.get("state") in ("pending", "running"):
            step["state"] = "cancelled"
    return json.dumps({"steps": progress["steps"], "logs": progress["logs"]})
