"""The Spark host: one warm Spark session per compute unit, reachable over HTTP.

How the portal hands work to a compute unit (CU), and why:

- Creating a RayDP Spark session costs seconds and a JVM, so an execution must not pay
  for one. A named, detached Ray actor, `SparkHost`, owns one session for the CU's
  lifetime and runs each execution in its own thread as a Spark job group (so cancelling
  is `cancelJobGroup`); a workflow's run (JobKind.EXECUTION) executes in a process of its own
  that this thread follows (`run_isolation`: compute/run/forked_runs.py,
  compute/run/sandboxed_runs.py). The FAIR scheduler lets concurrent executions share executors.
  Each CU has its own actor, in a Ray namespace of its own (`lakeport-cu-<id>-…`), also
  when several CUs attach to one shared Ray cluster: one tenant's code never runs in the
  process that holds another tenant's catalog tokens.
- The portal watches many CUs from one process. A Ray driver (`ray.init`) can be
  connected to one cluster per process only, and a Ray Job per execution cost 2-4 s
  here before user code ran (job supervisor actor, driver process, `ray.init`): more
  than the warm-latency budget. So the two paths differ:
  * Bootstrapping goes through Ray's Jobs API (HTTP, the cluster's token per request):
    the portal submits `python -m compute.host.start_spark_host '<settings>'` as a Ray Job;
    that driver creates this actor on the head node (or finds it), waits until its
    session is warm and exits.
  * Executions go straight to the actor through the small JSON API it serves on the
    head node (`API` below): one HTTP round trip per call, no process start.

Who may hand it work: only the portal. Every HTTP request is signed with the host's key, the
SHA-256 of a secret the portal derives per CU and never stores, and every answer carries the
host's proof (compute/host/host_auth.py, compute/host/host_http.py): neither side ever sends the key, and
the portal sends a run's arguments sealed, to a host that has proven itself. There is no
unauthenticated mode. Through Ray itself, anyone on the cluster can find the actor
(`ray.get_actor`), so the actor class offers only `wait_ready` and `info`; the run table
and submit, status and cancel live on `SparkSessionHost`, which only the HTTP handler
reaches (see `SparkHostActor` for Ray's own hooks).

What a run is: a named job (compute/contract.py `JobKind`) with `args` (a JSON object), which
the host dispatches to its function (compute/run/jobs.py), called with `spark` (the session),
`args` and `progress` (a `RunProgress`: steps and a log tail the job publishes, shown in the
run's status while it runs); what it returns is the run's `result`. No code string is run but
a probe's (the project's tests), compiled as a step's code is.
"""

from __future__ import annotations

import ctypes
import gc
import os
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import ray

from compute.contract import ISOLATION, Isolation, JobKind, RunState, SparkHostSettings
from compute.host.host_http import serve
from compute.run.runs import Run, RunFailed, RunInterrupted, jsonable

ACTOR_NAME = "spark-host"
FINISHED_RUNS_KEPT = 500
# A cancelled run's job group is cancelled again every CANCEL_REPEAT_SECONDS until it stops.
CANCEL_REPEAT_SECONDS = 0.5
CANCEL_PERSIST_SECONDS = 120.0
# Longest a status request may wait for its run to end (`GET /runs/<id>?wait_s=`).
MAX_STATUS_WAIT_SECONDS = 10.0
# How long after a forked run's end the next run's process is forked ahead.
FORK_AHEAD_AFTER_END_S = 0.1
# Longest the warm-up waits for every executor to register (then it goes on with those there are).
EXECUTORS_WAIT_S = 120.0


def _import_pipeline() -> None:
    import compute.run.jobs  # noqa: F401  (the jobs and the pipeline: their start-up cost, here)

    # What the host holds from here on lives as long as it does: kept out of the collector's
    # sight, a full collection after each run takes about 10 ms instead of 110.
    gc.collect()
    gc.freeze()


