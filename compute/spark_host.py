"""The Spark host: one warm Spark session per compute unit, reachable over HTTP.

How the portal hands work to a compute unit (CU), and why:

- Creating a RayDP Spark session costs seconds and a JVM, so an execution must not pay
  for one. A named, detached Ray actor, `SparkHost`, owns one session for the CU's
  lifetime and runs each execution in its own thread as a Spark job group (so cancelling
  is `cancelJobGroup`). The FAIR scheduler lets concurrent executions share executors.
- The portal watches many CUs from one process. A Ray driver (`ray.init`) can be
  connected to one cluster per process only, and a Ray Job per execution cost 2-4 s
  here before user code ran (job supervisor actor, driver process, `ray.init`): more
  than the warm-latency budget. So the two paths differ:
  * Bootstrapping goes through Ray's Jobs API (HTTP, the cluster's token per request):
    the portal submits `python -m compute.start_spark_host '<settings>'` as a Ray Job;
    that driver creates this actor on the head node (or finds it), waits until its
    session is warm and exits.
  * Executions go straight to the actor through the small JSON API it serves on the
    head node (`API` below): one HTTP round trip per call, no process start. Requests
    carry the cluster's Ray token, checked exactly as Ray's dashboard checks it.

What an execution is: Python source run with `spark` (the session), `args` (a JSON object)
and `progress` (a `RunProgress`: steps and a log tail the code publishes, shown in the run's
status while it runs) in scope; it may set `result` to a JSON-serialisable value. Pipelines
use `compute.pipeline.run_pipeline(spark, args, progress)`.
"""
from __future__ import annotations

import json
import threading
import time
import traceback
import uuid
from collections import deque
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs
from typing import Any

import ray

NAMESPACE = "lakeport"
ACTOR_NAME = "spark-host"
API = "/v1"
FINISHED_RUNS_KEPT = 500
LOG_LINES_SHOWN = 200
# A cancelled run's job group is cancelled again every CANCEL_REPEAT_SECONDS until it stops.
CANCEL_REPEAT_SECONDS = 0.5
CANCEL_PERSIST_SECONDS = 120.0
# Longest a status request may wait for its run to end (`GET /runs/<id>?wait_s=`).
MAX_STATUS_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class SparkHostSettings:
    port: int
    bind_host: str = "127.0.0.1"
    executors: int = 1
    executor_cores: int = 1
    executor_memory: str = "1g"
    placement_strategy: str | None = "SPREAD"
    app_name: str = "lakeport"
    warm_timeout_s: float = 300.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SparkHostSettings:
        return cls(**json.loads(text))


class RunState:
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    FINAL = (COMPLETED, FAILED, CANCELLED)


class RunFailed(Exception):
    """Raised by an execution's code that has already explained (in its progress log) what
    went wrong: the run's error is this message alone, without a traceback."""


