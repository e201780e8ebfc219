"""Compute units through the portal, on real local Ray clusters."""

from __future__ import annotations

import os
import re
import secrets
import signal
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from sqlmodel import Session, select

from app import create_app
from app.compute_units import handles, supervision
from app.compute_units import service as unit_service
from app.compute_units import work as unit_work
from app.models import (
    ComputeUnit,
    ComputeUnitEvent,
    Execution,
    User,
    Workflow,
    WorkflowVersion,
    WorkLease,
)
from app.ray_clusters.base import ClusterHandle, ClusterStatus, NodeStatus
from app.ray_clusters.local import cluster_pids
from app.spark_host import warmup as spark_warmup
from app.states import UnitState
from compute.contract import secret_digest
from compute.host.host_http import serve
from devstack.process import free_port, port_is_open
from tests.processes import process_running
from tests.stand_ins import StandInHost, handle_on


@pytest.fixture
def app(portal_config):
    return create_app(
        replace(
            portal_config,
            CU_MAX_RUNNING_PER_USER=2,
            CU_MAX_CPUS=2,
            CU_MAX_WORKERS=1,
            CU_MAX_MEMORY_GB=4.0,
        )
    )


def start_unit(client, auth, name: str, **fields):
    form = {
        "name": name,
        "kind": "local",
        "cpus": "1",
        "memory_gb": "1",
        "worker_nodes": "0",
        "csrf_token": auth.csrf_token(),
        **fields,
    }
    return client.post("/compute-units/", data=form)


def unit(db_engine, cu_id: int) -> ComputeUnit:
    with Session(db_engine) as db:
        return db.get(ComputeUnit, cu_id)


