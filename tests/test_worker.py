"""The worker process: leases, takeover after a worker dies, and a database outage mid-run.

The leases are checked on SQLite and PostgreSQL. The rest runs the worker as a real subprocess
(`flask --app wsgi lakeport worker`) on a database of its own, with a real local compute unit
running real executions: the worker is killed mid-run and started again, and the database refuses
every connection for 20 s mid-run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import fields, replace
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql
from sqlmodel import Session, update

from app import create_app, leases
from app.compute_units import work as unit_work
from app.config import PROJECT_ROOT, SETTINGS, Config
from app.db import make_engine, upgrade_database
from app.models import ComputeUnit, Execution, Schedule, User, WorkLease, utcnow
from app.worker import MAX_BACKOFF_SECONDS, WorkAnnouncements
from devstack.database import POSTGRES_ADMIN_URL, drop_postgres_database, fresh_postgres_database
from tests.factories import (
    equipped,
    make_user,
    register_warehouse,
    reload,
    run,
    schedule_row,
    sign_in_as,
    start_unit,
    unit_events,
    update_row,
    workflow_for,
)


# --------------------------------------------------------------------------- the registry
def test_the_registry_holds_every_kind_of_work_the_worker_does_units_first():
    from app import work_registry
    from app.worker import _join_the_features

    _join_the_features()
    names = [source.name for source in work_registry.sources()]
    # Every kind of work the worker does, in this order (other kinds may come between).
    kinds = [
        "units",
        "executions",
        "comparison",
        "sample-data",
        "maintenance",
        "warehouse-closing",
        "grants",
        "notifications",
    ]
    assert [name for name in names if name in kinds] == kinds
    assert names[0] == "units"
    config = {
        "WORKER_SUPERVISOR_SECONDS": 30,
        "USAGE_SAMPLE_SECONDS": 600,
        "SCHEDULER_SECONDS": 20,
        "IDENTITY_CHECK_SECONDS": 900,
        "GRANTS_RECONCILE_SECONDS": 10,
    }
    first = {entry.lease: entry.first_delay(config) for entry in work_registry.passes()}
    assert first == {
        "supervisor": 30,
        "usage": 30,
        "scheduler": 0,
        "identity": 0,
        "catalog-grants": 10,
    }
    # Joining again under a name in use replaces the entry: a module imported twice doubles nothing.
    units = next(source for source in work_registry.sources() if source.name == "units")
    count = len(work_registry.sources())
    try:
        work_registry.pending_source("units", work_registry.UNITS, list)
        assert len(work_registry.sources()) == count
        assert work_registry.sources()[0].pending is list
    finally:
        work_registry.pending_source(units.name, units.order, units.pending)


# --------------------------------------------------------------------------- leases
@pytest.fixture(params=["sqlite", "postgresql"])
def lease_app(request, tmp_path, portal_config):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'leases.db'}"
        upgrade_database(url)
        yield create_app(replace(portal_config, DATABASE_URL=url))
        return
    name, url = fresh_postgres_database("lakeport_leases")
    upgrade_database(url)
    app = create_app(replace(portal_config, DATABASE_URL=url))
    yield app
    app.extensions["db_engine"].dispose()
    drop_postgres_database(name)


def test_postgresql_announces_new_work_and_state_changes_to_the_worker_at_once():
    name, url = fresh_postgres_database("lakeport_announcements")
    upgrade_database(url)
    engine = make_engine(url)
    announcements = WorkAnnouncements(url, threading.Event())
    try:
        announcements.wait(0)  # listening from here on
        with Session(engine) as db:
            user = User(
                issuer="https://tests.invalid", subject="announced", email="announced@example.test"
            )
            db.add(user)
            db.flush()
            db.add(ComputeUnit(owner_id=user.id, name="announced", kind="local"))
            db.commit()
        started = time.monotonic()
        announcements.wait(30)
        assert time.monotonic() - started < 5  # the new PENDING unit woke it

        with Session(engine) as db:  # not a change of state: nothing to announce
            db.exec(update(ComputeUnit).values(name="renamed"))
            db.commit()
        started = time.monotonic()
        announcements.wait(1.0)
        assert time.monotonic() - started >= 0.9

        with Session(engine) as db:
            db.exec(update(ComputeUnit).values(state="TERMINATING"))
            db.commit()
        started = time.monotonic()
        announcements.wait(30)
        assert time.monotonic() - started < 5
    finally:
        announcements.close()
        engine.dispose()
        drop_postgres_database(name)


def test_without_postgresql_the_pause_is_a_plain_one_that_a_stop_cuts_short(tmp_path):
    stopping = threading.Event()
    announcements = WorkAnnouncements(f"sqlite:///{tmp_path / 'plain.db'}", stopping)
    started = time.monotonic()
    announcements.wait(0.3)
    assert time.monotonic() - started >= 0.3
    threading.Timer(0.2, stopping.set).start()
    started = time.monotonic()
    announcements.wait(30)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "feature, each_item, a_pass",
    [
        ("app.warehouses.work", "check_grants", "reconcile_grants"),
        ("app.schedules.work", "_follow_waiting", "fire_due"),
    ],
)
def test_a_periodic_pass_stops_at_its_next_item_once_its_worker_lets_go(
    app, db_engine, monkeypatch, feature, each_item, a_pass
):
    """A pass over every warehouse or schedule goes on only while its worker holds it: once the
    worker stops (or lost the lease), it ends at the next row instead of acting, unleased, beside
    the worker that takes it over."""
    from importlib import import_module
    from types import SimpleNamespace

    work = import_module(feature)
    owner = make_user(db_engine)
    schedules = [schedule_row(db_engine, owner, *equipped(db_engine, owner)) for _ in range(2)]
    seen: list[int] = []
    monkeypatch.setattr(work, each_item, lambda subject, *rest: seen.append(subject))
    for quiet in ("delete_unused_roles", "_follow_runs", "_fire_schedule"):
        if hasattr(work, quiet):
            monkeypatch.setattr(work, quiet, lambda *args: None)
    held = SimpleNamespace(lost=threading.Event())
    leases.hold_in_this_thread(held)
    try:
        with app.app_context():
            getattr(work, a_pass)()
            assert len(seen) >= 2  # held: every row
            seen.clear()
            held.lost.set()  # Worker.stop() sets it for all its work
            getattr(work, a_pass)()
            assert seen == []
    finally:
        leases.hold_in_this_thread(None)
        for schedule in schedules:  # the schedule passes of later tests leave them be
            update_row(db_engine, Schedule, schedule.id, paused=True)


def test_a_lease_has_one_holder_until_it_expires_then_another_takes_it_over(lease_app):
    with lease_app.app_context():
        assert leases.claim("execution:1", "worker-a", 30)
        assert leases.claim("execution:1", "worker-a", 30)  # its own: renewed
        assert not leases.claim("execution:1", "worker-b", 30)
        assert leases.holder_of("execution:1") == "worker-a"
        assert leases.renew(["execution:1"], "worker-a", 30) == set()
        # Worker a dies: its lease is not renewed and runs out.
        with Session(lease_app.extensions["db_engine"]) as db:
            db.get(WorkLease, "execution:1").expires_at = utcnow() - timedelta(seconds=1)
            db.commit()
        assert leases.holder_of("execution:1") is None
        assert leases.claim("execution:1", "worker-b", 30)
        assert leases.holder_of("execution:1") == "worker-b"
        # Worker a comes back: it learns that it lost the lease, and cannot release it.
        assert leases.renew(["execution:1"], "worker-a", 30) == {"execution:1"}
        leases.release(["execution:1"], "worker-a")
        assert leases.holder_of("execution:1") == "worker-b"
        leases.release(["execution:1"], "worker-b")
        assert leases.claim("execution:1", "worker-a", 30)


# --------------------------------------------------------------------------- the worker as a process
SLEEPY_STEP = [
    {
        "name": "slept",
        "kind": "python",
        "output": True,
        "code": "import time\n\ndef run(spark):\n    time.sleep({seconds})\n    return spark.range(7)",
    }
]


def sleepy(seconds: int) -> list[dict]:
    return [{**SLEEPY_STEP[0], "code": SLEEPY_STEP[0]["code"].replace("{seconds}", str(seconds))}]


def environment_of(config: Config) -> dict[str, str]:
    """`config` as the LAKEPORT_* environment a process reads it from (app/config.py)."""
    env = {}
    for item in fields(config):
        setting = SETTINGS.get(item.name)
        value = getattr(config, item.name)
        if setting is not None and value is not None:
            env[setting.env] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


class WorkerProcess:
    def __init__(self, config: Config, log_path):
        self.config, self.log_path = config, log_path
        self.process: subprocess.Popen | None = None

    def start(self) -> "WorkerProcess":
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "flask", "--app", "wsgi", "lakeport", "worker"],
            cwd=PROJECT_ROOT,
            env={**os.environ, **environment_of(self.config)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def own_database():
    """A database of these tests' own: it is made unavailable on purpose."""
    name, url = fresh_postgres_database("lakeport_worker")
    upgrade_database(url)
    yield name, url
    drop_postgres_database(name)