class RunProgress:
    """What a running execution publishes for its watchers: its steps, a tail of its log,
    and whether it was asked to stop. Written by the execution's thread, read by status calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: list[dict] = []
        self._logs: deque[dict] = deque(maxlen=LOG_LINES_SHOWN)
        self._cancel = threading.Event()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def request_cancel(self) -> None:
        self._cancel.set()

    def set_steps(self, steps: list[dict]) -> None:
        with self._lock:
            self._steps = [dict(step) for step in steps]

    def update_step(self, name: str, **fields: Any) -> None:
        with self._lock:
            for step in self._steps:
                if step["name"] == name:
                    step.update(fields)

    def log(self, level: str, step: str | None, message: str) -> None:
        with self._lock:
            self._logs.append({"ts": time.time(), "level": level, "step": step, "message": message})

    def public(self) -> dict:
        with self._lock:
            return {"steps": [dict(step) for step in self._steps], "logs": list(self._logs)}


@dataclass
class Run:
    run_id: str
    name: str
    code: str
    args: dict
    state: str = RunState.QUEUED
    submitted_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    result: Any = None
    progress: RunProgress = field(default_factory=RunProgress)
    finished: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def cancel_requested(self) -> bool:
        return self.progress.cancel_requested

    def public(self) -> dict:
        return {
            "run_id": self.run_id, "name": self.name, "state": self.state,
            "submitted_at": self.submitted_at, "started_at": self.started_at, "finished_at": self.finished_at,
            "error": self.error, "result": self.result, "progress": self.progress.public(),
        }


def _import_pipeline() -> None:
    import compute.pipeline  # noqa: F401


@ray.remote(num_cpus=0, max_concurrency=4)
class SparkHost:
    def __init__(self, settings: dict) -> None:
        self.settings = SparkHostSettings(**settings)
        self._spark = None
        self._state = "warming"
        self._error: str | None = None
        self._session_init_s: float | None = None
        self._first_job_s: float | None = None
        self._ready = threading.Event()
        self._runs: dict[str, Run] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._warm_up, name="spark-warm-up", daemon=True).start()
        self._server = _serve(self, self.settings.bind_host, self.settings.port)

    def _warm_up(self) -> None:
        from compute.spark_session import start_spark_session

        # The pipeline runner's imports (pyiceberg, pyarrow: seconds) overlap with the JVMs' start.
        importing = threading.Thread(target=_import_pipeline, name="import-pipeline", daemon=True)
        importing.start()
        started = time.monotonic()
        try:
            self._spark = start_spark_session(
                self.settings.app_name,
                executors=self.settings.executors,
                executor_cores=self.settings.executor_cores,
                executor_memory=self.settings.executor_memory,
                placement_strategy=self.settings.placement_strategy,
            )
            self._session_init_s = round(time.monotonic() - started, 2)
            # The first job starts executors' Python workers and loads classes; an execution should not pay for it.
            started = time.monotonic()
            self._spark.sparkContext.parallelize(range(self.settings.executors), self.settings.executors).count()
            importing.join()
            self._first_job_s = round(time.monotonic() - started, 2)
            self._state = "ready"
        except Exception as error:  # reported through info(); the actor stays up to say so
            self._state = "failed"
            self._error = f"{type(error).__name__}: {error}"
        finally:
            self._ready.set()

    # ------------------------------------------------------------ Ray methods
    def wait_ready(self, timeout: float) -> dict:
        self._ready.wait(timeout)
        return self.info()

    def info(self) -> dict:
        with self._lock:
            active = sum(run.state not in RunState.FINAL for run in self._runs.values())
        return {
            "state": self._state,
            "error": self._error,
            "session_init_s": self._session_init_s,
            "first_job_s": self._first_job_s,
            "app_id": self._spark.sparkContext.applicationId if self._spark else None,
            "executors": self._executors() if self._state == "ready" else [],
            "active_runs": active,
            "url": f"http://{self.settings.bind_host}:{self.settings.port}",
        }

    def submit(self, code: str, args: dict | None = None, name: str = "") -> dict:
        run = Run(run_id=uuid.uuid4().hex, name=name, code=code, args=args or {}, submitted_at=time.time())
        with self._lock:
            self._runs[run.run_id] = run
            self._forget_old_runs()
        from pyspark import InheritableThread

        InheritableThread(target=self._execute, args=(run,), name=f"run-{run.run_id}", daemon=True).start()
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
        if run.state not in RunState.FINAL and not run.cancel_requested:
            run.progress.request_cancel()
            threading.Thread(target=self._keep_cancelling, args=(run,), name=f"cancel-{run_id}",
                             daemon=True).start()
        return run.public()

    def _keep_cancelling(self, run: Run) -> None:
        """cancelJobGroup cancels the jobs running at that moment only: a job the run submits a
        moment later (between two Spark actions of a step) would run to its end. So cancel again
        until the run has stopped."""
        deadline = time.monotonic() + CANCEL_PERSIST_SECONDS
        while run.state not in RunState.FINAL and time.monotonic() < deadline:
            if self._spark is not None:
                self._spark.sparkContext.cancelJobGroup(run.run_id)
            time.sleep(CANCEL_REPEAT_SECONDS)

    # ------------------------------------------------------------- internals
    def _execute(self, run: Run) -> None:
        self._ready.wait()
        if run.cancel_requested or self._spark is None:
            self._finish(run, RunState.CANCELLED if run.cancel_requested else RunState.FAILED,
                         error=None if run.cancel_requested else f"Spark session failed: {self._error}")
            return
        run.started_at = time.time()
        run.state = RunState.RUNNING
        context = self._spark.sparkContext
        context.setJobGroup(run.run_id, run.name or run.run_id, interruptOnCancel=True)
        namespace = {"__name__": "__lakeport_run__", "spark": self._spark, "args": run.args,
                     "progress": run.progress}
        try:
            exec(compile(run.code, f"<execution {run.name or run.run_id}>", "exec"), namespace)
        except RunFailed as failure:
            self._finish(run, RunState.CANCELLED if run.cancel_requested else RunState.FAILED,
                         error=None if run.cancel_requested else str(failure))
        except (Exception, SystemExit):  # SystemExit too: `sys.exit()` in user code ends only the run
            if run.cancel_requested:
                self._finish(run, RunState.CANCELLED)
            else:
                self._finish(run, RunState.FAILED, error=traceback.format_exc(limit=-5))
        else:
            self._finish(run, RunState.CANCELLED if run.cancel_requested else RunState.COMPLETED,
                         result=_jsonable(namespace.get("result")))

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
        """RayDP's executor actors and the Ray nodes they run on."""
        from ray.util.state import list_actors

        # This cluster's address, explicitly: with several clusters on one machine (several
        # compute units), Ray's address auto-detection refuses to pick one.
        actors = list_actors(address=ray.get_runtime_context().gcs_address, filters=[("state", "=", "ALIVE")],
                             limit=10_000, raise_on_missing_output=False)
        return [
            {"actor_id": actor.actor_id, "node_id": actor.node_id, "pid": actor.pid}
            for actor in actors
            if actor.class_name.endswith("RayDPExecutor")
        ]


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _token_ok(authorization: str) -> bool:
    """The same check Ray's dashboard applies: the cluster's token, when token auth is on."""
    from ray._private.authentication.authentication_utils import is_token_auth_enabled, validate_request_token

    return not is_token_auth_enabled() or validate_request_token(authorization)