def wait_for_state(
    client, db_engine, cu_id: int, states: tuple[str, ...], timeout: float = 90.0
) -> ComputeUnit:
    """Poll like the page does (the row partial), until the unit reaches one of `states`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        client.get(f"/compute-units/{cu_id}/row", headers={"HX-Request": "true"})
        cu = unit(db_engine, cu_id)
        if cu.state in states:
            return cu
        time.sleep(0.5)
    raise AssertionError(
        f"compute unit {cu_id} stayed {unit(db_engine, cu_id).state}, wanted {states}"
    )


def cu_id_from(response) -> int:
    assert response.status_code == 302, response.get_data(as_text=True)[:2000]
    return int(response.headers["Location"].rstrip("/").rsplit("/", 1)[1])


def cluster_pids_and_ports(app, cu: ComputeUnit) -> tuple[list[int], list[int]]:
    with app.app_context():
        handle = handles.handle_of(cu)
    return cluster_pids(handle), list(handle.details["ports"].values())


def test_create_run_terminate_leaves_nothing_behind(app, client, auth, db_engine, worker):
    auth.login("alice")
    cu_id = cu_id_from(start_unit(client, auth, "lifecycle", worker_nodes="1"))
    running = wait_for_state(client, db_engine, cu_id, ("RUNNING", "FAILED"))
    assert running.state == "RUNNING", running.reason
    pids, ports = cluster_pids_and_ports(app, running)
    assert pids and any(port_is_open(port) for port in ports)

    page = client.get(f"/compute-units/{cu_id}").get_data(as_text=True)
    assert page.count('data-testid="cu-node"') == 2
    assert "Ray dashboard" not in page  # units run none unless LAKEPORT_RAY_DASHBOARD says so
    # Its kernel limits, and what it uses against them: 2 nodes of 1 GiB each.
    limits = re.search(
        r'data-testid="cu-limit-memory"><td>Memory</td>\s*<td>([^<]+)</td>\s*<td>([^<]+)</td>', page
    )
    assert limits and limits.group(2).strip() == "2.0 GiB", limits
    assert 'data-testid="cu-limit-tasks"' in page and 'data-testid="cu-limit-disk"' in page

    response = client.post(
        f"/compute-units/{cu_id}/terminate", headers={"X-CSRFToken": auth.csrf_token()}
    )
    assert response.status_code == 302
    ended = wait_for_state(client, db_engine, cu_id, ("TERMINATED", "FAILED"))
    assert ended.state == "TERMINATED", ended.reason
    assert not [pid for pid in pids if process_running(pid)]
    assert not [port for port in ports if port_is_open(port)]
    events = client.get(f"/compute-units/{cu_id}").get_data(as_text=True)
    assert "starting head node" in events and "terminated" in events


def test_killed_head_is_failed_with_a_reason_at_the_next_check(
    app, client, auth, db_engine, worker
):
    auth.login("alice")
    cu_id = cu_id_from(start_unit(client, auth, "doomed"))
    running = wait_for_state(client, db_engine, cu_id, ("RUNNING", "FAILED"))
    assert running.state == "RUNNING", running.reason
    with app.app_context():
        head = handles.handle_of(running).details["nodes"][0]
    pids, _ports = cluster_pids_and_ports(app, running)
    os.kill(head["pid"], signal.SIGKILL)
    failed = wait_for_state(client, db_engine, cu_id, ("FAILED",), timeout=30)
    assert "head" in failed.reason and (
        "SIGKILL" in failed.reason or "137" in failed.reason or "killed" in failed.reason
    )
    page = client.get(f"/compute-units/{cu_id}").get_data(as_text=True)
    assert failed.reason in page.replace("&#39;", "'")
    # What the dead head left running is stopped too.
    deadline = time.monotonic() + 30
    while any(process_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in pids if process_running(pid)]


def test_a_worker_takes_over_the_starts_a_dead_worker_left(app, client, auth, db_engine, worker):
    """A unit whose starting worker died (its lease expired) is taken over: one that never got a
    cluster fails with that reason; one whose start another live worker still holds is left alone."""
    auth.login("alice")
    cu_id = cu_id_from(start_unit(client, auth, "survivor"))
    assert wait_for_state(client, db_engine, cu_id, ("RUNNING", "FAILED")).state == "RUNNING"
    long_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    with Session(db_engine) as db:
        owner_id = unit(db_engine, cu_id).owner_id
        ghost = ComputeUnit(
            owner_id=owner_id, name="ghost", kind="local", state="STARTING", created_at=long_ago
        )
        held = ComputeUnit(owner_id=owner_id, name="held", kind="local", state="STARTING")
        db.add_all([ghost, held])
        db.flush()
        db.add_all(
            [
                WorkLease(name=f"unit-start:{ghost.id}", holder="dead-worker", expires_at=long_ago),
                WorkLease(
                    name=f"unit-start:{held.id}",
                    holder="live-worker",
                    expires_at=datetime.now(timezone.utc) + timedelta(minutes=5),
                ),
            ]
        )
        db.commit()
        ghost_id, held_id = ghost.id, held.id
    failed = wait_for_state(client, db_engine, ghost_id, ("FAILED",), timeout=20)
    assert failed.reason == "the worker starting this unit stopped before the cluster was up"
    time.sleep(1)
    assert unit(db_engine, held_id).state == "STARTING"
    assert unit(db_engine, cu_id).state == "RUNNING"
    with Session(db_engine) as db:
        db.delete(db.get(ComputeUnit, held_id))
        db.delete(db.get(WorkLease, f"unit-start:{held_id}"))
        db.commit()
    response = client.post(
        f"/compute-units/{cu_id}/terminate", headers={"X-CSRFToken": auth.csrf_token()}
    )
    assert response.status_code == 302
    assert wait_for_state(client, db_engine, cu_id, ("TERMINATED", "FAILED")).state == "TERMINATED"


def test_limits_are_enforced_with_clear_form_errors(app, client, auth, db_engine, worker):
    auth.login("bob")
    too_big = start_unit(client, auth, "too-big", cpus="64", memory_gb="999", worker_nodes="9")
    assert too_big.status_code == 422
    page = too_big.get_data(as_text=True)
    assert "CPUs per node must be between 1 and 2" in page
    assert "Memory per node (GiB) must be between 0.5 and 4" in page
    assert "Worker nodes must be between 0 and 1" in page
    bad = start_unit(client, auth, "Bad Name", kind="teleport", cpus="one")
    assert "lowercase letters" in bad.get_data(as_text=True)
    assert "whole number" in bad.get_data(as_text=True)

    first = cu_id_from(start_unit(client, auth, "quota-one"))
    second = cu_id_from(start_unit(client, auth, "quota-two"))
    third = start_unit(client, auth, "quota-three")
    assert third.status_code == 422
    assert "at most 2 compute units running at once" in third.get_data(as_text=True)
    for cu_id in (first, second):
        assert wait_for_state(client, db_engine, cu_id, ("RUNNING", "FAILED")).state == "RUNNING"
    pids = [
        pid
        for cu_id in (first, second)
        for pid in cluster_pids_and_ports(app, unit(db_engine, cu_id))[0]
    ]
    # What the local stack does on Ctrl-C: every live local unit goes down with it.
    with app.app_context():
        assert unit_work.terminate_all_local("the local stack stopped") == 2
    for cu_id in (first, second):
        ended = unit(db_engine, cu_id)
        assert (ended.state, ended.reason) == ("TERMINATED", "the local stack stopped")
    assert not [pid for pid in pids if process_running(pid)]


def test_idle_unit_is_terminated_with_the_reason_shown(app, client, auth, db_engine, worker):
    auth.login("alice")
    cu_id = cu_id_from(start_unit(client, auth, "idler"))
    assert wait_for_state(client, db_engine, cu_id, ("RUNNING", "FAILED")).state == "RUNNING"
    app.config["CU_IDLE_MINUTES"] = 0.001  # 60 ms without executions
    time.sleep(0.2)
    ended = wait_for_state(client, db_engine, cu_id, ("TERMINATED", "FAILED"))
    assert ended.state == "TERMINATED" and "idle" in ended.reason
    assert "idle" in client.get(f"/compute-units/{cu_id}").get_data(as_text=True)


def test_bob_gets_404_on_alices_unit(client, auth, db_engine):
    auth.login("alice")
    with Session(db_engine) as db:
        alice = db.exec(select(User).where(User.email == "alice@example.test")).one()
        cu = ComputeUnit(owner_id=alice.id, name="private", kind="local", state="TERMINATED")
        db.add(cu)
        db.commit()
        cu_id = cu.id
    auth.logout()
    auth.login("bob")
    token = auth.csrf_token()
    for method, path in (("GET", ""), ("GET", "/row"), ("POST", "/terminate")):
        for headers in ({"X-CSRFToken": token}, {"X-CSRFToken": token, "HX-Request": "true"}):
            response = client.open(f"/compute-units/{cu_id}{path}", method=method, headers=headers)
            assert response.status_code == 404, (method, path)
    assert "private" not in client.get("/compute-units/").get_data(as_text=True)


def test_detail_lists_the_units_running_executions(client, auth, db_engine):
    auth.login("alice")
    with Session(db_engine) as db:
        alice = db.exec(select(User).where(User.email == "alice@example.test")).one()
        cu = ComputeUnit(owner_id=alice.id, name="busy", kind="local", state="TERMINATED")
        workflow = Workflow(owner_id=alice.id, name="busy-flow", latest_version=1)
        db.add_all([cu, workflow])
        db.flush()
        version = WorkflowVersion(workflow_id=workflow.id, version=1)
        db.add(version)
        db.flush()
        common = dict(
            owner_id=alice.id,
            workflow_id=workflow.id,
            workflow_version_id=version.id,
            workflow_version=1,
            compute_unit_id=cu.id,
            warehouse_name="lake",
        )
        running, done = Execution(state="RUNNING", **common), Execution(state="COMPLETED", **common)
        db.add_all([running, done])
        db.commit()
        cu_id, running_id, done_id = cu.id, running.id, done.id
    panel = (
        client.get(f"/compute-units/{cu_id}")
        .get_data(as_text=True)
        .split('data-testid="cu-executions"')[1]
    )
    panel = panel.split("</article>")[0]
    assert f"#{running_id}" in panel and "RUNNING" in panel
    assert f"#{done_id}" not in panel


def test_ended_units_are_cleared_from_the_list_and_still_named_by_their_executions(
    client, db_engine
):
    owner = newcomer(db_engine)
    with client.session_transaction() as session:
        session["_user_id"], session["_fresh"] = str(owner.id), True
    terminated, failed, running, other = (
        unit_row(db_engine, owner, state=state)
        for state in ("TERMINATED", "FAILED", "RUNNING", "TERMINATED")
    )
    with Session(db_engine) as db:
        names = {
            cu.id: cu.name
            for cu in db.exec(select(ComputeUnit).where(ComputeUnit.owner_id == owner.id))
        }
    execution_on(db_engine, owner, terminated, "COMPLETED")
    token = client.get("/").get_data(as_text=True).split('"X-CSRFToken": "', 1)[1].split('"', 1)[0]
    listing = client.get("/compute-units/").get_data(as_text=True)
    assert 'data-testid="clear-ended"' in listing
    # Only ended units offer Clear.
    assert listing.count('data-testid="clear-unit"') == 3
    assert f"/compute-units/{running}/clear" not in listing

    # One row, through htmx: the answer is empty (the row goes); the unit's row stays in the database.
    cleared = client.post(
        f"/compute-units/{terminated}/clear", headers={"X-CSRFToken": token, "HX-Request": "true"}
    )
    assert cleared.status_code == 200 and cleared.get_data(as_text=True) == ""
    listing = client.get("/compute-units/").get_data(as_text=True)
    assert names[terminated] not in listing and names[failed] in listing
    assert unit(db_engine, terminated).cleared_at is not None
    assert names[terminated] in client.get("/executions/").get_data(as_text=True)
    assert client.get(f"/compute-units/{terminated}").status_code == 200  # its page is still there

    # A running unit is never cleared.
    kept = client.post(
        f"/compute-units/{running}/clear", headers={"X-CSRFToken": token, "HX-Request": "true"}
    )
    assert f'id="cu-row-{running}"' in kept.get_data(as_text=True)
    assert unit(db_engine, running).cleared_at is None

    # Clear ended units: every ended one goes, the running one stays.
    response = client.post("/compute-units/clear", data={"csrf_token": token})
    assert response.status_code == 302
    listing = client.get("/compute-units/").get_data(as_text=True)
    assert "Cleared 2 ended compute units from the list." in listing
    assert (
        names[failed] not in listing and names[other] not in listing and names[running] in listing
    )
    assert 'data-testid="clear-ended"' not in listing

    # Nobody clears another user's unit.
    stranger_unit = unit_row(db_engine, newcomer(db_engine), state="TERMINATED")
    refused = client.post(f"/compute-units/{stranger_unit}/clear", headers={"X-CSRFToken": token})
    assert refused.status_code == 404 and unit(db_engine, stranger_unit).cleared_at is None


# --------------------------------------------------------------------------- coordination through the database
def newcomer(db_engine) -> User:
    subject = f"cu-{secrets.token_hex(4)}"
    with Session(db_engine, expire_on_commit=False) as db:
        user = User(
            issuer="https://tests.invalid", subject=subject, email=f"{subject}@example.test"
        )
        db.add(user)
        db.commit()
    return user


def unit_row(db_engine, owner: User, **fields) -> int:
    with Session(db_engine) as db:
        cu = ComputeUnit(
            owner_id=owner.id, name=f"u-{secrets.token_hex(3)}", kind="local", **fields
        )
        db.add(cu)
        db.commit()
        return cu.id


def execution_on(db_engine, owner: User, cu_id: int, state: str) -> None:
    """An execution of a new one-version workflow of `owner`, on unit `cu_id`, in `state`."""
    with Session(db_engine) as db:
        workflow = Workflow(owner_id=owner.id, name=f"wf-{secrets.token_hex(3)}", latest_version=1)
        db.add(workflow)
        db.flush()
        version = WorkflowVersion(workflow_id=workflow.id, version=1)
        db.add(version)
        db.flush()
        db.add(
            Execution(
                owner_id=owner.id,
                workflow_id=workflow.id,
                workflow_version_id=version.id,
                workflow_version=1,
                compute_unit_id=cu_id,
                warehouse_name="w",
                state=state,
            )
        )
        db.commit()


def events_of(db_engine, cu_id: int) -> list[str]:
    with Session(db_engine) as db:
        return list(
            db.exec(
                select(ComputeUnitEvent.message).where(ComputeUnitEvent.compute_unit_id == cu_id)
            )
        )


def test_two_supervisors_stopping_one_idle_unit_stop_it_once(app, db_engine):
    owner = newcomer(db_engine)
    long_ago = datetime.now(timezone.utc) - timedelta(hours=2)
    idle = unit_row(db_engine, owner, state="RUNNING", last_activity_at=long_ago)
    busy = unit_row(db_engine, owner, state="RUNNING", last_activity_at=long_ago)
    execution_on(
        db_engine, owner, busy, "RUNNING"
    )  # a live execution keeps its unit from being idle
    stopped: list[list[int]] = []
    barrier = threading.Barrier(2)

    def supervisor() -> None:
        with app.app_context():
            barrier.wait()
            stopped.append([cu_id for cu_id in supervision.stop_idle(60) if cu_id in (idle, busy)])

    threads = [threading.Thread(target=supervisor) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(stopped) == [[], [idle]]  # one of them won
    assert unit(db_engine, idle).state == "TERMINATING"
    assert (
        sum(message.startswith("terminating: idle") for message in events_of(db_engine, idle)) == 1
    )
    assert unit(db_engine, busy).state == "RUNNING"
    with Session(db_engine) as db:
        for cu_id in (idle, busy):
            db.get(ComputeUnit, cu_id).state = "TERMINATED"
        db.commit()


def test_a_failure_never_overwrites_a_final_state(app, db_engine):
    owner = newcomer(db_engine)
    terminated = unit_row(db_engine, owner, state="TERMINATED", reason="terminated by its owner")
    stopping = unit_row(db_engine, owner, state="TERMINATING")
    with app.app_context():
        assert not unit_service.fail(terminated, "the cluster stopped")
        assert not unit_service.fail(
            stopping, "the cluster stopped"
        )  # only a RUNNING unit fails so
        unit_work.run_stop(stopping)  # no cluster to stop: TERMINATED
        assert not unit_service.fail(
            stopping, "the cluster stopped", from_states=("RUNNING", "TERMINATING")
        )
    assert (unit(db_engine, terminated).state, unit(db_engine, terminated).reason) == (
        "TERMINATED",
        "terminated by its owner",
    )
    assert unit(db_engine, stopping).state == "TERMINATED"


def test_parallel_creates_never_exceed_the_per_user_limit(app, db_engine):
    """Eight requests at once for a user allowed two units: two are recorded, six refused."""
    owner = newcomer(db_engine)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def create(number: int) -> None:
        with app.test_request_context(method="POST"):
            values = {
                "name": f"racer-{number}",
                "kind": "local",
                "cpus": 1,
                "memory_gb": 1.0,
                "worker_nodes": 0,
            }
            barrier.wait()
            try:
                unit_service.create(owner, values)
                outcomes.append("created")
            except unit_service.ComputeUnitError as error:
                outcomes.append(error.message)

    threads = [threading.Thread(target=create, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("created") == 2, outcomes
    assert all("at most 2 compute units" in outcome for outcome in outcomes if outcome != "created")
    with Session(db_engine) as db:
        units = list(db.exec(select(ComputeUnit).where(ComputeUnit.owner_id == owner.id)))
        assert len(units) == 2
        for cu in units:
            cu.state = "TERMINATED"
        db.commit()


def test_a_reason_longer_than_its_column_is_cut_and_logged_whole(app, db_engine, caplog):
    owner = newcomer(db_engine)
    cu_id = unit_row(db_engine, owner, state="STARTING")
    log_tail = "\n".join(f"line {number}: " + "x" * 80 for number in range(30))  # ~2,700 characters
    with app.app_context(), caplog.at_level("WARNING", logger="app.compute_units.service"):
        assert unit_service.fail(
            cu_id, f"head node did not start:\n{log_tail}", from_states=("STARTING",)
        )
    failed = unit(db_engine, cu_id)
    assert failed.state == "FAILED"
    assert len(failed.reason) == 1000 and failed.reason.startswith(
        "head node did not start:\nline 0:"
    )
    assert failed.reason.endswith("more characters]")
    assert "line 29: " in caplog.text  # the whole text is in the log
    assert all(len(message) <= 1000 for message in events_of(db_engine, cu_id))


class CountingBackend:
    """A cluster backend whose every status check is counted; it answers `state`."""

    def __init__(self):
        self.checks, self.state = 0, UnitState.RUNNING

    def restore_token(self, handle):
        return handle

    def status(self, handle):
        self.checks += 1
        return ClusterStatus(
            self.state,
            reason="" if self.state == UnitState.RUNNING else "head died",
            nodes=getattr(self, "nodes", []),
        )


def test_pages_show_the_workers_last_check_and_never_ask_the_cluster(
    app, client, auth, db_engine, monkeypatch
):
    auth.login("alice")
    with Session(db_engine) as db:
        alice = db.exec(select(User).where(User.email == "alice@example.test")).one()
    handle = ClusterHandle(
        backend="local", cu_id="0", spark_host_url="http://127.0.0.1:9", spark_host_nonce="n"
    )
    cu_id = unit_row(db_engine, alice, state="RUNNING", handle=handle.to_json())
    backend = CountingBackend()
    backend.nodes = [NodeStatus("head-node-1", True, True, 2.0, 2 * 2**30)]
    monkeypatch.setattr(handles, "backend_of", lambda cu: backend)
    for _ in range(5):  # five browsers polling the row and the page
        assert client.get(f"/compute-units/{cu_id}/row").status_code == 200
        assert 'data-testid="cu-node"' not in client.get(
            f"/compute-units/{cu_id}", headers={"HX-Request": "true"}
        ).get_data(as_text=True)
    assert backend.checks == 0
    with app.app_context():
        supervision.supervise()  # the worker's pass
    assert backend.checks == 1
    page = client.get(f"/compute-units/{cu_id}", headers={"HX-Request": "true"}).get_data(
        as_text=True
    )
    assert (
        'data-testid="cu-node"' in page
        and "head-node-" in page
        and 'data-testid="cu-checked-at"' in page
    )
    assert backend.checks == 1
    backend.state = UnitState.FAILED
    with app.app_context():
        supervision.supervise()
    with Session(db_engine) as db:
        failed = db.get(ComputeUnit, cu_id)
    assert (failed.state, failed.reason) == ("FAILED", "head died")


class StartingHost(StandInHost):
    """A unit's Spark host behind its real HTTP API, warming until `ready` is set; it records
    whether each of the portal's questions said that a run waits for it."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.ready, self.heard = threading.Event(), []

    def info(self, run_waiting: bool = False) -> dict:
        self.heard.append(run_waiting)
        return {"state": "ready" if self.ready.is_set() else "warming", "app_id": "app-1"}


