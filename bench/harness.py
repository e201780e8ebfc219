"""What every benchmark stands on: the local stack on free ports, the portal in-process with
alice signed in, her warehouse, a compute unit, and timed runs through the portal's own routes.

Nothing is a stand-in: SeaweedFS, the identity provider, the dev catalog, PostgreSQL (a fresh
database), Ray, RayDP and Spark are the real ones the tests use. `Bench` stops everything it
started: the compute unit, the stack's processes, the database and the stack's files.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sqlmodel import Session, select

from app import create_app
from app.compute_units import handles
from app.compute_units import service as unit_service
from app.compute_units import work as unit_work
from app.compute_units.phase import SPARK_FAILED_EVENT, SPARK_READY_EVENT
from app.config import SETTINGS, Config
from app.db import make_engine
from app.extensions import lakekeeper
from app.iceberg_catalogs import catalog_for
from app.models import (
    ComputeUnit,
    ComputeUnitEvent,
    Execution,
    ExecutionState,
    UnitState,
    User,
    Warehouse,
    WorkflowVersion,
)
from app.spark_host.client import SparkHostClient
from app.spark_host.warmup import spark_host_size
from app.worker import WorkAnnouncements
from app.workflows import queries as workflow_queries
from bench.local_pyspark import LocalPySpark
from devstack.database import drop_postgres_database, fresh_postgres_database
from devstack.oidc_provider import TEST_USERS, sign_in_portal_client
from devstack.seaweedfs import TEST_USER_KEYS
from devstack.stack import LocalStack, StackPorts

USER = "alice"
BROWSER_USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) lakeport-bench"
# The compute unit every benchmark runs on: the whole machine (2 cores here), one node.
CU_CPUS = 2
CU_MEMORY_GB = 4.0
# The portal's settings for a benchmark, in the benchmark's process and in the worker's (before
# any `--setting`): the units' size limits fit the one unit size it starts.
BENCH_SETTINGS = {
    "LAKEPORT_LOG_LEVEL": "WARNING",
    "LAKEPORT_CU_MAX_CPUS": str(CU_CPUS),
    "LAKEPORT_CU_MAX_MEMORY_GB": f"{CU_MEMORY_GB:g}",
    "LAKEPORT_CU_MAX_WORKERS": "0",
}
CU_START_TIMEOUT_S = 180.0
# A row is polled this often while the benchmark waits for it to change.
ROW_POLL_S = 0.02
# A run's row is looked at when PostgreSQL announces a change of state (the worker's channel),
# and at least this often whatever is announced.
ANNOUNCED_OR_EVERY_S = 1.0
# The pause before each timed run of an interleaved comparison (`interleaved`).
SETTLE_S = 1.0

# Run on the compute unit's Spark host directly, beside the portal: a plain PySpark session bound
# once to the warehouse's catalog the way an execution binds it (the catalog's token, the storage
# keys it vends, Iceberg's REST catalog over S3A), then `sql` written to `table` (or, without a
# table, collected to the driver as the console's job does) and timed, over and over. Only the
# SQL and the Iceberg write (or the collect) are inside the timer.
PLAIN_PYSPARK_CODE = """
import time
from compute.host.catalog_cache import CatalogAccess, CatalogCache
from compute.run.iceberg_rest import rest_catalog
from compute.host.spark_session import close_session_catalog

catalog = args["catalog"]
vended = rest_catalog("plain-pyspark", catalog["uri"], catalog["warehouse"], catalog["token"]).load_table(
    args["vended_from"])
binding = CatalogCache().binding(args["warehouse_id"], CatalogAccess.vended(
    catalog["uri"], catalog["warehouse"], catalog["token"], vended.io.properties))
session = spark.newSession()
for key, value in binding.conf.items():
    session.conf.set(key, value)
active = spark.sparkContext._jvm.org.apache.spark.sql.SparkSession
active.setActiveSession(session._jsparkSession)
session.catalog.setCurrentCatalog(binding.catalog_name)
target = binding.catalog_name + "." + args["table"] if args["table"] else None
seconds = []
try:
    for _ in range(args["warmups"] + args["repeats"]):
        started = time.perf_counter()
        if target:
            session.sql(args["sql"]).writeTo(target).using("iceberg").createOrReplace()
        else:
            session.sql(args["sql"]).collect()
        seconds.append(time.perf_counter() - started)
