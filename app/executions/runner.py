"""Running an execution: QUEUED → INITIALIZING → RUNNING → COMPLETED | FAILED(reason) | CANCELLED.

`start` records the execution (QUEUED); the worker process (app/worker.py) then drives it
(`drive`, under the lease `execution:<id>`):
1. checks the warehouse (Lakeport's row, then Lakekeeper) and the compute unit (INITIALIZING);
2. makes sure the unit's Spark host is up: bootstrapped once per unit, sized from the unit;
3. mints a catalog token scoped to this one warehouse, builds the ExecutionSpec (the contract
   with `compute/run/pipeline.py`) and submits it to the host;
4. watches the run (RUNNING) with status requests the host answers as soon as the run ends
   (or after WATCH_WAIT_SECONDS), copying its progress to the row and keeping the unit from
   being stopped as idle;
5. records the final state, with the outputs or the reason.

Nothing waits without a deadline: host calls time out, bootstrapping has a limit, and a run
whose host stops answering fails once the unit is found dead or the silence lasts too long.
The owner's cancel races with the worker, so state changes are compare-and-set updates of
the row: whichever comes first wins, and a final state is never overwritten.

When the database goes away mid-run, the worker's thread stops without recording anything
(it could not); the run goes on on its unit, and once the database is back the worker drives
the execution again from its row: a RUNNING one is watched again (the host keeps finished runs),
an INITIALIZING one is prepared again. A worker that died is replaced the same way, by whichever
worker takes its lease over.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from http import HTTPStatus

from flask import current_app
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app import leases
from app.audit import service as audit
from app.compute_units import door, lifecycle
from app.compute_units.door import SparkHostClient, SparkHostError, UnitUnavailable
from app.db import DATABASE_UNAVAILABLE, engine, get_db
from app.errors import UserFacingError
from app.executions import run_spec, unit_reports
from app.executions.history import progress_of, stopped_progress
from app.extensions import lakekeeper
from app.lakekeeper.errors import LakekeeperError, LakekeeperUnavailable, ServiceTokenError
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
from app.ray_clusters.base import ClusterHandle
from app.states import execution_state_of
from app.transitions import compare_and_set, set_fields
from app.untrusted import clean_text
from app.warehouses import sharing
from app.workflows import sharing as workflow_sharing
from compute.contract import JobKind, RunState

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.25
# A watcher's status request waits this long for the run to end (progress is copied as often).
WATCH_WAIT_SECONDS = 1.0
# A host that does not answer for this long, on a unit that still looks alive, fails the run.
HOST_SILENCE_SECONDS = 30.0
# How often a running execution tells its unit it is busy (the idle timeout is in minutes).
ACTIVITY_EVERY_SECONDS = 10.0
# How often the watcher looks at the unit's row (terminated by its owner, failed by the supervisor).
UNIT_CHECK_EVERY_SECONDS = 2.0
# A token minted longer ago than this before the submit (while Spark started) is minted again:
# the run gets its token's whole lifetime.
FRESH_TOKEN_SECONDS = 30.0


class RunRefused(UserFacingError):
    """A run or a cancel was refused; `message` is for the user, `field` the form field at fault."""


class AlreadyStarted(Exception):
    """A start with an idempotency key that started an execution before (`execution`)."""

    def __init__(self, execution: Execution) -> None:
        super().__init__(f"execution {execution.id} was started with this key")
        self.execution = execution


class ExecutionFailed(Exception):
    """Ends the worker's work on an execution with FAILED and this reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# --- Starting and cancelling (request side) -------------------------------------------------


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
    if not _transition(
        execution.id,
        (ExecutionState.QUEUED, ExecutionState.INITIALIZING),
        state=ExecutionState.CANCELLED,
        reason=f"cancelled by {by} before it ran",
        ended_at=utcnow(),
    ):
        _transition(execution.id, (ExecutionState.RUNNING,), cancel_requested_at=utcnow())
    get_db().refresh(execution)


# --- Rows, from the worker's threads ------------------------------------------------------------


def _transition(execution_id: int, from_states: Iterable[str], **changes) -> bool:
    return compare_and_set(Execution, execution_id, from_states, **changes) is not None


