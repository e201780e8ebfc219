"""Executions, the worker's side: what the executions ask the worker to do (`pending_work`) and
doing it: QUEUED → INITIALIZING → RUNNING → COMPLETED | FAILED(reason) | CANCELLED.

The request side (app/executions/service.py) records the execution QUEUED; the worker process
(app/worker.py) then drives it (`drive`, under the lease `execution:<id>`):
1. checks the warehouse (Lakeport's row, then Lakekeeper) and the compute unit (INITIALIZING);
2. makes sure the unit's Spark host is up: bootstrapped once per unit, sized from the unit;
3. mints a catalog token scoped to this one warehouse, builds the ExecutionSpec (the contract
   with `compute/run/pipeline.py`, app/executions/run_spec.py) and submits it through the door
   of its unit (app/compute_units/door.py `UnitDoor`, one per unit, opened once per drive);
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

A cancel recorded on a RUNNING execution is passed to its unit at the worker's next pass
(`pass_cancel`), and again at the watcher's checks. The rows in which two executions' outputs
differ (a `ComparisonJob`, app/executions/comparison.py) are computed here too (`run_rows_job`).
The executions' work, their cancels, the comparison jobs and the notifications' delivery
(app/executions/delivery.py) join the worker's registry (app/work_registry.py) at the end.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from http import HTTPStatus

from flask import current_app
from sqlmodel import Session, select

from app import leases, work_registry
from app.compute_units import door
from app.compute_units.door import (
    SparkHostError,
    UnitDoor,
    UnitUnavailable,
)
from app.db import DATABASE_UNAVAILABLE, engine, get_db
from app.executions import comparison, delivery, queries, results, run_spec, service, unit_reports
from app.executions.queries import progress_of, stopped_progress
from app.extensions import lakekeeper
from app.lakekeeper.errors import LakekeeperError, LakekeeperUnavailable, ServiceTokenError
from app.models import (
    ComparisonJob,
    ComputeUnit,
    Execution,
    ExecutionState,
    JobState,
    UnitState,
    User,
    Warehouse,
    WarehouseStatus,
    Workflow,
    WorkflowVersion,
    utcnow,
)
from app.states import execution_state_of
from app.transitions import compare_and_set, set_fields
from app.untrusted import Limits, bounded, clean_text
from compute.contract import ExecutionSpec, JobKind, RunState

logger = logging.getLogger(__name__)

# A watcher's pause before asking again a host that did not wait, or did not answer.
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


class ExecutionFailed(Exception):
    """Ends the worker's work on an execution with FAILED and this reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


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
    execution = service.load(execution_id)
    if execution is not None and execution.state == ExecutionState.RUNNING and execution.run_id:
        _cancel_run(execution_id, execution.compute_unit_id, execution.run_id)


def _cancel_run(execution_id: int, cu_id: int | None, run_id: str) -> None:
    """Cancel the execution's run on its unit, through a door of its own; a unit that does not
    take the cancel is only logged."""
    try:
        with UnitDoor.of_unit(cu_id) as unit:
            unit.cancel(run_id)
    except (LookupError, SparkHostError) as error:
        logger.warning("cancelling execution %s on its unit: %s", execution_id, error)


def _cancel_through(execution_id: int, unit: UnitDoor, run_id: str, quiet: bool = False) -> None:
    """Cancel the run through the watcher's door; a unit that does not take the cancel is only
    logged (unless `quiet`: the cancel is a precaution)."""
    try:
        unit.cancel(run_id)
    except SparkHostError as error:
        if not quiet:
            logger.warning("cancelling execution %s on its unit: %s", execution_id, error)