finally:
    active.clearActiveSession()
    close_session_catalog(session, binding.catalog_name)  # as an execution's: the unit keeps no connection
result = {"seconds": seconds[args["warmups"]:]}
"""


def _epoch(moment: datetime) -> float:
    """Epoch seconds of a row's timestamp (the portal writes UTC; a naive one is UTC)."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


class BenchError(RuntimeError):
    """A benchmark could not be measured (something failed or never finished)."""


@dataclass(frozen=True)
class RunTiming:
    """One execution through the portal, from the Run request to COMPLETED in its row."""

    execution_id: int
    total_s: float
    # From the Run request until the compute unit's Spark host holds the run: the run route's
    # answer (`route_s`), the worker taking the execution (`taken_s`, its row's started_at), and
    # the rest, preparing and submitting it.
    submitted_s: float
    # The run on the Spark host, from start to finish (binding, steps, bookkeeping tables).
    on_unit_s: float
    # The steps themselves (SQL and the Iceberg writes of output steps).
    steps_s: float
    # From the run's end on the host until the row says COMPLETED.
    noticed_s: float
    # Epoch seconds at which the host got the run.
    submitted_at: float
    # The run on the host by phase (compute/run/pipeline.py): binding the catalog, the steps, completing.
    phases_s: dict[str, float]
    route_s: float = 0.0
    taken_s: float = 0.0
    # The run's log on the host ({"ts", "level", "step", "message"}), e.g. when each quality
    # check ended; its steps' progress ({"name", "started_at", "ended_at", …}).
    logs: tuple = ()
    steps: tuple = ()

    @property
    def prepared_s(self) -> float:
        """From the worker taking the execution until the host holds the run."""
        return self.submitted_s - self.route_s - self.taken_s


def interleaved(rounds: int, measures: list[Callable[[], object]]) -> None:
    """Each of `measures` once per round, so that drift (JIT, other load) hits all alike. Each
    round starts with the next measure (rotated): none always runs right after the same other,
    whose leftovers (a JVM's clean-up, a host making its next session) would land on it alone.
    A pause of SETTLE_S before each lets them end."""
    for round_ in range(rounds):
        for offset in range(len(measures)):
            time.sleep(SETTLE_S)
            measures[(round_ + offset) % len(measures)]()


def submit_medians(runs: list[RunTiming]) -> str:
    """Where the time until the host has the run goes (medians): the run route's answer, the
    worker taking the execution, preparing and submitting it."""
    return (
        f"route {median([run.route_s for run in runs]):.3f} s · worker took it "
        f"{median([run.taken_s for run in runs]):.3f} s · prepared and submitted "
        f"{median([run.prepared_s for run in runs]):.3f} s"
    )


def phase_medians(runs: list[RunTiming]) -> str:
    """The median seconds of each phase on the host (compute/run/pipeline.py) that every run reports."""
    names = (
        [name for name in runs[0].phases_s if all(name in run.phases_s for run in runs)]
        if runs
        else []
    )
    return " · ".join(
        f"{name.removesuffix('_s')} {median([run.phases_s[name] for run in runs]):.3f} s"
        for name in names
    )


@dataclass(frozen=True)
class Summary:
    """One benchmark's headline for the closing table."""

    name: str
    headline: str
    met: bool


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float], unit: str = "s", digits: int = 2) -> str:
    """As in "median 1.23 s (min 1.10, max 1.40, n=5)"."""
    return (
        f"median {median(values):.{digits}f} {unit} (min {min(values):.{digits}f}, "
        f"max {max(values):.{digits}f}, n={len(values)})"
    )


def verdict(met: bool) -> str:
    return "target met" if met else "TARGET MISSED"


def machine_summary() -> str:
    """Cores, CPU model, memory, OS and the load at this moment (other work skews the figures)."""
    model = ""
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as meminfo:
        total_kib = int(next(line for line in meminfo if line.startswith("MemTotal")).split()[1])
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"{os.cpu_count()} cores ({model or platform.machine()}), {total_kib / 2**20:.1f} GiB memory, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
        f"load average {load} at start"
    )