def finish(execution_id: int, state: str, **changes) -> bool:
    """Record a final state, unless another one was recorded first."""
    live = [s for s in ExecutionState.ALL if s not in ExecutionState.FINAL]
    return _transition(execution_id, live, state=state, ended_at=utcnow(), **changes)


def load(execution_id: int) -> Execution | None:
    with Session(engine(), expire_on_commit=False) as db:
        return db.get(Execution, execution_id)


# --- The worker's part ------------------------------------------------------------------------


def pending_work() -> list[tuple[str, object, int]]:
    """What the executions ask the worker to do: (lease name, function, execution id)."""
    with Session(engine()) as db:
        live = db.exec(
            select(Execution.id, Execution.cancel_requested_at).where(
                Execution.state.not_in(ExecutionState.FINAL)
            )
        ).all()
    cancels = [execution_id for execution_id, asked in live if asked is not None]
    for execution_id in _cancels_passed.keys() - set(cancels):
        del _cancels_passed[execution_id]
    return [(f"execution:{execution_id}", drive, execution_id) for execution_id, _ in live] + [
        (f"execution-cancel:{execution_id}", pass_cancel, execution_id)
        for execution_id in cancels
        if execution_id not in _cancels_passed
    ]


# Cancels this process passed to their units (execution id → when): once each; the watcher
# passes a cancel on again at its checks until the run has stopped.
_cancels_passed: dict[int, float] = {}


def pass_cancel(execution_id: int) -> None:
    """Pass a recorded cancel to the execution's unit at the worker's next pass (sooner than the
    watcher's next check: a run about to complete should not)."""
    _cancels_passed[execution_id] = time.monotonic()
    execution = load(execution_id)
    if execution is not None and execution.state == ExecutionState.RUNNING and execution.run_id:
        _cancel_run(execution_id, lambda: door.cancel(execution.compute_unit_id, execution.run_id))


def _cancel_run(execution_id: int, cancel: Callable[[], object], quiet: bool = False) -> None:
    """Cancel the execution's run on its unit; a unit that does not take the cancel is only
    logged (unless `quiet`: the cancel is a precaution)."""
    try:
        cancel()
    except (LookupError, SparkHostError) as error:
        if not quiet:
            logger.warning("cancelling execution %s on its unit: %s", execution_id, error)


def drive(execution_id: int) -> None:
    """Take an execution from where its row says it is to its end: prepare and submit a QUEUED or
    INITIALIZING one, watch a RUNNING one. The database going away ends this call without
    recording anything (the worker calls it again once the database is back); anything else ends
    the execution, FAILED with the reason if need be."""
    try:
        execution = load(execution_id)
        if execution is None or execution.state in ExecutionState.FINAL:
            return
        if execution.state == ExecutionState.RUNNING:
            _watch(execution_id)
            return
        # The catalog token takes longest to prepare: it is minted while the rest is checked.
        groundwork = _Groundwork.start(execution)
        if execution.state == ExecutionState.QUEUED and not _transition(
            execution_id,
            (ExecutionState.QUEUED,),
            state=ExecutionState.INITIALIZING,
            started_at=utcnow(),
        ):
            return  # cancelled while queued
        _submit_and_watch(execution_id, groundwork)
    except DATABASE_UNAVAILABLE:
        raise
    except (ExecutionFailed, UnitUnavailable) as failure:
        _finish_failed(execution_id, str(failure))
    except Exception as error:  # a bug or an environment problem: still never a stuck execution
        logger.exception("execution %s failed in the worker", execution_id)
        _finish_failed(execution_id, f"the portal could not run it: {error}")


def _finish_failed(execution_id: int, reason: str) -> None:
    """FAILED with `reason`, cleaned (it may hold a unit's text). Should the row still refuse
    it, FAILED with a reason that says so: an execution never stays unended over its reason."""
    try:
        finish(execution_id, ExecutionState.FAILED, reason=clean_text(reason, door.REASON_LIMIT))
    except DATABASE_UNAVAILABLE:
        raise
    except Exception as error:
        logger.error(
            "execution %s: its reason could not be stored (%s)",
            execution_id,
            clean_text(error, 300, one_line=True),
        )
        finish(
            execution_id,
            ExecutionState.FAILED,
            reason="the run failed, and its reason could not be stored",
        )


