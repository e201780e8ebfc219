"""One execution of a workflow on a compute unit, bound to one warehouse.

The portal submits a job of kind `execution` (compute/contract.py JobKind) to the Spark host
(compute/host/spark_host.py), which calls `run_pipeline` (compute/run/jobs.py) with `args` = the
execution spec (`ExecutionSpec.from_json` shows the fields). What happens:

1. Every step is checked before anything runs: Python steps are compiled, SQL steps parsed.
2. The catalog is bound (`_bind_catalog`): the warehouse's catalog config is fetched with the
   execution's token (so an unreachable catalog or a missing warehouse fails the run with
   that reason, and without records: `CatalogUnbound`). This happens in the background while
   the steps are checked and the session opens; no step runs before it is done (`_catalog`).
   Once every step has passed its check the namespace `results` is made (`_prepare_tables`),
   and as the steps begin, side by side, `runtime_stats.e<id>` and `console_logs.e<id>` are
   created (empty, status running, their namespaces made if need be:
   `_prepare_record_tables`); creating a table makes the catalog vend storage credentials for
   the warehouse. Those go into the warehouse's catalog binding (compute/host/catalog_cache.py),
   made then by a unit that holds no valid binding of the warehouse. Otherwise the run does not
   wait for them: the first write waits for `results`, and the end waits for the rest
   (`_prepared`). With them, the run's branch of each named table that exists is made
   (compute/run/publish.py `make_branches_ahead`).
3. The execution gets its own Spark session (`spark.newSession()`: same SparkContext and
   executors, its own SQL settings, temporary views and current catalog), holding only its
   warehouse's catalog, made current. There is no other catalog to fall back to.
4. Steps run in order. A SQL step sees earlier steps as temporary views and the warehouse's
   tables as `<namespace>.<table>`; a Python step defines `run(spark, **earlier_steps)`
   returning a DataFrame; either reads a table's rows appended since this workflow's last run
   with `changes(...)` (compute/run/lineage.py `Increments`). An output step is written to
   `results.e<id>_<step>` (step name in lower case) and later steps read the written table;
   other steps stay lazy, Spark computes them within the steps that use them (so only output
   and publishing steps have a `rows_out`). A step with a publish target writes its rows on the
   run's branch of that named table, published with the others in one catalog commit at the end
   (compute/run/publish.py). Prints and Python warnings of a step are captured into its log.
5. The end: completing is one decision with cancelling (`RunProgress.begin_completion`):
   once it is taken a cancel is refused, and a run cancelled before it never marks anything.
   On success one atomic commit of the catalog (several tables at once) gives the result
   tables `lakeport.status=complete` and writes `runtime_stats.e<id>` and `console_logs.e<id>`:
   result tables never say complete without the run's records. On failure or cancel the result
   tables are dropped and the two records are written all the same. The records' status says
   complete | failed | cancelled: only a COMPLETED run says complete.

Cancel interrupts a running step: its Spark jobs are cancelled, and its Python code gets
RunInterrupted (compute/host/spark_host.py); the step's clean-up runs outside the interruptible part.

Table metadata and the two small bookkeeping tables go through pyiceberg on the driver,
which applies the vended credentials itself, so a run whose Spark side fails can still say why.
"""

from __future__ import annotations

import inspect
import json
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from compute.contract import (
    CONSOLE_LOGS,
    RESULTS,
    RUNTIME_STATS,
    ExecutionSpec,
    InvalidSpec,
    LineageRead,
    LineageWrite,
    Step,
    TableProperty,
    TableStatus,
)
from compute.host.catalog_cache import CatalogAccess, CatalogBinding, CatalogCache
from compute.host.spare_sessions import SESSIONS
from compute.run import checks
from compute.run.console_capture import ExecutionLog, captured
from compute.run.iceberg_rest import (
    MetadataOnceTransaction,
    commit_together,
    credentials_expire_soon,
    rest_catalog,
    wait_for_uploads,
)
from compute.run.lineage import Increments, PinnedSession, int_or_none, pin_sql, tables_read
from compute.run.publish import Publisher
from compute.run.record_tables import console_logs_schema, log_rows, runtime_stats_schema, timestamp
from compute.run.runs import RunFailed, RunInterrupted, RunProgress
from compute.run.step_code import (
    catalog_message,
    compile_step,
    describe,
    python_program,
    step_traceback,
    syntax_error,
)