def _serve(host: SparkHost, bind_host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def _dispatch(self, method: str) -> None:
            if not _token_ok(self.headers.get("Authorization", "")):
                return self._reply(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong cluster token"})
            path, _, query = self.path.partition("?")
            parts = path.removeprefix(API).strip("/").split("/")
            try:
                if method == "GET" and parts == ["host"]:
                    return self._reply(HTTPStatus.OK, host.info())
                if method == "POST" and parts == ["runs"]:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    if not isinstance(body.get("code"), str):
                        return self._reply(HTTPStatus.BAD_REQUEST, {"error": "`code` (Python source) is required"})
                    run = host.submit(body["code"], body.get("args"), body.get("name", ""))
                    return self._reply(HTTPStatus.ACCEPTED, run)
                if len(parts) == 2 and parts[0] == "runs" and method == "GET":
                    wait = parse_qs(query).get("wait_s", ["0"])[0]
                    try:
                        wait_s = float(wait)
                    except ValueError:
                        return self._reply(HTTPStatus.BAD_REQUEST, {"error": "`wait_s` must be a number"})
                    return self._found(host.run_status(parts[1], wait_s))
                if len(parts) == 3 and parts[0] == "runs" and parts[2] == "cancel" and method == "POST":
                    return self._found(host.cancel(parts[1]))
                return self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {method} {self.path}"})
            except json.JSONDecodeError:
                return self._reply(HTTPStatus.BAD_REQUEST, {"error": "body is not JSON"})

        def _found(self, run: dict | None) -> None:
            if run is None:
                return self._reply(HTTPStatus.NOT_FOUND, {"error": "no such run"})
            return self._reply(HTTPStatus.OK, run)

        def _reply(self, status: HTTPStatus, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:
            """Requests are not logged: the portal polls often."""

    # `host` is the actor's own instance: the handler calls its methods directly, not through Ray.
    server = ThreadingHTTPServer((bind_host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="spark-host-http", daemon=True).start()
    return server