class SparkSessionHost:
    """The warm session and the CU's runs. Reached only by the HTTP handler (and the actor's
    `wait_ready`/`info`), never through a Ray actor handle."""

    def __init__(self, settings: SparkHostSettings) -> None:
        self.settings = settings
        self._spark = None
        self._state = "warming"
        self._error: str | None = None
        # When this host's process began its work and its session's start (wall clock, for the
        # benchmarks' cold timeline), seconds the session's start took, how many executors had
        # registered before its first job, and that job (of which the write path's warm-up), and
        # why warming the write path failed, if it did.
        self._warm_up_report = dict.fromkeys(
            (
                "host_started_at",
                "session_started_at",
                "session_init_s",
                "executors_registered",
                "first_job_s",
                "write_warm_up_s",
                "write_warm_up_error",
            )
        )
        self._warm_up_report["host_started_at"] = time.time()
        self._ready = threading.Event()
        self._runs: dict[str, Run] = {}
        self._ran = False  # anything submitted, ever (old runs are forgotten; this is not)
        # The portal has a run waiting for this host's start: it warms the write path itself.
        self._run_waiting = False
        self._lock = threading.Lock()
        self._forks = None  # ForkedRuns, once the session is warm
        self.bind_host = "127.0.0.1" if settings.bind_loopback else ray.util.get_node_ip_address()
        threading.Thread(target=self._warm_up, name="spark-warm-up", daemon=True).start()

    def _warm_up(self) -> None:
        from compute.host.spark_session import (
            import_raydp,
            start_spark_session,
            wait_for_executors,
            warm_the_write_path,
        )

        import_raydp()  # first: the driver's JVM starts once it is imported

        # The pipeline runner's imports (pyiceberg, pyarrow: seconds) overlap with the JVMs' start,
        # not with RayDP's import before it, which would wait for the interpreter's lock.
        importing = threading.Thread(target=_import_pipeline, name="import-pipeline", daemon=True)
        importing.start()
        started = time.monotonic()
        self._warm_up_report["session_started_at"] = time.time()
        try:
            self._spark = start_spark_session(
                self.settings.app_name,
                executors=self.settings.executors,
                executor_cores=self.settings.executor_cores,
                executor_memory=self.settings.executor_memory,
                placement_strategy=self.settings.placement_strategy,
            )
            self._warm_up_report["session_init_s"] = round(time.monotonic() - started, 2)
            from compute.run.forked_runs import ForkedRuns

            self._forks = ForkedRuns(self._spark)
            # Warm means every executor has registered, so the unit's first run has all of them;
            # then the first job loads the classes a job needs, which a later execution should not
            # pay for. It runs in the JVMs only: SQL steps start no Python worker. Then the write
            # path is warmed, which makes a later first run a second faster. A run that already
            # waits would wait for all of it, and its own first job and write do the same work:
            # for it the host is ready once its session is (seconds sooner).
            started = time.monotonic()
            executors = self.settings.executors
            if not self._run_waiting:
                self._warm_up_report["executors_registered"] = wait_for_executors(
                    self._spark, executors, EXECUTORS_WAIT_S, until=lambda: self._run_waiting
                )
            if not self._run_waiting:
                self._spark.range(0, executors, 1, executors).selectExpr("sum(id)").collect()
            writing = time.monotonic()
            if not self._run_waiting:
                try:
                    warm_the_write_path(self._spark, executors)
                except Exception as error:  # noqa: BLE001 - only the first execution is slower for it
                    self._warm_up_report["write_warm_up_error"] = (
                        f"{type(error).__name__}: {str(error)[:500]}"
                    )
                self._warm_up_report["write_warm_up_s"] = round(time.monotonic() - writing, 2)
            importing.join()
            self._warm_up_report["first_job_s"] = round(time.monotonic() - started, 2)
            self._forks.refill()  # the first run's process, forked ahead
            self._state = "ready"
        except Exception as error:  # reported through info(); the actor stays up to say so
            self._state = "failed"
            self._error = f"{type(error).__name__}: {error}"
        finally:
            self._ready.set()

    # -------------------------------------------------------------- the API
    def wait_ready(self, timeout: float) -> dict:
        self._ready.wait(timeout)
        return self.info()

    def info(self, run_waiting: bool = False) -> dict:
        """The host's state and facts; `run_waiting`: the portal has a run waiting for this
        host's start (so the start leaves out what only a later run would gain from)."""
        self._run_waiting = self._run_waiting or run_waiting
        with self._lock:
            active = sum(run.state not in RunState.FINAL for run in self._runs.values())
        return {
            "state": self._state,
            "error": self._error,
            **self._warm_up_report,
            "app_id": self._spark.sparkContext.applicationId if self._spark else None,
            "executors": self._executors() if self._state == "ready" else [],
            "resources_used": _resources_used(),
            "active_runs": active,
            "namespace": self.settings.namespace,
            "url": f"http://{self.bind_host}:{self.settings.port}",
        }

    def may_rekey(self) -> bool:
        """Only a host that never ran anything takes a new key (a pooled unit, at its claim)."""
        with self._lock:
            return not self._ran

    def stop(self) -> None:
        """End this host: its Spark session, then the actor itself (the driver's JVM is its child
        process and holds RayDP's app master, the executors belong to that JVM's Ray job: all end with it).
        Called when the CU is terminated."""
        time.sleep(0.2)  # the HTTP reply goes out first
        if self._forks is not None:
            self._forks.stop()
        try:
            if self._spark is not None:
                self._spark.stop()
        finally:
            ray.kill(ray.get_runtime_context().current_actor)

    def submit(self, kind: JobKind, args: dict | None = None, name: str = "") -> dict:
        run = Run(
            run_id=uuid.uuid4().hex, name=name, kind=kind, args=args or {}, submitted_at=time.time()
        )
        with self._lock:
            self._ran = True
            self._runs[run.run_id] = run
            self._forget_old_runs()
        from pyspark import InheritableThread

        isolation = run_isolation(run)
        # A run in this process uses Spark from its thread, which pinned-thread PySpark gives the
        # submitter's job properties and a py4j connection of its own; a run in a process of its
        # own is only relayed here, by a plain thread (no connection to open, a few ms sooner).
        thread = threading.Thread if isolation is not None else InheritableThread
        thread(
            target=self._execute, args=(run, isolation), name=f"run-{run.run_id}", daemon=True
        ).start()
        return run.public()

    def run_status(self, run_id: str, wait_s: float = 0.0) -> dict | None:
        """The run's record; with `wait_s`, once it has ended or after that long, whichever
        comes first (a watcher learns of the end at once instead of at its next poll)."""
        run = self._runs.get(run_id)
        if run is None:
            return None
        if wait_s > 0:
            run.finished.wait(min(wait_s, MAX_STATUS_WAIT_SECONDS))
        return run.public()

    def cancel(self, run_id: str) -> dict | None:
        run = self._runs.get(run_id)
        if run is None:
            return None
        if (
            run.state not in RunState.FINAL
            and not run.cancel_requested
            and run.progress.request_cancel()
        ):
            threading.Thread(
                target=self._keep_cancelling, args=(run,), name=f"cancel-{run_id}", daemon=True
            ).start()
        return run.public()

    def _keep_cancelling(self, run: Run) -> None:
        """cancelJobGroup cancels the jobs running at that moment only: a job the run submits a
        moment later (between two Spark actions of a step) would run to its end; and Python code
        that runs no job (a loop, a sleep) is stopped only by RunInterrupted raised in its thread,
        which the code may catch. So cancel again until the run has stopped."""
        deadline = time.monotonic() + CANCEL_PERSIST_SECONDS
        told = (
            None  # the run's process, once told (it cancels and interrupts its own code likewise)
        )
        while run.state not in RunState.FINAL and time.monotonic() < deadline:
            if run.process is not None and told is not run.process:
                told = run.process
                told.cancel()
            if self._spark is not None:
                self._spark.sparkContext.cancelJobGroup(run.run_id)
            run.progress.interrupt()
            time.sleep(CANCEL_REPEAT_SECONDS)
        if run.state not in RunState.FINAL and run.process is not None:
            run.process.end()  # a process that did not stop is ended: its run ends CANCELLED

    # ------------------------------------------------------------- internals
    def _execute(self, run: Run, isolation: Isolation | None) -> None:
        self._ready.wait()
        if run.cancel_requested or self._spark is None:
            return self._fail(run, f"Spark session failed: {self._error}")
        run.started_at = time.time()
        run.state = RunState.RUNNING
        if isolation is None:
            return self._execute_here(run)
        return self._execute_apart(run, isolation)

    def _execute_apart(self, run: Run, isolation: Isolation) -> None:
        """A workflow's run, in a process of its own that ends with it (compute/run/forked_runs.py for
        the unit owner's workflows, compute/run/sandboxed_runs.py for another author's): this thread
        relays its reports into the run's record until it reports its end."""
        from compute.run.forked_runs import EXIT_GRACE_S
        from compute.run.run_channel import ChannelClosed, follow

        try:
            process = self._run_process(isolation)
        except (RunFailed, OSError) as error:  # e.g. the unit's process limit
            return self._fail(
                run,
                str(error)
                if isinstance(error, RunFailed)
                else f"the run's process could not be started: {error}",
            )
        try:
            process.channel.send(
                {
                    "kind": "run",
                    "run_id": run.run_id,
                    "name": run.name,
                    "job": run.kind,
                    "args": run.args,
                }
            )
            run.process = process  # from here a cancel is passed on to it
            end = follow(
                process.channel,
                run,
                self._adopt_binding if isolation is Isolation.PROCESS else None,
            )
        except (ChannelClosed, OSError, ValueError) as error:
            said = process.stderr_tail() if hasattr(process, "stderr_tail") else ""
            end = {
                "outcome": "failed",
                "error": f"the run's process ended before the run did ({error}){': ' + said if said else ''}",
            }
        finally:
            threading.Thread(
                target=process.end, args=(EXIT_GRACE_S,), name=f"end-{run.run_id}", daemon=True
            ).start()
        try:
            # The process says how its run ended; whether it completes was decided here (a process
            # that claims to have completed without asking is asked now).
            if end["outcome"] == "completed" and run.progress.begin_completion():
                self._finish(run, RunState.COMPLETED, result=jsonable(end.get("result")))
            elif end["outcome"] in ("completed", "cancelled"):
                self._finish(run, RunState.CANCELLED)
            else:
                self._fail(run, str(end.get("error")))
        finally:
            if isolation is Isolation.PROCESS:
                # Once the end is recorded, and a moment later: a fork holds the GIL while the
                # kernel copies the host's page tables (10-20 ms here), which held up the answer
                # to the portal's watcher waiting for this very end (bench/RESULTS.md).
                self._forks.refill(after_s=FORK_AHEAD_AFTER_END_S)

    def _run_process(self, isolation: Isolation):
        if isolation is Isolation.PROCESS:
            return self._forks.take()
        from compute.run.sandboxed_runs import SandboxedRun, sandbox_problem

        if (problem := sandbox_problem(os.environ.get("HOME", ""))) is not None:
            raise RunFailed(problem)
        return SandboxedRun(
            Path(os.environ["HOME"]),
            {
                "cores": self.settings.executors * self.settings.executor_cores,
                "memory": self.settings.executor_memory,
            },
        )

    @staticmethod
    def _adopt_binding(message: dict) -> None:
        """A warehouse binding the owner's forked run made: the host's next runs have it."""
        from compute.host.catalog_cache import CatalogBinding
        from compute.run.pipeline import CATALOGS

        try:
            binding = CatalogBinding(
                str(message["warehouse_id"]),
                str(message["catalog_name"]),
                {str(k): str(v) for k, v in dict(message["conf"]).items()},
                float(message["expires_at"]),
            )
            CATALOGS.adopt(binding, int(message["version"]))
        except (KeyError, TypeError, ValueError):
            pass

    def _execute_here(self, run: Run) -> None:
        """The portal's own jobs (comparisons, maintenance): in this thread of the warm host."""
        from compute.run.jobs import run_job

        context = self._spark.sparkContext
        context.setJobGroup(run.run_id, run.name or run.run_id, interruptOnCancel=True)
        result = None
        try:
            result = run_job(run.kind, self._spark, run.args, run.progress)
        except (
            Exception,
            SystemExit,
            RunInterrupted,
        ) as error:  # `sys.exit()` in user code ends only the run
            self._fail(
                run, str(error) if isinstance(error, RunFailed) else traceback.format_exc(limit=-5)
            )
        else:
            # The job (the pipeline: before marking its tables complete) may have decided already.
            completed = run.progress.begin_completion()
            self._finish(
                run,
                RunState.COMPLETED if completed else RunState.CANCELLED,
                result=jsonable(result) if completed else None,
            )
        finally:
            # Once the run has ended: what it left in reference cycles goes now, not whenever the
            # collector next runs. Among it are the HTTP connections pyiceberg's catalog clients
            # opened, which otherwise stay open and pile up on an idle unit.
            result = None
            gc.collect()

    def _fail(self, run: Run, error: str) -> None:
        """The run ended without completing: CANCELLED if it was asked to, else FAILED for `error`."""
        if run.cancel_requested:
            self._finish(run, RunState.CANCELLED)
        else:
            self._finish(run, RunState.FAILED, error=error)

    @staticmethod
    def _finish(run: Run, state: str, *, error: str | None = None, result: Any = None) -> None:
        # The state goes last: a poller that sees a final state must see the rest with it.
        run.error, run.result, run.finished_at = error, result, time.time()
        run.state = state
        run.finished.set()

    def _forget_old_runs(self) -> None:
        finished = [run for run in self._runs.values() if run.state in RunState.FINAL]
        for run in sorted(finished, key=lambda r: r.finished_at or 0)[:-FINISHED_RUNS_KEPT]:
            del self._runs[run.run_id]

    def _executors(self) -> list[dict]:
        """This host's RayDP executor actors (in its CU's namespace: a shared cluster runs other
        CUs' too) and the Ray nodes they run on. Asked of the GCS itself: Ray's State API would
        need the dashboard, which serves it, and a unit runs none by default."""
        from ray._private.state import state
        from ray.core.generated import gcs_pb2

        # Ray's parsed actor table leaves the namespace out: the records themselves carry it.
        records = state._connect_and_get_accessor().get_actor_table(None, "ALIVE")
        actors = [gcs_pb2.ActorTableData.FromString(record) for record in records]
        return [
            {
                "actor_id": actor.actor_id.hex(),
                "node_id": actor.address.node_id.hex(),
                "pid": actor.pid,
            }
            for actor in actors
            if actor.ray_namespace == self.settings.namespace
            and actor.class_name.endswith("RayDPExecutor")
        ]