def python_loop_s(steps: int = 10_000_000, tries: int = 2) -> float:
    """The machine's speed now: seconds for a `steps`-step Python list comprehension (its memory
    taken and given back as it goes), best of `tries`. The same machine runs twice as slow at
    some hours as at others, and every figure moves with it; a loop that allocates nothing
    showed the machine fast while Spark ran twice as slow."""
    best = float("inf")
    for _ in range(tries):
        began = time.perf_counter()
        [0 for _ in range(steps)]
        best = min(best, time.perf_counter() - began)
    return best


def other_test_runs() -> list[str]:
    """Command lines of pytest processes running now: their load would skew the figures."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        # `pytest ...`, `python .venv/bin/pytest ...` or `python -m pytest ...`
        if any(Path(arg).name == "pytest" for arg in argv[:2]) or argv[1:3] == ["-m", "pytest"]:
            found.append(" ".join(argv).strip())
    return found


class Bench:
    """The local stack plus the in-process portal with alice signed in and her warehouse registered.

    Use as a context manager. `compute_unit_id()` starts a compute unit through the portal on
    first use; the cold-start benchmark starts it itself and hands it over (`adopt_compute_unit`).
    """

    def __init__(
        self, say: Callable[[str], None] = print, settings: dict[str, str] | None = None
    ) -> None:
        self.say = say
        # LAKEPORT_* settings that override the stack's for this run (to measure a lever).
        self.settings = settings or {}
        self.var_dir = Path(tempfile.mkdtemp(prefix="lakeport-bench-"))
        self.stack: LocalStack | None = None
        self.database_name: str | None = None
        self.engine = None
        self.app = None
        self.client = None
        self.warehouse_id: int | None = None
        self._cu_id: int | None = None
        # Figures one benchmark measures and a later one takes as its baseline (cold → pool).
        self.figures: dict[str, float] = {}
        self.tpch_scale_factor: float | None = None  # what tpch.* holds, once generated

    # ------------------------------------------------------------ start and stop
    def __enter__(self) -> Bench:
        try:
            self._start()
        except BaseException:
            self.close(keep_files=True)
            raise
        return self

    def __exit__(self, exc_type, *_exc) -> None:
        self.close(keep_files=exc_type is not None)

    def _start(self) -> None:
        self.database_name, database_url = fresh_postgres_database("lakeport_bench")
        self.stack = LocalStack(
            self.var_dir,
            StackPorts.free(),
            database_url=database_url,
            portal_settings={**BENCH_SETTINGS, **self.settings},
        )
        self.stack.start(with_portal=False, say=lambda message: self.say(f"  setup: {message}"))
        self.engine = make_engine(database_url)
        self.app = create_app(Config.from_env(self.stack.portal_environment()))
        # The background work (units, executions, sample data) in a process of its own, as in
        # production and `make run`: the worker's threads do not share an interpreter with the
        # run route and this client.
        self.say("  setup: starting the worker")
        self.stack.start_worker()
        self.client = self.app.test_client()
        # The portal ties a session to the browser that signed in (flask-login's session
        # protection): the simulated browsers of portal-load send this one too.
        self.client.environ_base["HTTP_USER_AGENT"] = BROWSER_USER_AGENT
        self._sign_in(USER)
        self.warehouse_id = self._register_warehouse()
        self.say(f"  setup: {USER} signed in, warehouse registered (logs: {self.stack.log_dir})")

    def change_setting(self, name: str, value) -> None:
        """Change a portal setting (app/config.py's name, e.g. CU_POOL_SIZE) for the rest of the
        run: in this process's portal, and in the worker, which is started again with it."""
        self.app.config[name] = value
        self.stack.restart_worker(**{SETTINGS[name].env: str(value)})

    def close(self, keep_files: bool = False) -> None:
        """Stop everything that was started; keep the stack's files (and logs) after a failure."""
        if self.app is not None:
            if (worker := self.stack.process("worker")) is not None:
                worker.stop()  # first: it would start what is terminated below again (the pool)
            with self.app.app_context():
                stopped = unit_work.terminate_all_local("the benchmark is over")
            if stopped:
                self.say(f"  teardown: terminated {stopped} compute unit(s)")
            self.app = None
        if self.stack is not None:
            self.stack.stop()
            self.stack = None
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None
        if self.database_name is not None:
            drop_postgres_database(self.database_name)
            self.database_name = None
        if keep_files:
            self.say(f"  teardown: the stack's files and logs are kept in {self.var_dir}")
        else:
            shutil.rmtree(self.var_dir, ignore_errors=True)

    # ------------------------------------------------------------ the signed-in portal
    def _sign_in(self, username: str) -> None:
        """Sign-in as a browser does it, through the provider's real login form."""
        try:
            callback = sign_in_portal_client(self.client, username, TEST_USERS[username].password)
        except RuntimeError as error:
            raise BenchError(str(error)) from None
        if callback.status_code != 302:
            raise BenchError(f"sign-in failed: HTTP {callback.status_code}")

    def csrf_token(self) -> str:
        page = self.client.get("/").get_data(as_text=True)
        return re.search(r'"X-CSRFToken": "([^"]+)"', page).group(1)

    def post(self, path: str, data: dict[str, str], expect: int = 302):
        response = self.client.post(path, data={**data, "csrf_token": self.csrf_token()})
        if response.status_code != expect:
            raise BenchError(
                f"POST {path} answered HTTP {response.status_code}: "
                f"{_page_errors(response.get_data(as_text=True))}"
            )
        return response

    @staticmethod
    def created_id(response, collection: str) -> int:
        """The id in the Location a create route redirects to (e.g. /compute-units/7)."""
        return int(re.search(rf"/{collection}/(\d+)", response.headers["Location"]).group(1))

    def _register_warehouse(self) -> int:
        keys = TEST_USER_KEYS[USER]
        response = self.post(
            "/warehouses/",
            {
                "name": "bench",
                "bucket": keys.bucket,
                "key_prefix": "bench",
                "endpoint": self.stack.seaweed.s3_endpoint,
                "region": self.stack.seaweed.region,
                "path_style_access": "on",
                "flavor": "s3-compat",
                "access_key_id": keys.access_key_id,
                "secret_access_key": keys.secret_access_key,
            },
        )
        return self.created_id(response, "warehouses")

    def warehouse(self) -> Warehouse:
        return self.row(Warehouse, self.warehouse_id)

    def owner(self) -> User:
        return self.row(User, self.warehouse().owner_id)

    # ------------------------------------------------------------ rows
    def row(self, model, row_id: int):
        with Session(self.engine, expire_on_commit=False) as db:
            return db.get(model, row_id)

    def add(self, row):
        with Session(self.engine, expire_on_commit=False) as db:
            db.add(row)
            db.commit()
            db.refresh(row)
            return row

    def first(self, statement):
        with Session(self.engine, expire_on_commit=False) as db:
            return db.exec(statement).first()

    def all(self, statement) -> list:
        with Session(self.engine, expire_on_commit=False) as db:
            return list(db.exec(statement))

    def wait_for_row(
        self,
        model,
        row_id: int,
        done: Callable[[object], bool],
        timeout_s: float,
        what: str,
        poll_s: float = ROW_POLL_S,
    ) -> object:
        deadline = time.monotonic() + timeout_s
        while not done(row := self.row(model, row_id)):
            if time.monotonic() > deadline:
                raise BenchError(f"{what} did not finish within {timeout_s:.0f} s")
            time.sleep(poll_s)
        return row

    def wait_for_final_state(
        self, announcements: WorkAnnouncements, execution_id: int, timeout_s: float
    ) -> None:
        """Wait until the execution has ended, looking at its state whenever PostgreSQL announces a
        change of a work row's state (the worker's own `WorkAnnouncements`, listening already).
        Polling the row through the ORM every 5 ms, after a long poll of the run on its host, had
        competed with the worker's recording of the run's end while the worker ran in this process."""
        deadline = time.monotonic() + timeout_s
        state = select(Execution.state).where(Execution.id == execution_id)
        while True:
            with self.engine.connect() as connection:
                if connection.execute(state).scalar_one() in ExecutionState.FINAL:
                    return
            if (left := deadline - time.monotonic()) <= 0:
                raise BenchError(
                    f"execution {execution_id} did not finish within {timeout_s:.0f} s"
                )
            announcements.wait(min(left, ANNOUNCED_OR_EVERY_S))

    # ------------------------------------------------------------ compute units
    def create_compute_unit(self, name: str) -> tuple[int, float]:
        """Start a compute unit through the portal's route; (its id, epoch seconds when it was RUNNING)."""
        response = self.post(
            "/compute-units/",
            {
                "name": name,
                "kind": "local",
                "cpus": str(CU_CPUS),
                "memory_gb": f"{CU_MEMORY_GB:g}",
                "worker_nodes": "0",
            },
        )
        cu_id = self.created_id(response, "compute-units")
        cu = self.wait_for_row(
            ComputeUnit,
            cu_id,
            lambda row: row.state not in (UnitState.PENDING, UnitState.STARTING),
            CU_START_TIMEOUT_S,
            f"compute unit {name}",
        )
        running_at = time.time()
        if cu.state != UnitState.RUNNING:
            raise BenchError(f"compute unit {name} is {cu.state}: {cu.reason}")
        return cu_id, running_at

    def wait_until_spark_ready(self, cu_id: int, timeout_s: float = CU_START_TIMEOUT_S) -> float:
        """Wait for the unit's "Spark session ready" event (its page leaves WARMING then);
        returns the epoch seconds at which it was seen."""
        ready = select(ComputeUnitEvent).where(
            ComputeUnitEvent.compute_unit_id == cu_id,
            ComputeUnitEvent.message.startswith(SPARK_READY_EVENT),
        )
        failed = select(ComputeUnitEvent).where(
            ComputeUnitEvent.compute_unit_id == cu_id,
            ComputeUnitEvent.message.startswith(SPARK_FAILED_EVENT),
        )
        deadline = time.monotonic() + timeout_s
        while self.first(ready) is None:
            if (event := self.first(failed)) is not None:
                raise BenchError(f"compute unit {cu_id}: {event.message}")
            if time.monotonic() > deadline:
                raise BenchError(
                    f"compute unit {cu_id}'s Spark session was not ready within {timeout_s:.0f} s"
                )
            time.sleep(ROW_POLL_S)
        return time.time()

    def terminate_compute_unit(self, cu_id: int) -> None:
        """Terminate through the portal's route and wait until the unit is gone."""
        self.post(f"/compute-units/{cu_id}/terminate", {})
        self.wait_for_row(
            ComputeUnit,
            cu_id,
            lambda row: row.state in (UnitState.TERMINATED, UnitState.FAILED),
            CU_START_TIMEOUT_S,
            f"terminating unit {cu_id}",
            poll_s=0.2,
        )
        if self._cu_id == cu_id:
            self._cu_id = None

    def terminate_unit_row(self, cu_id: int) -> None:
        """Terminate a unit no route reaches (a pooled one, no one's) and wait until it is gone."""
        with self.app.app_context():
            unit_service.terminate(self.row(ComputeUnit, cu_id), reason="the benchmark is over")
        self.wait_for_row(
            ComputeUnit,
            cu_id,
            lambda row: row.state in (UnitState.TERMINATED, UnitState.FAILED),
            CU_START_TIMEOUT_S,
            f"terminating unit {cu_id}",
            poll_s=0.2,
        )

    def compute_unit_id(self) -> int:
        """The benchmarks' compute unit, started on first use and left to warm its Spark session."""
        if self._cu_id is None:
            self.say(
                f"  setup: starting a compute unit ({CU_CPUS} CPUs, {CU_MEMORY_GB:g} GiB, no workers)"
            )
            self._cu_id, _ = self.create_compute_unit("bench")
        return self._cu_id

    @contextmanager
    def spark_host(self, cu_id: int) -> Iterator[SparkHostClient]:
        with self.app.app_context():
            handle = handles.handle_of(self.row(ComputeUnit, cu_id))
        with SparkHostClient(handle, timeout=30.0) as client:
            yield client

    def spark_host_info(self, cu_id: int) -> dict:
        with self.spark_host(cu_id) as host:
            return host.info()

    # ------------------------------------------------------------ workflows and executions
    def create_workflow(self, name: str, steps: list[dict]) -> int:
        """A workflow with one saved version of `steps`, through the portal's editor routes. A
        step's `publish` ({"table", "mode", "checks"}) makes it a named output."""
        workflow_id = self.created_id(
            self.post("/workflows/", {"name": name, "description": "benchmark"}), "workflows"
        )
        form = {"base_version": "0"}
        for index, step in enumerate(steps):
            form |= {
                f"steps-{index}-name": step["name"],
                f"steps-{index}-kind": step["kind"],
                f"steps-{index}-code": step["code"],
            }
            if step.get("output"):
                form[f"steps-{index}-output"] = "on"
            if publish := step.get("publish"):  # a named output (app/workflows/forms.py's fields)
                form[f"steps-{index}-publish-table"] = publish["table"]
                form[f"steps-{index}-publish-mode"] = publish.get("mode", "append")
                if publish.get("checks"):
                    form[f"steps-{index}-publish-checks"] = json.dumps(publish["checks"])
        self.post(f"/workflows/{workflow_id}/edit", form)
        return workflow_id

    def submit(self, workflow_id: int, cu_id: int, csrf_token: str | None = None) -> int:
        """Run the workflow on the unit through the run dialog's route; the new execution's id."""
        data = {
            "compute_unit_id": str(cu_id),
            "warehouse_id": str(self.warehouse_id),
            "csrf_token": csrf_token or self.csrf_token(),
        }
        response = self.client.post(f"/executions/new?workflow_id={workflow_id}", data=data)
        if response.status_code != 302:
            raise BenchError(
                f"the run dialog refused: {_page_errors(response.get_data(as_text=True))}"
            )
        return self.created_id(response, "executions")

    def cancel_execution(self, execution_id: int) -> None:
        self.post(f"/executions/{execution_id}/cancel", {})
        self.wait_for_row(
            Execution,
            execution_id,
            lambda row: row.state in ExecutionState.FINAL,
            120,
            f"cancelling execution {execution_id}",
            poll_s=0.2,
        )

    def start_web_portal(self) -> str:
        """The portal's web workers under gunicorn as shipped, on this stack (same database and
        secret key as the in-process portal, so alice's session cookie holds); its base URL."""
        self.stack.start_web_portal()
        return self.stack.portal_url

    def run(self, workflow_id: int, cu_id: int, timeout_s: float = 1800.0) -> RunTiming:
        """Run the workflow through the run route and wait for COMPLETED in the Execution row."""
        # The browser holds the CSRF token in the page it runs from: reading it is not the run's.
        csrf_token = self.csrf_token()
        announcements = WorkAnnouncements(
            self.engine.url.render_as_string(hide_password=False), threading.Event()
        )
        announcements.wait(
            0
        )  # connects and listens: no change of state after the submit goes unseen
        try:
            started = time.time()
            execution_id = self.submit(workflow_id, cu_id, csrf_token)
            routed = time.time()
            self.wait_for_final_state(announcements, execution_id, timeout_s)
            ended = time.time()
        finally:
            announcements.close()
        execution = self.row(Execution, execution_id)
        if execution.state != ExecutionState.COMPLETED:
            raise BenchError(
                f"execution {execution_id} ended {execution.state}: {execution.reason}"
            )
        with self.spark_host(cu_id) as host:
            run = host.run(execution.run_id)
        steps = json.loads(execution.progress)["steps"]
        return RunTiming(
            execution_id=execution_id,
            total_s=ended - started,
            submitted_s=run["submitted_at"] - started,
            on_unit_s=run["finished_at"] - run["started_at"],
            steps_s=sum(step["ended_at"] - step["started_at"] for step in steps),
            noticed_s=ended - run["finished_at"],
            submitted_at=run["submitted_at"],
            phases_s=dict((run.get("result") or {}).get("phases_s") or {}),
            route_s=routed - started,
            taken_s=_epoch(execution.started_at) - routed,
            logs=tuple((run.get("progress") or {}).get("logs") or ()),
            steps=tuple(steps),
        )

    def plain_pyspark(
        self,
        cu_id: int,
        sql: str,
        table: str | None,
        vended_from: str,
        *,
        warmups: int,
        repeats: int,
    ) -> list[float]:
        """Seconds per repetition of `sql` written to `table` (None: collected) in a plain
        PySpark session on the unit's Spark host (PLAIN_PYSPARK_CODE), after `warmups` untimed
        ones; `vended_from` is a table of the warehouse whose loading makes the catalog vend
        storage keys."""
        args = {
            **self._catalog_args(),
            "sql": sql,
            "table": table,
            "vended_from": vended_from,
            "warmups": warmups,
            "repeats": repeats,
        }
        with self.spark_host(cu_id) as host:
            run_id = host.probe(PLAIN_PYSPARK_CODE, args, name="bench-plain-pyspark")["run_id"]
            run = host.wait(run_id, timeout_s=3600.0)
        if run["state"] != "COMPLETED":
            raise BenchError(f"the plain PySpark run ended {run['state']}: {run['error']}")
        return run["result"]["seconds"]

    def local_pyspark(self, vended_from: str) -> LocalPySpark:
        """Plain PySpark `local[CU_CPUS]` (no Ray) in a process of its own, bound to the
        warehouse's catalog like an execution; enter it to start its session."""
        return LocalPySpark(
            cores=CU_CPUS,
            memory=spark_host_size(self.row(ComputeUnit, self.compute_unit_id()))[
                "executor_memory"
            ],
            **self._catalog_args(),
            vended_from=vended_from,
            log_path=self.var_dir / "local-pyspark.log",
        )

    def _catalog_args(self) -> dict:
        """How an execution of alice's reaches her warehouse's catalog: its URL, name and a token."""
        warehouse = self.warehouse()
        with self.app.app_context():
            token = (
                lakekeeper().user_token(self.owner().subject, warehouse.lakekeeper_id).access_token
            )
            uri = f"{self.app.config['LAKEKEEPER_URL'].rstrip('/')}/catalog"
        return {
            "catalog": {"uri": uri, "warehouse": warehouse.lakekeeper_name, "token": token},
            "warehouse_id": warehouse.lakekeeper_id,
        }

    # ------------------------------------------------------------ data
    def generate_tpch(self, scale_factor: float, timeout_s: float = 1800.0) -> float:
        """TPC-H at `scale_factor` into tpch.* of the warehouse, through the portal's sample-data
        route (app/workflows/service.py and work.py, tpchgen-cli); returns the seconds it took."""
        started = time.monotonic()
        self.post(
            "/workflows/datasets/sample",
            {"warehouse_id": str(self.warehouse_id), "scale_factor": f"{scale_factor:g}"},
            expect=200,
        )
        owner, warehouse = self.owner(), self.warehouse()
        deadline = started + timeout_s
        while True:
            with self.app.app_context():
                job = workflow_queries.sample_data_job(owner, warehouse)
            if not job.running:
                break
            if time.monotonic() > deadline:
                raise BenchError(
                    f"TPC-H generation did not finish within {timeout_s:.0f} s ({job.step})"
                )
            time.sleep(0.5)
        if job.state != "done":
            raise BenchError(f"TPC-H generation failed: {job.error}")
        self.tpch_scale_factor = scale_factor
        return time.monotonic() - started

    def tpch_at(self, scale_factor: float) -> None:
        """tpch.* at `scale_factor`, generated (and said so) unless it is already."""
        if self.tpch_scale_factor != scale_factor:
            seconds = self.generate_tpch(scale_factor)
            self.say(f"  TPC-H SF {scale_factor:g} written into tpch.* in {seconds:.1f} s")

    @contextmanager
    def iceberg_catalog(self):
        """The portal's own pyiceberg catalog of the warehouse (service token, vended storage keys)."""
        with self.app.app_context():
            yield catalog_for(self.warehouse())

    def workflow_version_id(self, workflow_id: int) -> int:
        return self.first(
            select(WorkflowVersion.id).where(WorkflowVersion.workflow_id == workflow_id)
        )


def _page_errors(page: str) -> str:
    """The error messages a re-rendered form shows, or the start of the page."""
    errors = re.findall(r'data-testid="error-[\w-]+"[^>]*>([^<]+)<', page)
    return "; ".join(errors) if errors else page[:300]