CATALOG_TIMEOUT_S = 10.0

# One per Spark host process: executions for the same warehouse share its binding, and each
# takes a session made ahead for it.
CATALOGS = CatalogCache()
# The execution's two record tables and their schemas.
RECORD_SCHEMAS = {RUNTIME_STATS: runtime_stats_schema, CONSOLE_LOGS: console_logs_schema}


def run_pipeline(spark, args: dict, progress: RunProgress) -> dict:
    """Run the execution described by `args`; returns its summary, raises RunFailed otherwise."""
    try:
        spec = ExecutionSpec.from_json(args)
    except InvalidSpec as invalid:
        raise RunFailed(str(invalid)) from None
    return Pipeline(spark, spec, progress).run()


# ---------------------------------------------------------------- running it
class Cancelled(Exception):
    pass


class CatalogUnbound(RunFailed):
    """The run's catalog could not be bound (the reason says why): the run ends without records."""


@dataclass
class StepStats:
    step: Step
    status: str = "pending"
    started_at: float | None = None
    ended_at: float | None = None
    rows_out: int | None = None
    bytes_out: int | None = None
    job_ids: tuple[int, ...] = ()
    read: tuple[LineageRead, ...] = ()
    wrote: LineageWrite | None = None


class Pipeline:
    def __init__(self, spark, spec: ExecutionSpec, progress: RunProgress) -> None:
        self.spark, self.spec, self.progress = spark, spec, progress
        self.log = ExecutionLog(progress)
        self.stats = {step.name: StepStats(step) for step in spec.steps}
        self.iceberg = None  # pyiceberg catalog, once bound
        # The catalog calls that make the execution's namespaces and its runtime_stats and
        # console_logs tables, side by side in `preparing` (see _prepare_tables and
        # _prepare_record_tables); _prepared() waits for one.
        self.preparing: ThreadPoolExecutor | None = None
        self.bound: Future | None = None  # binding the catalog (_bind_catalog), in `preparing`
        self.prepared: dict[str, Future] = {}
        self.session = None  # this execution's Spark session, once bound
        self.binding: CatalogBinding | None = None
        self.written: dict[str, Any] = {}  # step name -> its result table (pyiceberg)
        self.publisher: Publisher | None = None  # the named outputs, if a step publishes
        self.check_results: list[dict] = []  # their quality checks (compute/run/checks.py)
        self.lineage_seconds = 0.0  # spent finding what the steps read (see _lineage)
        self.increments: Increments | None = None  # `changes(...)` reads, from the first step
        # Seconds spent in each phase of the run on the host (check, bind, session, steps,
        # complete), for the benchmarks' breakdown of where a run's time goes.
        self.phases: dict[str, float] = {}
        self.job_group = spark.sparkContext.getLocalProperty("spark.jobGroup.id")

    def run(self) -> dict:
        self.progress.set_steps(
            [
                {
                    "name": step.name,
                    "state": "pending",
                    "rows_out": None,
                    "started_at": None,
                    "ended_at": None,
                }
                for step in self.spec.steps
            ]
        )
        # The catalog is bound while the steps are checked and the run's session opens (`_catalog`
        # waits for it); the execution's tables are made only once every step has passed its check.
        # One thread each for the binding, the results namespace, the two record tables and the
        # branch of each named table (compute/run/publish.py `make_branches_ahead`).
        branches = sum(step.publish is not None for step in self.spec.steps)
        self.preparing = ThreadPoolExecutor(4 + branches, thread_name_prefix="prepare")
        self.bound = self.preparing.submit(self._bind_catalog)
        try:
            with self._phase("check"):
                programs = self._check_steps()
        except RunFailed:
            self.preparing.shutdown(
                wait=False, cancel_futures=True
            )  # it makes nothing: not waited for
            raise
        self._prepare_tables()
        try:
            status, reason = self._run_bound(programs)
        finally:  # nothing made for this run touches the catalog once it has ended
            self.preparing.shutdown(wait=True, cancel_futures=True)
            # The session's catalog client keeps connections to the catalog open: the unit would
            # hold more of them after every run. Closed once the run has ended, not before it says
            # so. (pyiceberg's go with the run's garbage, spark_host.SparkSessionHost._execute.)
            if self.session is not None:
                SESSIONS.retire(self.session, self.binding.catalog_name)
        if (
            SESSIONS.ahead_after_runs
            and self.binding is not None
            and CATALOGS.current(self.binding.warehouse_id) is self.binding
        ):
            SESSIONS.make_ahead(self.spark, self.binding)
        if reason:
            raise RunFailed(reason)
        return {
            "outputs": {
                name: self.spec.table(RESULTS, self.stats[name].step) for name in self.written
            },
            "rows": {name: self.stats[name].rows_out for name in self.written},
            "published": {
                staged.step: staged.summary()
                for staged in (self.publisher.staged if self.publisher else [])
            },
            "checks": self.check_results,
            "lineage": self._lineage(),
            "runtime_stats": self.spec.table(RUNTIME_STATS),
            "console_logs": self.spec.table(CONSOLE_LOGS),
            "phases_s": {phase: round(seconds, 4) for phase, seconds in self.phases.items()},
        }

    def _run_bound(self, programs: dict[str, Any]) -> tuple[TableStatus, str | None]:
        """The run once its catalog is bound: its status and, unless it completed, why."""
        try:
            with self._phase("session"):
                self._open_session()
                self._catalog()  # no step runs before the catalog is bound
                self.log(
                    "INFO",
                    None,
                    f"bound to warehouse {self.spec.catalog.warehouse} "
                    f"through {self.spec.catalog.uri}",
                )
                self._check_pins()
            self._prepare_record_tables()
            if any(step.publish is not None for step in self.spec.steps):
                self.publisher = Publisher(
                    self.spec, self.session, self.binding.catalog_name, self.iceberg, self.log
                )
                self.publisher.make_branches_ahead(self.spec.steps, self.preparing)
            with self._phase("steps"):
                self._run_steps(programs)
            # The one decision: from here a cancel is refused; a cancel that came first wins.
            if not self.progress.begin_completion():
                self._cancel_from(len(self.spec.steps))
            status, reason = TableStatus.COMPLETE, None
        except CatalogUnbound:
            raise  # nothing was written: there is nothing to drop, and no catalog to record in
        except Cancelled:
            status, reason = TableStatus.CANCELLED, "cancelled"
        except RunFailed as failure:
            status, reason = TableStatus.FAILED, str(failure)
        except Exception as error:  # the catalog or storage failed around the steps
            self.log("ERROR", None, traceback.format_exc())
            status, reason = (
                TableStatus.FAILED,
                f"the execution's outputs could not be written: {describe(error)}",
            )
        finally:
            self.spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
        with self._phase("complete"):
            # Named outputs first (compute/run/publish.py): before publish, every check passes.
            if status == TableStatus.COMPLETE and (
                failure := self._publish_outputs() or self._complete()
            ):
                status, reason = TableStatus.FAILED, failure
        if status != TableStatus.COMPLETE:
            if self.publisher is not None:
                self.publisher.abandon()
            self._drop_results()
            try:
                self._record(status, replace=True)
            except (
                RunFailed
            ) as failure:  # both reasons: why the run failed, and why it left no record
                reason = f"{reason}; {failure}"
        return status, reason

    # ------------------------------------------------------------ before running
    def _check_steps(self) -> dict[str, Any]:
        """Compile every Python step and parse every SQL step, so a typo fails before anything runs."""
        programs, errors = {}, []
        parser = self.spark._jsparkSession.sessionState().sqlParser()
        for step in self.spec.steps:
            try:
                if step.kind == "python":
                    programs[step.name] = compile_step(step)
                else:
                    parser.parsePlan(step.code)
            except Exception as error:
                message = syntax_error(step, error)
                errors.append(message)
                self.log("ERROR", step.name, message)
                self.progress.update_step(step.name, state="failed")
        if errors:
            raise RunFailed("; ".join(errors))
        return programs

    def _bind_catalog(self) -> None:
        """Reach the warehouse through the catalog with the execution's token, and nothing else.
        Runs in `preparing`."""
        catalog, warehouse = self.spec.catalog, self.spec.catalog.warehouse
        with self._phase("bind"):
            try:
                self.iceberg = rest_catalog(
                    f"execution-{self.spec.execution_id}",
                    catalog.uri,
                    warehouse,
                    catalog.token,
                )
            except Exception as error:
                # Find out precisely what is wrong (unreachable, no such warehouse, refused).
                self._probe_catalog(catalog.uri, warehouse, catalog.token)
                raise RunFailed(
                    f"the catalog refused warehouse {warehouse}: {describe(error)}"
                ) from None

    def _prepare_tables(self) -> None:
        """Start making the results namespace, a round trip to the catalog, in `preparing` once
        the catalog is bound (the record tables follow, `_prepare_record_tables`)."""
        self.prepared = {
            RESULTS: self.preparing.submit(
                self._once_bound, lambda: self.iceberg.create_namespace_if_not_exists(RESULTS)
            )
        }

    def _prepare_record_tables(self) -> None:
        """Start making the execution's runtime_stats and console_logs tables side by side in
        `preparing`, unless begun already: as the steps begin, or sooner when something needs one.
        Begun with the run, their catalog calls and their answers' parsing took the interpreter
        from the run's own start (its session, its first plan): a warm run was 0.03-0.04 s
        slower (bench/RESULTS.md)."""
        for namespace in RECORD_SCHEMAS:
            if namespace not in self.prepared:
                self.prepared[namespace] = self.preparing.submit(
                    self._once_bound, self._create_record_table, namespace
                )

    def _once_bound(self, make, *args):
        self._catalog()  # raises CatalogUnbound, which _prepared raises first
        return make(*args)

    def _catalog(self):
        """The run's pyiceberg catalog, once bound; raises CatalogUnbound if it could not be."""
        try:
            self.bound.result()
        except RunFailed as failure:
            raise CatalogUnbound(str(failure)) from None
        return self.iceberg

    def _prepared(self, name: str):
        """What making `name` gave: RESULTS a namespace, RUNTIME_STATS and CONSOLE_LOGS their
        table (pyiceberg)."""
        self._catalog()
        if name in RECORD_SCHEMAS:
            self._prepare_record_tables()
        try:
            return self.prepared[name].result()
        except Exception as error:
            raise RunFailed(
                f"the catalog failed to prepare the execution's tables: {describe(error)}"
            ) from None

    def _create_record_table(self, namespace: str):
        """The execution's empty runtime_stats or console_logs table, status running (one left
        by an earlier attempt is replaced)."""
        from pyiceberg.exceptions import NoSuchNamespaceError, TableAlreadyExistsError

        identifier, schema = self.spec.table(namespace), RECORD_SCHEMAS[namespace]()
        properties = self.spec.properties(TableStatus.RUNNING)
        try:  # the namespace is there but for a warehouse's first run: one round trip, not two
            return self.iceberg.create_table(identifier, schema=schema, properties=properties)
        except NoSuchNamespaceError:
            self.iceberg.create_namespace_if_not_exists(namespace)
        except TableAlreadyExistsError:
            self.iceberg.purge_table(identifier)
        return self.iceberg.create_table(identifier, schema=schema, properties=properties)

    def _open_session(self) -> None:
        """This execution's Spark session, whose one catalog is the warehouse's binding: the one
        the unit holds, or one made of the keys the catalog vends with the runtime_stats table."""
        catalog, warehouse = self.spec.catalog, self.spec.catalog.warehouse
        self.binding = CATALOGS.current(self.spec.warehouse.lakekeeper_id)
        if self.binding is None:
            access = CatalogAccess.vended(
                catalog.uri,
                warehouse,
                catalog.token,
                self._prepared(RUNTIME_STATS).io.properties,
            )
            if access is None:
                raise RunFailed(
                    f"the catalog vended no storage credentials for warehouse {warehouse}"
                )
            self.binding = CATALOGS.binding(self.spec.warehouse.lakekeeper_id, access)
        self.session = SESSIONS.take(self.spark, self.binding)

    def _probe_catalog(self, uri: str, warehouse: str, token: str) -> None:
        try:
            response = httpx.get(
                f"{uri.rstrip('/')}/v1/config",
                params={"warehouse": warehouse},
                headers={"Authorization": f"Bearer {token}"},
                timeout=CATALOG_TIMEOUT_S,
            )
        except httpx.HTTPError as error:
            raise RunFailed(
                f"the catalog (Lakekeeper) is unreachable at {uri}: {describe(error)}"
            ) from None
        if response.status_code == 404:
            raise RunFailed(f"warehouse not found: {warehouse} ({catalog_message(response)})")
        if response.status_code in (401, 403):
            raise RunFailed(
                f"the catalog refused the execution's access to warehouse {warehouse}: "
                f"HTTP {response.status_code} {catalog_message(response)}"
            )
        if not response.is_success:
            raise RunFailed(
                f"the catalog answered HTTP {response.status_code} for warehouse {warehouse}: "
                f"{catalog_message(response)}"
            )

    # ------------------------------------------------------------ the steps
    def _run_steps(self, programs: dict[str, Any]) -> None:
        frames: dict[str, Any] = {}
        # A step's jobs are the run's jobs that were not there when it began. The run's job group
        # is its own (spark_host sets it), so before its first step it has none.
        jobs_before: set[int] = set()
        for position, step in enumerate(self.spec.steps):
            if self.progress.cancel_requested:
                self._cancel_from(position)
            stats = self.stats[step.name]
            stats.started_at, stats.status = time.time(), "running"
            self.progress.update_step(step.name, state="running", started_at=stats.started_at)
            self.log(
                "INFO",
                step.name,
                f"step {step.name} ({step.kind}{', output' if step.output else ''}) started",
            )
            later_steps = position + 1 < len(self.spec.steps)
            try:
                with captured(self.log, step.name), self.progress.interruptible():
                    frame = self._evaluate(step, programs.get(step.name), frames)
                    began = time.perf_counter()
                    stats.read = self._reads_of(step, frame)
                    self.lineage_seconds += time.perf_counter() - began
                    if step.output:
                        frame = self._write_result(step, frame, stats, read_back=later_steps)
                    if step.publish is not None:
                        self._stage_output(step, frame, stats)
                if later_steps:  # what later steps read it by
                    frame.createOrReplaceTempView(step.name)
                    frames[step.name] = frame
            except (Exception, RunInterrupted) as error:
                stats.ended_at, stats.job_ids = (
                    time.time(),
                    tuple(sorted(self._jobs() - jobs_before)),
                )
                stats.status = "cancelled" if self.progress.cancel_requested else "failed"
                self.progress.update_step(step.name, state=stats.status, ended_at=stats.ended_at)
                if stats.status == "cancelled":
                    self.log("WARN", step.name, f"step {step.name} cancelled")
                    self._cancel_from(position + 1)
                self.log("ERROR", step.name, f"step {step.name} failed:\n{step_traceback(error)}")
                raise RunFailed(f"step {step.name!r} failed: {describe(error)}") from None
            stats.ended_at, stats.status = time.time(), "done"
            jobs_after = self._jobs()
            stats.job_ids, jobs_before = tuple(sorted(jobs_after - jobs_before)), jobs_after
            self.progress.update_step(
                step.name, state="done", ended_at=stats.ended_at, rows_out=stats.rows_out
            )
            self.log(
                "INFO",
                step.name,
                f"step {step.name} done in {stats.ended_at - stats.started_at:.2f} s"
                + (
                    f", {stats.rows_out} rows written to {self.spec.table(RESULTS, step)}"
                    if step.output
                    else ""
                ),
            )

    def _cancel_from(self, position: int) -> None:
        for step in self.spec.steps[position:]:
            self.stats[step.name].status = "cancelled"
            self.progress.update_step(step.name, state="cancelled")
        self.log("WARN", None, "execution cancelled")
        raise Cancelled()

    def _evaluate(self, step: Step, code, frames: dict[str, Any]):
        if self.increments is None:
            self.increments = Increments(
                self.session,
                self.binding.catalog_name,
                self.spec.changes,
                self.spec.pinned,
                self._catalog().load_table,
            )
        if step.kind == "sql":
            sql = self.increments.sql(step.code)
            return self.session.sql(
                pin_sql(self.session, sql, self.spec.pinned, self.binding.catalog_name)
            )
        program = python_program(step, code, {"changes": self.increments.changes})
        wanted = inspect.signature(program).parameters.values()
        if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in wanted):
            arguments = dict(frames)
        else:
            arguments = {}
            for parameter in wanted:
                if parameter.name in frames:
                    arguments[parameter.name] = frames[parameter.name]
                elif parameter.name != "spark" and parameter.default is inspect.Parameter.empty:
                    raise ValueError(f"run() asks for {parameter.name!r}, which is no earlier step")
        if any(parameter.name == "spark" for parameter in wanted):
            arguments["spark"] = (
                PinnedSession(self.session, self.spec.pinned, self.binding.catalog_name)
                if self.spec.pinned
                else self.session
            )
        frame = program(**arguments)
        if not hasattr(frame, "writeTo") or not hasattr(frame, "createOrReplaceTempView"):
            raise TypeError(f"run() returned {type(frame).__name__}, not a Spark DataFrame")
        return frame

    def _write_result(self, step: Step, frame, stats: StepStats, read_back: bool):
        """Write the step's rows to its result table; later steps (if `read_back`) read that table."""
        self._prepared(RESULTS)  # made while the run's session opened and its step was planned
        name = f"{self.binding.catalog_name}.{self.spec.table(RESULTS, step)}"
        writer = frame.writeTo(name).using("iceberg")
        for key, value in self.spec.properties(TableStatus.INCOMPLETE, step).items():
            writer = writer.tableProperty(key, value)
        writer.createOrReplace()
        table = self._catalog().load_table(self.spec.table(RESULTS, step))
        self.written[step.name] = table
        snapshot = table.current_snapshot()
        summary = snapshot.summary if snapshot else {}
        stats.rows_out = int(summary.get("added-records") or 0)
        stats.bytes_out = int(summary.get("added-files-size") or 0)
        if snapshot is not None:
            stats.wrote = LineageWrite(
                table=self.spec.table(RESULTS, step),
                step=step.name,
                snapshot_id=snapshot.snapshot_id,
                snapshot_at_ms=snapshot.timestamp_ms,
                added_records=int_or_none(summary.get("added-records")),
                added_files=int_or_none(summary.get("added-data-files")),
                added_bytes=int_or_none(summary.get("added-files-size")),
            )
        return self.session.table(name) if read_back else frame

    def _stage_output(self, step: Step, frame, stats: StepStats) -> None:
        """Write the step's rows on the run's branch of its named table (compute/run/publish.py)."""
        staged = self.publisher.stage(step, frame)
        if stats.rows_out is None:
            stats.rows_out = staged.rows_added

    def _publish_outputs(self) -> str | None:
        """Publish the named outputs in one catalog commit; why the run fails if it cannot."""
        if self.publisher is None:
            return None
        # The gate (compute/run/checks.py): a failing `fail` check publishes nothing.
        try:
            self.check_results, failure = checks.check_outputs(
                self.publisher, {step.name: step for step in self.spec.steps}, self.log
            )
        except Exception as error:  # the staged rows could not be read
            self.log("ERROR", None, traceback.format_exc())
            failure = f"the quality checks could not run: {describe(error)}; nothing was published"
        for step in {result["step"] for result in self.check_results}:
            self.progress.update_step(
                step, checks=[result for result in self.check_results if result["step"] == step]
            )
        if failure:
            self.log("ERROR", None, failure)
            return failure
        try:
            self.publisher.publish()
        except RunFailed as failure:
            self.log("ERROR", None, str(failure))
            return str(failure)
        return None

    def _checks_of(self, step: str) -> dict:
        """A named output's checks as lineage keeps them (no sample rows): {"checks": [...]}."""
        kept = ("kind", "check", "severity", "offending", "passed")
        found = [
            {key: result[key] for key in kept}
            for result in self.check_results
            if result["step"] == step
        ]
        return {"checks": found} if found else {}

    # ------------------------------------------------------------ lineage and pins
    def _check_pins(self) -> None:
        """Every pinned snapshot still exists, or the run fails naming the table and snapshot."""
        for table, snapshot_id in self.spec.pinned.items():
            try:
                found = self._catalog().load_table(table)
            except Exception as error:
                raise RunFailed(
                    f"the pinned input table {table} cannot be read: {describe(error)}"
                ) from None
            if found.snapshot_by_id(snapshot_id) is None:
                raise RunFailed(
                    f"the pinned snapshot {snapshot_id} of table {table} no longer exists "
                    f"(expired or the table was replaced)"
                )
        if self.spec.pinned:
            self.log(
                "INFO",
                None,
                "inputs pinned to "
                + ", ".join(
                    f"{table}@{snapshot}" for table, snapshot in sorted(self.spec.pinned.items())
                ),
            )

    def _reads_of(self, step: Step, frame) -> tuple[LineageRead, ...]:
        """The warehouse tables the step's plan reads (not this run's own results); a pinned
        table read at another snapshot than its pin fails the step."""
        own = {self.spec.table(RESULTS, other).lower() for other in self.spec.steps}
        reads = tuple(read for name, read in tables_read(frame).items() if name.lower() not in own)
        for read in reads:
            pinned = self.spec.pinned.get(read["table"].lower())
            if pinned is not None and read["snapshot_id"] != pinned:
                raise ValueError(
                    f"it reads {read['table']} at snapshot {read['snapshot_id']}, not at the pinned "
                    f"snapshot {pinned}: read pinned tables with spark.sql or spark.table"
                )
        return reads

    def _lineage(self) -> dict:
        """The run's lineage (compute/contract.py Lineage): each table read once, each write."""
        read: dict[str, LineageRead] = {}
        for step in self.spec.steps:
            for entry in self.stats[step.name].read:
                read.setdefault(entry["table"], entry)
        wrote = [
            self.stats[step.name].wrote for step in self.spec.steps if self.stats[step.name].wrote
        ]
        wrote += [  # the named outputs, at the snapshots the run published, with their checks
            {**staged.lineage(), **self._checks_of(staged.step)}
            for staged in (self.publisher.staged if self.publisher else [])
            if staged.published_snapshot_id is not None
        ]
        # What finding the reads in the steps' plans took (the writes' snapshots are read anyway).
        return {
            "read": list(read.values()),
            "wrote": wrote,
            "changes": self.increments.recorded() if self.increments else [],
            "collected_in_s": round(self.lineage_seconds, 4),
        }

    # ------------------------------------------------------------ the end
    def _complete(self) -> str | None:
        """Mark the result tables complete and record the run, in one atomic commit: a result
        table says complete only together with the run's records. Returns why the run fails
        after all if that commit could not be made, else None."""
        marks = [
            MetadataOnceTransaction(table).set_properties(
                {TableProperty.STATUS.value: TableStatus.COMPLETE.value}
            )
            for table in self.written.values()
        ]
        try:
            self._record(TableStatus.COMPLETE, along=marks)
        except RunFailed as failure:
            return str(failure)
        return None

    def _drop_results(self) -> None:
        """Drop the result table of every output step that exists, not only those recorded in
        `written`: a cancel may interrupt a step between its write's commit and the recording."""
        try:
            catalog = self._catalog()
        except CatalogUnbound:
            return  # nothing was written
        for step in self.spec.steps:
            if not step.output:
                continue
            identifier = self.spec.table(RESULTS, step)
            try:
                if step.name in self.written or catalog.table_exists(identifier):
                    catalog.purge_table(identifier)
                    self.log("INFO", step.name, f"dropped the unfinished result table {identifier}")
                self.written.pop(step.name, None)
            except Exception as error:
                self.log(
                    "ERROR",
                    step.name,
                    f"could not drop the unfinished result table {identifier}: {describe(error)}",
                )

    def _record(
        self, status: TableStatus, replace: bool = False, along: list | None = None
    ) -> None:
        """Write runtime_stats and console_logs, with the status, in one atomic commit together
        with the changes `along` stages (pyiceberg transactions of other tables of the
        warehouse); `replace` replaces a record written before. A run whose record fails is FAILED."""
        try:
            with self._phase("records_rows"):
                # In this thread: the stats are read from the JVM, whose gateway a new thread connects to anew.
                rows = {RUNTIME_STATS: self._stats_rows(), CONSOLE_LOGS: log_rows(self.log.entries)}
            with self._phase("records_files"):
                # One record after the other: their files are stored behind the writer, side by side
                # (iceberg_rest.SmallWritesFileIO), and the commit waits for them.
                records = [
                    self._staged_record(namespace, namespace_rows, status, replace)
                    for namespace, namespace_rows in rows.items()
                ]
            with self._phase(
                "records_uploads"
            ):  # the files' uploads end (the commit waits for them anyway)
                for record in records:
                    wait_for_uploads(record._table)
            with self._phase("records_commit"):
                commit_together(self.iceberg, [*(along or []), *records])
        except Exception as error:
            if along:
                raise RunFailed(
                    "the execution's result tables could not be marked complete together with its "
                    f"runtime stats and console logs: {describe(error)}"
                ) from None
            raise RunFailed(
                f"the execution ended {status} but its runtime stats and console logs "
                f"could not be written: {describe(error)}"
            ) from None

    def _staged_record(
        self, namespace: str, rows: list[dict], status: TableStatus, replace: bool = False
    ):
        """A transaction on the execution's runtime_stats or console_logs table that appends
        `rows` and sets its status, staged (its files written) and not committed; `replace`
        overwrites what a record written before left."""
        import pyarrow as pa

        table = self._prepared(namespace)
        # Loaded as the run began: a long run's credentials for it may be about to expire, and
        # loading it again vends fresh ones (as the Spark side renews them, compute/java/).
        if replace or credentials_expire_soon(table.io.properties, time.time()):
            table.refresh()
        transaction = MetadataOnceTransaction(table)
        rows = pa.Table.from_pylist(rows, schema=RECORD_SCHEMAS[namespace]())
        if replace and table.current_snapshot() is not None:
            transaction.overwrite(rows)
        else:
            transaction.append(rows)
        return transaction.set_properties({TableProperty.STATUS.value: status.value})

    # ------------------------------------------------------------ helpers
    @contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.phases[f"{name}_s"] = time.perf_counter() - began

    def _jobs(self) -> set[int]:
        if self.job_group is None:
            return set()
        return set(self.spark.sparkContext.statusTracker().getJobIdsForGroup(self.job_group))

    def _stats_rows(self) -> list[dict]:
        metrics = _StageMetrics(self.spark.sparkContext)
        rows = []
        for step in self.spec.steps:
            stats = self.stats[step.name]
            stages = metrics.of_jobs(stats.job_ids)
            rows.append(
                {
                    "step": step.name,
                    "kind": step.kind,
                    "output": step.output,
                    "status": stats.status,
                    "rows_in": _total(stages, "input_records") if stages else None,
                    "rows_out": stats.rows_out,
                    "bytes_in": _total(stages, "input_bytes") if stages else None,
                    "bytes_out": stats.bytes_out,
                    "started_at": timestamp(stats.started_at),
                    "ended_at": timestamp(stats.ended_at),
                    "duration_ms": round((stats.ended_at - stats.started_at) * 1000)
                    if stats.started_at and stats.ended_at
                    else None,
                    "spark_jobs": len(stats.job_ids),
                    "spark_tasks": _total(stages, "num_tasks"),
                    **{
                        key: _total(stages, key)
                        for key in (
                            "executor_run_time_ms",
                            "shuffle_read_bytes",
                            "shuffle_write_bytes",
                        )
                    },
                    "spark_stages": json.dumps(stages),
                    "lineage": json.dumps(
                        {"read": list(stats.read), "wrote": [stats.wrote] if stats.wrote else []}
                    ),
                }
            )
        return rows