def test_a_host_still_starting_hears_when_a_run_waits_for_it(app):
    """The worker's warm-up of a new unit polls its host; once an execution waits for the same
    host (behind the warm-up's lock), those polls tell the host so, and it starts without
    warming the write path (compute/host/spark_host.py). Nothing is said once no run waits."""
    handle = handle_on(free_port())
    host = StartingHost(secret_digest(handle.spark_host_secret))
    server = serve(host, "127.0.0.1", int(handle.spark_host_url.rsplit(":", 1)[1]))
    unit = ComputeUnit(id=900_001, owner_id=1, name="starting", kind="local", cpus=2, memory_gb=3)
    answers: dict[str, dict] = {}

    def ensure_warm(name: str, for_a_run: bool) -> None:
        with app.app_context():
            answers[name] = spark_warmup.ensure_warm(
                unit, handle, backend=None, for_a_run=for_a_run
            )

    def wait_until(condition) -> None:
        deadline = time.monotonic() + 10
        while not condition():
            assert time.monotonic() < deadline, host.heard
            time.sleep(0.05)

    warm_up = threading.Thread(target=ensure_warm, args=("warm-up", False))
    execution = threading.Thread(target=ensure_warm, args=("execution", True))
    try:
        warm_up.start()
        wait_until(lambda: len(host.heard) >= 2)
        assert not any(host.heard)  # the unit's own warm-up: no run waits
        execution.start()
        wait_until(lambda: host.heard[-1])
    finally:  # both threads end before the test's database goes
        host.ready.set()
        warm_up.join(10)
        if execution.ident:
            execution.join(10)
        server.shutdown()
        server.server_close()

    assert answers["warm-up"]["state"] == answers["execution"]["state"] == "ready"
    assert spark_warmup._runs_waiting == {}  # the count went with the run
    spark_warmup.forget_ready(unit.id)