@pytest.fixture(scope="module")
def worker_stack(own_database, portal_config, lakehouse, tmp_path_factory):
    """The web side in this process, the worker as a subprocess, a newcomer with a warehouse and a
    RUNNING local unit whose Spark session is warm."""
    name, url = own_database
    config = replace(
        portal_config,
        DATABASE_URL=url,
        LAKEKEEPER_URL=lakehouse.catalog_url,
        CU_MAX_CPUS=2,
        CU_ALLOWED_ENDPOINTS=lakehouse.cu_allowed_endpoints,
        CU_MAX_MEMORY_GB=4.0,
        CU_MAX_WORKERS=1,
        CU_WARM_SPARK_ON_START=True,
        WORKER_LEASE_SECONDS=6.0,
    )
    app = create_app(config)
    engine = make_engine(url)
    client = app.test_client()
    user = make_user(engine)
    sign_in_as(client, user)
    logs = tmp_path_factory.mktemp("worker-logs")
    processes: list[WorkerProcess] = []

    def new_worker() -> WorkerProcess:
        process = WorkerProcess(config, logs / f"worker-{len(processes)}.log").start()
        processes.append(process)
        return process

    new_worker()
    cu_id = None
    try:
        warehouse_id = register_warehouse(client, lakehouse, "outlasting")
        cu_id = start_unit(client, engine, "outlasting").id
        deadline = time.monotonic() + 240
        while not any("Spark session ready" in message for message in unit_events(engine, cu_id)):
            assert time.monotonic() < deadline, unit_events(engine, cu_id)
            time.sleep(1)
        yield app, client, engine, user, cu_id, warehouse_id, new_worker, processes
    finally:
        for process in processes:
            process.stop()
        if cu_id is not None:
            with app.app_context():
                unit_work.terminate_all_local("test over")
        engine.dispose()
        app.extensions["db_engine"].dispose()