def _total(stages: list[dict], figure: str) -> int:
    return sum(stage[figure] for stage in stages)


class _StageMetrics:
    """Spark's own per-stage metrics (the status store behind Spark's UI), by job."""

    def __init__(self, context) -> None:
        self.context = context
        java_context = context._jsc.sc()
        try:  # the listener fills the store asynchronously; let it catch up with the last step
            java_context.listenerBus().waitUntilEmpty(2000)
        except Exception:
            pass
        self.store = java_context.statusStore()

    def of_jobs(self, job_ids: tuple[int, ...]) -> list[dict]:
        stages = []
        for job_id in job_ids:
            job = self.context.statusTracker().getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                try:
                    data = self.store.lastStageAttempt(stage_id)
                except Exception:  # a stage that never ran (skipped) has no attempt
                    continue
                stages.append(
                    {
                        "job_id": job_id,
                        "stage_id": stage_id,
                        "name": data.name(),
                        "status": str(data.status()),
                        "num_tasks": data.numTasks(),
                        "executor_run_time_ms": data.executorRunTime(),
                        "input_bytes": data.inputBytes(),
                        "input_records": data.inputRecords(),
                        "output_bytes": data.outputBytes(),
                        "output_records": data.outputRecords(),
                        "shuffle_read_bytes": data.shuffleReadBytes(),
                        "shuffle_write_bytes": data.shuffleWriteBytes(),
                    }
                )
        return stages