def drive(execution_id: int) -> None:
    """Take an execution from where its row says it is to its end: prepare and submit a QUEUED or
    INITIALIZING one, watch a RUNNING one. The database going away ends this call without
    recording anything (the worker calls it again once the database is back); anything else ends
    the execution, FAILED with the reason if need be."""
    try:
        execution = service.load(execution_id)
        if execution is None or execution.state in ExecutionState.FINAL:
            return
        if execution.state == ExecutionState.RUNNING:
            _watch(execution_id)
            return
        # The catalog token takes longest to prepare: it is minted while the rest is checked.
        groundwork = _Groundwork.start(execution)
        if execution.state == ExecutionState.QUEUED and not service.transition(
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
        service.finish(execution_id, ExecutionState.FAILED, reason=reason)
    except DATABASE_UNAVAILABLE:
        raise
    except Exception as error:
        logger.error(
            "execution %s: its reason could not be stored (%s)",
            execution_id,
            clean_text(error, 300, one_line=True),
        )
        service.finish(
            execution_id,
            ExecutionState.FAILED,
            reason="the run failed, and its reason could not be stored",
        )


def _submit_and_watch(execution_id: int, groundwork: _Groundwork) -> None:
    spec, unit, seen_app = _prepare(execution_id, groundwork)
    try:
        if _state_of(execution_id) != ExecutionState.INITIALIZING:
            return  # cancelled while initializing: nothing was submitted
        try:
            run_id = unit.submit(spec)
        except SparkHostError as error:
            if seen_app is None:
                raise _not_taken(unit, error) from None
            # Submitted without asking the host first, and it did not take the run. If the unit
            # has a new host now (the old one died), the run goes there; if the old one is still
            # there it may hold the run, which must not run twice.
            unit.forget_ready()
            unit.close()
            spec, unit, _ = _prepare(execution_id, _Groundwork.start(service.load(execution_id)))
            if unit.ready_app() == seen_app:
                raise _not_taken(unit, error) from None
            try:
                run_id = unit.submit(spec)
            except SparkHostError as error:
                raise _not_taken(unit, error) from None
        if not service.transition(
            execution_id,
            (ExecutionState.INITIALIZING,),
            state=ExecutionState.RUNNING,
            run_id=run_id,
        ):
            # Cancelled between the check above and the submit.
            _cancel_through(execution_id, unit, run_id)
            return
        _watch(execution_id, unit)
    finally:
        unit.close()


def _not_taken(unit: UnitDoor, error: SparkHostError) -> ExecutionFailed:
    """Why the unit did not take the run: its own failure if it has one, else the host's answer."""
    return ExecutionFailed(unit.failure() or f"the compute unit did not take the run: {error}")


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


def _prepare(
    execution_id: int, groundwork: _Groundwork
) -> tuple[ExecutionSpec, UnitDoor, str | None]:
    """Check everything the run needs; return the ExecutionSpec, the door of its unit and, if
    the unit's Spark host was not asked because this process found it ready before, that host's
    Spark application id. The caller closes the door."""
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
        unit = UnitDoor.running(execution.compute_unit_id)
    finally:
        groundwork.check()
    try:
        if (seen_app := unit.ready_app()) is None:
            unit.make_ready(progress=lambda phase: _note(execution_id, phase))
        token = groundwork.token()
        if (
            time.monotonic() - groundwork.started_at > FRESH_TOKEN_SECONDS
        ):  # the unit's Spark host was started meanwhile
            token = _run_token(warehouse, owner)
        spec = run_spec.execution_spec(
            execution, workflow, version, owner, unit.cu, warehouse, token
        )
    except BaseException:
        unit.close()
        raise
    return spec, unit, seen_app


def _state_of(execution_id: int) -> str | None:
    with Session(engine()) as db:
        return db.exec(select(Execution.state).where(Execution.id == execution_id)).first()


def _note(execution_id: int, phase: str) -> None:
    """What INITIALIZING is doing right now, for the page."""
    execution = service.load(execution_id)
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


def _watch(execution_id: int, unit: UnitDoor | None = None) -> None:
    """Follow a submitted run until it ends, whatever ends it, through its unit's door (one is
    opened when the watch is taken over). What the unit uses against its kernel limits is read
    as the watch starts, right after the submit (a watcher that takes over after a restart starts
    from what it finds): a limit hit after that is the run's."""
    execution = service.load(execution_id)
    run_id = execution.run_id
    if not run_id:  # RUNNING is only ever written with the run's id: a row edited by hand
        raise ExecutionFailed("it is marked running but no run on its compute unit is recorded")
    # Read while the run runs, not after it: recording the end waits for nothing but the row.
    publish_targets = run_spec.publish_targets(execution)
    with unit if unit is not None else UnitDoor.running(execution.compute_unit_id) as unit:
        over_limit = partial(unit.over_limit, unit.usage())
        last_progress = execution.progress
        last_heard = time.monotonic()
        next_activity = next_unit_check = 0.0
        while leases.still_held():  # else another worker took this execution over
            asked = time.monotonic()
            try:
                # Answered as soon as the run ends: the end is recorded without a poll's delay.
                run = unit.watch(run_id, wait_s=WATCH_WAIT_SECONDS)
            except SparkHostError as error:
                _check_silence(
                    unit, error, silent_for=time.monotonic() - last_heard, over_limit=over_limit
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
                _record_end(execution_id, run, progress, over_limit, publish_targets)
                return
            if progress != last_progress:
                set_fields(Execution, execution_id, progress=progress)
                last_progress = progress
            if now >= next_activity:
                unit.touch()
                next_activity = now + ACTIVITY_EVERY_SECONDS
            if now >= next_unit_check:
                if _stopped_elsewhere(execution_id, unit, run_id):
                    return
                next_unit_check = now + UNIT_CHECK_EVERY_SECONDS


def _stopped_elsewhere(execution_id: int, unit: UnitDoor, run_id: str) -> bool:
    """The row says the execution ended (another watcher) or its unit stopped (terminated,
    failed at a supervisor check): stop watching, failing the execution in the second case.
    A cancel its owner asked for is passed on to the unit here (again at each check, until the
    run has stopped: a cancel can reach the host before the run's Spark job)."""
    execution = service.load(execution_id)
    if execution.cancel_requested_at is not None and execution.state == ExecutionState.RUNNING:
        _cancel_through(execution_id, unit, run_id)
    if execution.state in ExecutionState.FINAL:
        if execution.state != ExecutionState.COMPLETED:
            # Stopped from outside (see app/executions/stopping.py): make sure.
            _cancel_through(execution_id, unit, run_id, quiet=True)
        return True
    with Session(engine()) as db:
        cu = db.get(ComputeUnit, unit.cu.id)
    if cu is not None and cu.state == UnitState.RUNNING:
        return False
    _cancel_through(execution_id, unit, run_id, quiet=True)  # a terminating unit may still run it
    reason = (
        f"the compute unit stopped: {(cu.reason or cu.state.lower()) if cu else 'it was deleted'}"
    )
    service.finish(execution_id, ExecutionState.FAILED, reason=reason)
    return True


def _check_silence(
    unit: UnitDoor,
    error: SparkHostError,
    silent_for: float,
    over_limit: Callable[[], str | None] = lambda: None,
) -> None:
    """The host did not answer about the run: find out whether the unit died, the kernel ended
    its host for going over a limit, the host forgot the run, or this is a hiccup to wait out
    (up to HOST_SILENCE_SECONDS)."""
    if reason := unit.failure():
        raise ExecutionFailed(reason)
    if reason := over_limit():
        raise ExecutionFailed(f"{reason}; its Spark host stopped answering: {error}")
    if error.status_code == HTTPStatus.NOT_FOUND:
        try:
            unit.info()
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
    execution_id: int,
    run: dict,
    progress: str,
    over_limit: Callable[[], str | None],
    publish_targets: dict[str, tuple[str, str]],
) -> None:
    """The row follows the unit, whose run marks its tables complete if and only if it COMPLETED
    (what it published checked against `publish_targets`, run_spec.publish_targets)."""
    state = execution_state_of(run["state"])  # a host's state outside RunState is a failure
    if state == ExecutionState.COMPLETED:
        # A stop asked for after the run had begun to complete was refused on the unit: no reason.
        result = run.get("result") if isinstance(run.get("result"), dict) else {}
        service.finish(
            execution_id,
            ExecutionState.COMPLETED,
            progress=progress,
            outputs=json.dumps(unit_reports.reported_result(execution_id, result, publish_targets)),
            lineage=json.dumps(unit_reports.reported_lineage(result)),
            reason="",
        )
    elif state == ExecutionState.CANCELLED:
        # A reason on the row is stopping.stop_in_warehouse's, written before it cancelled the run.
        stopped_because = service.load(execution_id).reason
        service.finish(
            execution_id,
            ExecutionState.FAILED if stopped_because else ExecutionState.CANCELLED,
            progress=stopped_progress(progress),
            reason=stopped_because or "cancelled by its owner",
        )
    else:
        reason = door.failure_reason(run.get("error"))
        if over := over_limit():
            reason = f"{over}; the run's error: {reason}"
        service.finish(execution_id, ExecutionState.FAILED, progress=progress, reason=reason)


# --- Comparison jobs ------------------------------------------------------------------------


COMPARE_TIMEOUT_SECONDS = 120.0


# What a unit reports of the differing rows is kept within these bounds (users' code ran there).
ROWS_LIMITS = Limits(string=2000, items=comparison.SAMPLE_ROWS * 4, depth=5)


def run_rows_job(job_id: int) -> None:
    """The worker's part: compute the differing rows on a ready unit of the owner's (A's own
    unit first) and record them, or why not."""
    db = get_db()
    job = db.get(ComparisonJob, job_id)
    if job is None or not compare_and_set(
        ComparisonJob, job_id, JobState.LIVE, state=JobState.RUNNING
    ):
        return
    a, b = db.get(Execution, job.a_id), db.get(Execution, job.b_id)
    try:
        rows = _differing_rows(db.get(User, job.owner_id), a, b)
    except comparison.RowsUnavailable as unavailable:
        compare_and_set(
            ComparisonJob,
            job_id,
            JobState.LIVE,
            state=JobState.FAILED,
            error=unavailable.args[0],
            ended_at=utcnow(),
        )
    else:
        compare_and_set(
            ComparisonJob,
            job_id,
            JobState.LIVE,
            state=JobState.DONE,
            result=json.dumps(_checked_rows(rows, comparison.pairs(a, b))),
            ended_at=utcnow(),
        )


def _checked_rows(rows: dict, pairs: list[dict]) -> dict:
    """What the unit reported, kept only in the shape the page shows: per compared output, its
    error, or its columns, the rows only in A and only in B (objects) and their counts."""

    def count(value: object) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    checked = {}
    for output in (pair["output"] for pair in pairs):
        diff = (
            rows.get(output)
            if isinstance(rows.get(output), dict)
            else {"error": "the unit reported nothing"}
        )
        if "error" in diff:
            checked[output] = {"error": clean_text(diff["error"], 500)}
            continue
        columns = [str(column) for column in diff.get("columns") or [] if isinstance(column, str)]
        entry = {"columns": columns}
        for side in ("a", "b"):
            found = (
                diff.get(f"only_in_{side}") if isinstance(diff.get(f"only_in_{side}"), list) else []
            )
            entry[f"only_in_{side}"] = [
                row for row in found[: comparison.SAMPLE_ROWS] if isinstance(row, dict)
            ]
            entry[f"only_in_{side}_count"] = count(diff.get(f"only_in_{side}_count"))
        checked[output] = bounded(entry, ROWS_LIMITS)
    return checked


def _differing_rows(owner: User, a: Execution, b: Execution) -> dict:
    """Output → {"only_in_a", "only_in_b", their counts, "columns"} or {"error"}."""
    warehouse = results.warehouse_of(a)
    if warehouse is None or b.warehouse_id != a.warehouse_id:
        raise comparison.RowsUnavailable(comparison.NOT_ONE_WAREHOUSE)
    units = sorted(queries.running_compute_units(owner), key=lambda cu: cu.id != a.compute_unit_id)
    if (unit := UnitDoor.first_ready(units)) is None:
        raise comparison.RowsUnavailable(comparison.NO_READY_UNIT)
    with unit:
        try:
            token = door.run_token(warehouse, owner)
        except door.NoCatalogToken as failure:
            raise comparison.RowsUnavailable(
                f"The catalog gave no token for the comparison: {failure}"
            ) from None
        args = {
            "catalog": door.catalog_binding(warehouse, token),
            "limit": comparison.SAMPLE_ROWS,
            "pairs": comparison.pairs(a, b),
            "warehouse": {"lakekeeper_id": warehouse.lakekeeper_id},
        }
        try:
            return unit.run_to_end(
                JobKind.COMPARISON,
                args,
                name=f"compare-{a.id}-{b.id}",
                timeout_s=COMPARE_TIMEOUT_SECONDS,
            )
        except (door.UnitUnavailable, door.RunNotCompleted) as error:
            raise comparison.RowsUnavailable(
                f"The comparison did not run on the compute unit: {error}"
            ) from None


# --- The worker's registry ------------------------------------------------------------------

work_registry.pending_source("executions", work_registry.EXECUTIONS, pending_work)
work_registry.pending_source(
    "comparison",
    work_registry.JOBS + 1,
    lambda: work_registry.live_jobs(ComparisonJob, "comparison", run_rows_job),
)
work_registry.pending_source("notifications", work_registry.NOTIFICATIONS, delivery.pending_work)