def _submit_and_watch(execution_id: int, groundwork: _Groundwork) -> None:
    args, handle, seen_app = _prepare(execution_id, groundwork)
    if _state_of(execution_id) != ExecutionState.INITIALIZING:
        return  # cancelled while initializing: nothing was submitted
    cu_id = args["compute_unit"]["id"]
    try:
        run_id = _submit(handle, args, execution_id)
    except SparkHostError as error:
        if seen_app is None:
            raise _not_taken(cu_id, error) from None
        # Submitted without asking the host first, and it did not take the run. If the unit
        # has a new host now (the old one died), the run goes there; if the old one is still
        # there it may hold the run, which must not run twice.
        door.forget_ready(cu_id)
        args, handle, _ = _prepare(execution_id, _Groundwork.start(load(execution_id)))
        if door.ready_app(cu_id, handle) == seen_app:
            raise _not_taken(cu_id, error) from None
        try:
            run_id = _submit(handle, args, execution_id)
        except SparkHostError as error:
            raise _not_taken(cu_id, error) from None
    if not _transition(
        execution_id, (ExecutionState.INITIALIZING,), state=ExecutionState.RUNNING, run_id=run_id
    ):
        # Cancelled between the check above and the submit.
        _cancel_run(execution_id, lambda: door.cancel(cu_id, run_id))
        return
    _watch(execution_id)


def _not_taken(cu_id: int, error: SparkHostError) -> ExecutionFailed:
    """Why the unit did not take the run: its own failure if it has one, else the host's answer."""
    return ExecutionFailed(
        door.unit_failure(cu_id) or f"the compute unit did not take the run: {error}"
    )


def _submit(handle: ClusterHandle, args: dict, execution_id: int) -> str:
    return door.submit(handle, JobKind.EXECUTION, args, name=f"execution-{execution_id}")


class _Groundwork:
    """What a run's submit waits for from the catalog, each begun on a thread of its own at
    `start`: the run's catalog token (door.run_token), its longest wait, and the warehouse's
    check (_check_warehouse)."""

    _threads = ThreadPoolExecutor(4, thread_name_prefix="execution-groundwork")

    def __init__(self, token: Future, checked: Future, started_at: float) -> None:
        self._token, self._checked, self.started_at = token, checked, started_at

    @classmethod
    def start(cls, execution: Execution) -> _Groundwork:
        app = current_app._get_current_object()

        def rows() -> tuple[Warehouse | None, User | None]:
            with Session(engine()) as db:
                warehouse = (
                    db.get(Warehouse, execution.warehouse_id) if execution.warehouse_id else None
                )
                return warehouse, db.get(User, execution.owner_id)

        def mint() -> str | None:
            with app.app_context():
                warehouse, owner = rows()
                if warehouse is None:
                    return None  # the check says why the run cannot go
                return _run_token(warehouse, owner)

        def check() -> None:
            with app.app_context():
                _check_warehouse(execution, rows()[0])

        return cls(cls._threads.submit(mint), cls._threads.submit(check), time.monotonic())

    def check(self) -> None:
        """Once the warehouse has passed its check; raises ExecutionFailed saying why it did not."""
        self._checked.result()

    def token(self) -> str | None:
        """The token, once minted; raises ExecutionFailed if it could not be."""
        return self._token.result()


def _run_token(warehouse: Warehouse, owner: User) -> str:
    try:
        return door.run_token(warehouse, owner)
    except door.NoCatalogToken as error:
        raise ExecutionFailed(str(error)) from None


def _prepare(execution_id: int, groundwork: _Groundwork) -> tuple[dict, ClusterHandle, str | None]:
    """Check everything the run needs; return the ExecutionSpec, the unit's cluster handle and,
    if its Spark host was not asked because this process found it ready before, that host's
    Spark application id."""
    with Session(engine(), expire_on_commit=False) as db:
        execution, workflow, version, owner, warehouse = db.exec(
            select(Execution, Workflow, WorkflowVersion, User, Warehouse)
            .outerjoin(Workflow, Workflow.id == Execution.workflow_id)
            .outerjoin(WorkflowVersion, WorkflowVersion.id == Execution.workflow_version_id)
            .outerjoin(User, User.id == Execution.owner_id)
            .outerjoin(Warehouse, Warehouse.id == Execution.warehouse_id)
            .where(Execution.id == execution_id)
        ).one()
    # Beside the token and the warehouse's check: the unit. A warehouse that cannot take the
    # run says so first, before the unit's state and before a Spark host is started for it.
    try:
        cu, handle = door.running_host(execution.compute_unit_id)
    finally:
        groundwork.check()
    if (seen_app := door.ready_app(cu.id, handle)) is None:
        door.make_ready(cu, handle, progress=lambda phase: _note(execution_id, phase))
    token = groundwork.token()
    if (
        time.monotonic() - groundwork.started_at > FRESH_TOKEN_SECONDS
    ):  # the unit's Spark host was started meanwhile
        token = _run_token(warehouse, owner)
    return (
        run_spec.execution_spec(execution, workflow, version, owner, cu, warehouse, token),
        handle,
        seen_app,
    )


