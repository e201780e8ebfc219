"""Compute units through the portal, on real local Ray clusters."""
from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta, timezone
from dataclasses import replace

import pytest
from sqlmodel import Session, select

from tests.processes import process_running
from app import create_app
from app.compute_units import lifecycle
from app.models import ComputeUnit, Execution, User, Workflow, WorkflowVersion
from app.ray_clusters.local import cluster_pids
from devstack.process import port_is_open


@pytest.fixture
def app(portal_config):
    return create_app(replace(portal_config, CU_MAX_RUNNING_PER_USER=2, CU_MAX_CPUS=2, CU_MAX_WORKERS=1,
                              CU_MAX_MEMORY_GB=4.0))


def start_unit(client, auth, name: str, **fields):
    form = {"name": name, "kind": "local", "cpus": "1", "memory_gb": "1", "worker_nodes": "0",
            "csrf_token": auth.csrf_token(), **fields}
    return client.post("/compute-units/", data=form)


def unit(db_engine, cu_id: int) -> ComputeUnit:
    with Session(db_engine) as db:
        return db.get(ComputeUnit, cu_id)


def wait_for_state(client, db_engine, cu_id: int, states: tuple[str, ...], timeout: float = 90.0) -> ComputeUnit:
    """Poll like the page does (the row partial), until the unit reaches one of `states`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        client.get(f"/compute-units/{cu_id}/row", headers={"HX-Request": "true"})
        cu = unit(db_engine, cu_id)
        if cu.state in states:
            return cu
        time.sleep(0.5)
    raise AssertionError(f"compute unit {cu_id} stayed {unit(db_engine, cu_id).state}, wanted {states}")


def cu_id_from(response) -> int:
    assert response.status_code == 302, response.get_data(as_text=True)[:2000]
    return int(response.headers["Location"].rstrip("/").rsplit("/", 1)[1])


def cluster_pids_and_ports(app, cu: ComputeUnit) -> tuple[list[int], list[int]]:
    with app.app_context():
        handle = lifecycle.handle_of(cu)
    return cluster_pids(handle), list(handle.details["ports"].values())


def test_create_run_terminate_leaves_nothing_behind(app, client, auth, db_engine):
    auth.login("alice")
    cu_id = cu_id_from(start_unit(client, auth, "lifecycle", worker_nodes="1"))
    running = wait_for_state(client, db_engine, cu_id, ("RUNNING", "FAILED"))
    assert running.state == "RUNNING", running.reason
    pids, ports = cluster_pids_and_ports(app, running)
    assert pids and any(port_is_open(port) for port in ports)

    page = client.get(f"/compute-units/{cu_id}").get_data(as_text=True)
    assert page.count('data-testid="cu-node"') == 2
    assert "Ray dashboard" in page

    response = client.post(f"/compute-units/{cu_id}/terminate", headers={"X-CSRFToken": auth.csrf_token()})
    assert response.status_code == 302
    ended = wait_for_state(client, db_engine, cu_id, ("TERMINATED", "FAILED"))
    assert ended.state == "TERMINATED", ended.reason
    assert not [pid for pid in pids if process_running(pid)]
    assert not [port for port in ports if port_is_open(port)]
    events = client.get(f"/compute-units/{cu_id}").get_data(as_text=True)
    assert "starting head node" in events and "terminated" in events


def test_killed_head_is_failed_with_a_reason_at_the_next_check(app, client, auth, db_engine):
    auth.login("alice")
    cu_id = cu_id_from(start_unit(client, auth, "doomed"))
    running = wait_for_state(client, db_engine, cu_id, ("RUNNING", "FAILED"))
    assert running.state == "RUNNING", running.reason
    with app.app_context():
        head = lifecycle.handle_of(running).details["nodes"][0]
    pids, _ports = cluster_pids_and_ports(app, running)
    os.kill(head["pid"], signal.SIGKILL)
    failed = wait_for_state(client, db_engine, cu_id, ("FAILED",), timeout=30)
    assert "head" in failed.reason and ("SIGKILL" in failed.reason or "137" in failed.reason or "killed" in failed.reason)
    page = client.get(f"/compute-units/{cu_id}").get_data(as_text=True)
    assert failed.reason in page.replace("&#39;", "'")
    # What the dead head left running is stopped too.
    deadline = time.monotonic() + 30
    while any(process_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in pids if process_running(pid)]


def test_portal_restart_adopts_a_live_unit_and_fails_a_dead_one(client, auth, db_engine, portal_config):
    auth.login("alice")
    cu_id = cu_id_from(start_unit(client, auth, "survivor"))
    assert wait_for_state(client, db_engine, cu_id, ("RUNNING", "FAILED")).state == "RUNNING"
    with Session(db_engine) as db:
        long_ago = datetime.now(timezone.utc) - timedelta(hours=1)
        ghost = ComputeUnit(owner_id=unit(db_engine, cu_id).owner_id, name="ghost", kind="local", state="STARTING",
                            created_at=long_ago)
        # Another worker's start in progress: too young to be called lost.
        young = ComputeUnit(owner_id=ghost.owner_id, name="young", kind="local", state="STARTING")
        db.add_all([ghost, young])
        db.commit()
        ghost_id, young_id = ghost.id, young.id

    restarted = create_app(portal_config)  # a new portal process would do the same at start
    assert unit(db_engine, cu_id).state == "RUNNING"
    ghost = unit(db_engine, ghost_id)
    assert ghost.state == "FAILED" and "restarted" in ghost.reason
    assert unit(db_engine, young_id).state == "STARTING"
    with Session(db_engine) as db:
        db.delete(db.get(ComputeUnit, young_id))
        db.commit()

    with restarted.test_request_context():
        from flask_login import login_user

        from app.db import get_db

        login_user(get_db().get(User, unit(db_engine, cu_id).owner_id))
        lifecycle.terminate(get_db().get(ComputeUnit, cu_id))
    wait_for_state(client, db_engine, cu_id, ("TERMINATED",))


def test_limits_are_enforced_with_clear_form_errors(app, client, auth, db_engine):
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
    pids = [pid for cu_id in (first, second) for pid in cluster_pids_and_ports(app, unit(db_engine, cu_id))[0]]
    # What the local stack does on Ctrl-C: every live local unit goes down with it.
    with app.app_context():
        assert lifecycle.terminate_all_local("the local stack stopped") == 2
    for cu_id in (first, second):
        ended = unit(db_engine, cu_id)
        assert (ended.state, ended.reason) == ("TERMINATED", "the local stack stopped")
    assert not [pid for pid in pids if process_running(pid)]


def test_idle_unit_is_terminated_with_the_reason_shown(app, client, auth, db_engine):
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
        common = dict(owner_id=alice.id, workflow_id=workflow.id, workflow_version_id=version.id, workflow_version=1,
                      compute_unit_id=cu.id, warehouse_name="lake")
        running, done = Execution(state="RUNNING", **common), Execution(state="COMPLETED", **common)
        db.add_all([running, done])
        db.commit()
        cu_id, running_id, done_id = cu.id, running.id, done.id
    panel = client.get(f"/compute-units/{cu_id}").get_data(as_text=True).split('data-testid="cu-executions"')[1]
    panel = panel.split("</article>")[0]
    assert f"#{running_id}" in panel and "RUNNING" in panel
    assert f"#{done_id}" not in panel