def run_isolation(run: Run) -> Isolation | None:
    """Where a run's job runs: a workflow's (JobKind.EXECUTION) in a process of its own, as its
    spec says; None for the portal's other jobs, which run in a thread of the host."""
    if run.kind is not JobKind.EXECUTION:
        return None
    try:
        return Isolation(run.args.get(ISOLATION, Isolation.PROCESS))
    except ValueError:
        return Isolation.SANDBOX  # the spec is refused in its process, which reaches nothing here


def _resources_used() -> dict[str, float]:
    """Ray's logical resources in use on this cluster, e.g. {"CPU": 2.0, "memory": 2147483648.0}:
    the figures the portal shows for a unit that runs no Ray dashboard."""
    total, available = ray.cluster_resources(), ray.available_resources()
    return {
        name: total[name] - available.get(name, 0.0) for name in ("CPU", "memory") if name in total
    }


class SparkHostActor:
    """The Ray actor: starts the host and its HTTP API, and offers Ray callers (anyone on the
    cluster who finds it) nothing but readiness and non-secret facts.

    Ray wraps every actor class in one that adds `__ray_call__`, which runs any function on the
    actor instance: that would hand any Ray caller the run table. Ray leaves a class that
    already names its `__ray_actor_class__` unwrapped: `_Unwrapped` below does, and this
    class writes out the two hooks Ray itself uses."""

    def __init__(self, settings: dict) -> None:
        _make_undumpable()
        host = SparkSessionHost(SparkHostSettings(**settings))
        serve(host, host.bind_host, host.settings.port)
        self._wait_ready, self._info = host.wait_ready, host.info

    def wait_ready(self, timeout: float) -> dict:
        return self._wait_ready(timeout)

    def info(self) -> dict:
        return self._info()

    def __ray_ready__(self) -> bool:
        return True

    def __ray_terminate__(self) -> None:
        ray.actor.exit_actor()


class _Unwrapped(SparkHostActor):
    __ray_actor_class__ = (
        SparkHostActor  # another class than itself: Ray disassembles what it names
    )


SparkHost = ray.remote(num_cpus=0, max_concurrency=4)(_Unwrapped)


def _make_undumpable() -> None:
    """Other processes of the same user on a shared cluster (other tenants' code) can otherwise
    read this process's memory (ptrace, /proc/<pid>/mem) and /proc/<pid>/environ, which hold the
    runs' catalog tokens and vended S3 keys. This does not cover the Spark driver JVM that
    RayDP spawns from here: exec makes it dumpable again, and it holds the catalogs' Spark
    settings (tokens, S3 keys) too. Nor does it stop root or a process with CAP_SYS_PTRACE."""
    PR_SET_DUMPABLE = 4
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