def _state_of(execution_id: int) -> str | None:
    with Session(engine()) as db:
        return db.exec(select(Execution.state).where(Execution.id == execution_id)).first()


def _note(execution_id: int, phase: str) -> None:
    """What INITIALIZING is doing right now, for the page."""
    execution = load(execution_id)
    set_fields(
        Execution, execution_id, progress=json.dumps({**progress_of(execution), "phase": phase})
    )


def _check_warehouse(execution: Execution, warehouse: Warehouse | None) -> None:
    name = execution.warehouse_name
    if warehouse is None:
        raise ExecutionFailed(f"the warehouse {name} was purged")
    if warehouse.status == WarehouseStatus.ARCHIVED:
        raise ExecutionFailed(f"the warehouse {name} was archived: it takes no new executions")
    if warehouse.status != WarehouseStatus.ACTIVE:
        raise ExecutionFailed(f"the warehouse {name} is deactivated")
    try:
        found = lakekeeper().get_warehouse(warehouse.lakekeeper_id)
    except (LakekeeperUnavailable, ServiceTokenError) as error:
        raise ExecutionFailed(
            f"the catalog (Lakekeeper) is unreachable: {error.user_message}"
        ) from None
    except LakekeeperError as error:
        if error.status == 404:
            raise ExecutionFailed(f"the warehouse {name} no longer exists in the catalog") from None
        raise ExecutionFailed(
            f"the catalog refused the warehouse {name}: {error.user_message}"
        ) from None
    if not found.is_active:
        raise ExecutionFailed(f"the warehouse {name} is inactive in the catalog")


def _watch(execution_id: int) -> None:
    """Follow a submitted run until it ends, whatever ends it. What the unit uses against its
    kernel limits is read as the watch starts, right after the submit (a watcher that takes
    over after a restart starts from what it finds): a limit hit after that is the run's."""
    execution = load(execution_id)
    cu_id, run_id = execution.compute_unit_id, execution.run_id
    if not run_id:  # RUNNING is only ever written with the run's id: a row edited by hand
        raise ExecutionFailed("it is marked running but no run on its compute unit is recorded")
    cu, handle = door.running_host(cu_id)
    over_limit = partial(lifecycle.over_limit, cu, handle, lifecycle.limit_usage(cu, handle))
    last_progress = execution.progress
    last_heard = time.monotonic()
    next_activity = next_unit_check = 0.0
    with door.watching(handle) as client:
        while leases.still_held():  # else another worker took this execution over
            asked = time.monotonic()
            try:
                # Answered as soon as the run ends: the end is recorded without a poll's delay.
                run = client.run(run_id, wait_s=WATCH_WAIT_SECONDS)
            except SparkHostError as error:
                _check_silence(
                    client,
                    cu_id,
                    error,
                    silent_for=time.monotonic() - last_heard,
                    over_limit=over_limit,
                )
                time.sleep(POLL_SECONDS)
                continue
            now = last_heard = time.monotonic()
            if run["state"] not in RunState.FINAL and now - asked < WATCH_WAIT_SECONDS / 2:
                time.sleep(POLL_SECONDS)  # a host that does not wait (an older one): poll
            progress = unit_reports.merged_progress(
                json.loads(last_progress), run.get("progress") or {}
            )
            if run["state"] in RunState.FINAL:
                _record_end(execution_id, run, progress, over_limit)
                return
            if progress != last_progress:
                set_fields(Execution, execution_id, progress=progress)
                last_progress = progress
            if now >= next_activity:
                lifecycle.touch(cu_id)
                next_activity = now + ACTIVITY_EVERY_SECONDS
            if now >= next_unit_check:
                if _stopped_elsewhere(execution_id, cu_id, client, run_id):
                    return
                next_unit_check = now + UNIT_CHECK_EVERY_SECONDS