def wait_state(engine, execution_id: int, states: tuple[str, ...], timeout: float) -> Execution:
    deadline = time.monotonic() + timeout
    while (execution := reload(engine, Execution, execution_id)).state not in states:
        assert time.monotonic() < deadline, (execution.state, execution.reason)
        time.sleep(0.5)
    return execution


def start_sleepy_run(client, engine, user, cu_id, warehouse_id, seconds: int) -> int:
    workflow = workflow_for(engine, user, sleepy(seconds))
    response = run(client, workflow, cu_id, warehouse_id)
    assert response.status_code == 302, response.get_data(as_text=True)[:500]
    execution_id = int(response.headers["Location"].rsplit("/", 1)[1])
    running = wait_state(engine, execution_id, ("RUNNING", "FAILED", "COMPLETED"), timeout=120)
    assert running.state == "RUNNING" and running.run_id, running.reason
    return execution_id


def test_a_killed_worker_is_replaced_and_the_run_it_watched_completes(worker_stack):
    app, client, engine, user, cu_id, warehouse_id, new_worker, workers = worker_stack
    execution_id = start_sleepy_run(client, engine, user, cu_id, warehouse_id, seconds=20)
    with Session(engine) as db:
        holder = db.get(WorkLease, f"execution:{execution_id}").holder
    first = workers[-1]
    assert holder.split(":")[1] == str(first.process.pid)  # watched by the worker process
    first.kill()
    killed_at = time.monotonic()
    time.sleep(2)
    assert reload(engine, Execution, execution_id).state == "RUNNING"

    replacement = new_worker()
    execution = wait_state(engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED"), timeout=180)
    assert execution.state == "COMPLETED", execution.reason
    assert json.loads(execution.outputs)["outputs"] == {"slept": f"results.e{execution_id}_slept"}
    # The replacement waited for the dead worker's lease to run out (6 s), then took the run over.
    assert time.monotonic() - killed_at > 6
    assert replacement.alive
    assert reload(engine, ComputeUnit, cu_id).state == "RUNNING"


def test_a_database_outage_of_20_seconds_mid_run_never_leaves_the_execution_stuck(
    worker_stack, own_database
):
    app, client, engine, user, cu_id, warehouse_id, new_worker, workers = worker_stack
    name, _url = own_database
    worker = workers[-1]
    execution_id = start_sleepy_run(client, engine, user, cu_id, warehouse_id, seconds=15)
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name))
        )
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            time.sleep(20)  # the run ends on its unit meanwhile
        finally:
            admin.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name))
            )

    engine.dispose()  # this test's own connections died too
    execution = wait_state(engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED"), timeout=120)
    # The run completed on its unit during the outage, and its unit keeps its record: the outage
    # paused the watch without recording anything, and the watch taken up again finds the run
    # COMPLETED. The portal's database going away is no reason to fail a run that succeeded.
    assert execution.state == "COMPLETED", (execution.state, execution.reason)
    assert json.loads(execution.outputs)["outputs"] == {"slept": f"results.e{execution_id}_slept"}
    assert worker.alive  # the same worker process lived through it, retrying

    def own_lines() -> str:
        return "\n".join(line for line in worker.log().splitlines() if "httpx" not in line)

    # The execution's watcher may end it before the worker's loop, backing off by up to
    # MAX_BACKOFF_SECONDS, tries its next pass: that pass is the one that says so.
    deadline = time.monotonic() + MAX_BACKOFF_SECONDS + 10
    while "the database answers again" not in own_lines() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "database unavailable" in own_lines() and "the database answers again" in own_lines(), (
        own_lines()[-3000:]
    )
    assert reload(engine, ComputeUnit, cu_id).state == "RUNNING"  # not stopped as idle underneath