def _stopped_elsewhere(execution_id: int, cu_id: int, client: SparkHostClient, run_id: str) -> bool:
    """The row says the execution ended (another watcher) or its unit stopped (terminated,
    failed at a supervisor check): stop watching, failing the execution in the second case.
    A cancel its owner asked for is passed on to the unit here (again at each check, until the
    run has stopped: a cancel can reach the host before the run's Spark job)."""
    execution = load(execution_id)
    if execution.cancel_requested_at is not None and execution.state == ExecutionState.RUNNING:
        _cancel_run(execution_id, lambda: client.cancel(run_id))
    if execution.state in ExecutionState.FINAL:
        if (
            execution.state != ExecutionState.COMPLETED
        ):  # stopped from outside (see app/executions/stopping.py): make sure
            _cancel_run(execution_id, lambda: client.cancel(run_id), quiet=True)
        return True
    with Session(engine()) as db:
        cu = db.get(ComputeUnit, cu_id)
    if cu is not None and cu.state == UnitState.RUNNING:
        return False
    _cancel_run(
        execution_id, lambda: client.cancel(run_id), quiet=True
    )  # a terminating unit may still run it
    reason = (
        f"the compute unit stopped: {(cu.reason or cu.state.lower()) if cu else 'it was deleted'}"
    )
    finish(execution_id, ExecutionState.FAILED, reason=reason)
    return True


def _check_silence(
    client: SparkHostClient,
    cu_id: int,
    error: SparkHostError,
    silent_for: float,
    over_limit: Callable[[], str | None] = lambda: None,
) -> None:
    """The host did not answer about the run: find out whether the unit died, the kernel ended
    its host for going over a limit, the host forgot the run, or this is a hiccup to wait out
    (up to HOST_SILENCE_SECONDS)."""
    if reason := door.unit_failure(cu_id):
        raise ExecutionFailed(reason)
    if reason := over_limit():
        raise ExecutionFailed(f"{reason}; its Spark host stopped answering: {error}")
    if error.status_code == HTTPStatus.NOT_FOUND:
        try:
            client.info()
        except SparkHostError:
            pass
        else:  # the host answers, and says it has no such run: it was restarted and lost it
            raise ExecutionFailed(
                f"the compute unit's Spark host no longer knows this run (it was restarted): {error}"
            )
    # No answer, a broken connection or another error: a hiccup, until it lasts too long.
    if silent_for > HOST_SILENCE_SECONDS:
        raise ExecutionFailed(f"the compute unit's Spark host stopped answering: {error}") from None


def _record_end(
    execution_id: int, run: dict, progress: str, over_limit: Callable[[], str | None]
) -> None:
    """The row follows the unit, whose run marks its tables complete if and only if it COMPLETED."""
    state = execution_state_of(run["state"])  # a host's state outside RunState is a failure
    if state == ExecutionState.COMPLETED:
        # A stop asked for after the run had begun to complete was refused on the unit: no reason.
        result = run.get("result") if isinstance(run.get("result"), dict) else {}
        finish(
            execution_id,
            ExecutionState.COMPLETED,
            progress=progress,
            outputs=json.dumps(unit_reports.reported_result(execution_id, result)),
            lineage=json.dumps(unit_reports.reported_lineage(result)),
            reason="",
        )
    elif state == ExecutionState.CANCELLED:
        # A reason on the row is stopping.stop_in_warehouse's, written before it cancelled the run.
        stopped_because = load(execution_id).reason
        finish(
            execution_id,
            ExecutionState.FAILED if stopped_because else ExecutionState.CANCELLED,
            progress=stopped_progress(progress),
            reason=stopped_because or "cancelled by its owner",
        )
    else:
        reason = door.failure_reason(run.get("error"))
        if over := over_limit():
            reason = clean_text(f"{over}; the run's error: {reason}", door.REASON_LIMIT)
        finish(execution_id, ExecutionState.FAILED, progress=progress, reason=reason)
