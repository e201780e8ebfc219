"""The warm pool of standby units (app/compute_units/pool.py), tried as users racing for it and
as a unit's code would: a claimed unit is its user's alone, never handed out twice, and its
Spark host no longer opens with the key it was started with. The last test runs the pool on
real local Ray units: claimed, run into a warehouse, a dead pooled unit replaced."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlmodel import Session, func, select

from app import create_app
from app.compute_units import handles, pool, supervision
from app.compute_units import service as unit_service
from app.compute_units import work as unit_work
from app.models import ComputeUnit, ComputeUnitEvent, Execution, MaintenanceJob, Query, utcnow
from app.ray_clusters.local import cluster_pids
from app.spark_host.client import SparkHostClient, SparkHostError
from app.worker import Worker
from tests.factories import (
    add,
    csrf,
    execution_row,
    make_user,
    register_warehouse,
    reload,
    run,
    sign_in_as,
    text,
    wait_for,
    warehouse_row,
    workflow_for,
)

POOL = {
    "CU_POOL_SIZE": 1,
    "CU_POOL_CPUS": 2,
    "CU_POOL_MEMORY_GB": 3.0,
    "CU_MAX_CPUS": 2,
    "CU_MAX_MEMORY_GB": 4.0,
}


@pytest.fixture
def app(portal_config):
    return create_app(replace(portal_config, **POOL))


def pooled_row(db_engine, state: str = "RUNNING", ready: bool = True) -> ComputeUnit:
    """A unit waiting in the pool as the worker leaves it (no cluster: nothing here calls one)."""
    return add(
        db_engine,
        ComputeUnit(
            owner_id=None,
            name="pool-standby",
            kind="local",
            cpus=2,
            memory_gb=3.0,
            state=state,
            pooled_at=utcnow(),
            started_at=utcnow() if ready else None,
            spark_ready_at=utcnow() if ready else None,
        ),
    )


@pytest.fixture
def pool_rows(db_engine):
    """Makes pooled rows. Afterwards every unit row the test made (pooled, claimed, or a user's
    PENDING one) is ended: none has a cluster, and no later test's worker may start one."""
    with Session(db_engine) as db:
        before = db.exec(select(func.max(ComputeUnit.id))).one() or 0
    yield lambda **fields: pooled_row(db_engine, **fields)
    with Session(db_engine) as db:
        for row in db.exec(
            select(ComputeUnit).where(
                ComputeUnit.id > before, ComputeUnit.state.in_(("PENDING", "STARTING", "RUNNING"))
            )
        ):
            assert row.handle == "{}", f"unit {row.id} has a cluster: this test starts none"
            row.state, row.ended_at = "TERMINATED", utcnow()
            db.add(row)
        for row in db.exec(
            select(ComputeUnit).where(ComputeUnit.id > before, ComputeUnit.state == "FAILED")
        ):
            row.ended_at = (
                utcnow() - pool.FAILURE_WINDOW * 2
            )  # no later test's pool pauses for them
            db.add(row)
        db.commit()


def create(client, name: str, cpus: str = "2", memory_gb: str = "3", worker_nodes: str = "0"):
    return client.post(
        "/compute-units/",
        data={
            "name": name,
            "kind": "local",
            "cpus": cpus,
            "memory_gb": memory_gb,
            "worker_nodes": worker_nodes,
            "csrf_token": csrf(client),
        },
    )


def created_id(response) -> int:
    assert response.status_code == 302, text(response)[:2000]
    return int(response.headers["Location"].rstrip("/").rsplit("/", 1)[1])


def signed_in(app, db_engine):
    client, user = app.test_client(), make_user(db_engine)
    sign_in_as(client, user)
    return client, user


def test_a_create_of_the_pools_size_claims_a_ready_pooled_unit_for_its_user_alone(
    app, db_engine, pool_rows
):
    waiting, not_ready = pool_rows(), pool_rows(ready=False)
    alice, alice_user = signed_in(app, db_engine)
    bob, bob_user = signed_in(app, db_engine)

    # Before its claim a pooled unit is nobody's: no user sees it or counts it.
    assert alice.get(f"/compute-units/{waiting.id}").status_code == 404
    assert f"/compute-units/{waiting.id}" not in text(alice.get("/compute-units/"))

    claimed_id = created_id(create(alice, "mine"))
    assert claimed_id == waiting.id  # the ready one; one still warming is never handed out
    claimed = reload(db_engine, ComputeUnit, claimed_id)
    assert (claimed.owner_id, claimed.name, claimed.state, claimed.progress_step) == (
        alice_user.id,
        "mine",
        "STARTING",
        pool.HANDING_OVER,
    )
    assert claimed.claimed_at is not None
    assert alice.get(f"/compute-units/{claimed_id}").status_code == 200
    assert bob.get(f"/compute-units/{claimed_id}").status_code == 404

    # Bob's create of the same size finds no ready pooled unit: a unit of his own starts cold.
    bobs_id = created_id(create(bob, "his"))
    assert bobs_id not in (claimed_id, not_ready.id)
    bobs = reload(db_engine, ComputeUnit, bobs_id)
    assert (bobs.owner_id, bobs.state, bobs.pooled_at) == (bob_user.id, "PENDING", None)

    # Any other size never takes a pooled unit.
    spare = pool_rows()
    other_id = created_id(create(alice, "bigger", memory_gb="4"))
    assert other_id != spare.id and reload(db_engine, ComputeUnit, spare.id).owner_id is None

    # Terminated, a claimed unit ends; it is never back in the pool, whoever asks next.
    with app.test_request_context(method="POST"), app.app_context():
        unit_service.terminate(reload(db_engine, ComputeUnit, claimed_id))
    carol, _ = signed_in(app, db_engine)
    assert created_id(create(carol, "next")) == spare.id
    assert created_id(create(carol, "after")) not in (claimed_id, spare.id)
    assert reload(db_engine, ComputeUnit, claimed_id).owner_id == alice_user.id


def test_two_users_racing_for_the_last_pooled_unit_never_share_it(app, db_engine, pool_rows):
    waiting = pool_rows()
    clients = [signed_in(app, db_engine) for _ in range(4)]
    results: dict[int, int] = {}
    start = threading.Barrier(len(clients))

    def race(index: int) -> None:
        client, _ = clients[index]
        start.wait()
        results[index] = created_id(create(client, f"racer-{index}"))

    threads = [threading.Thread(target=race, args=(index,)) for index in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [0, 1, 2, 3] and len(set(results.values())) == 4
    assert list(results.values()).count(waiting.id) == 1
    winner = next(index for index, cu_id in results.items() if cu_id == waiting.id)
    assert reload(db_engine, ComputeUnit, waiting.id).owner_id == clients[winner][1].id


def test_pooled_units_count_against_no_one_are_never_idle_and_are_refilled(
    app, db_engine, pool_rows
):
    client, user = signed_in(app, db_engine)
    waiting = pool_rows()
    with app.app_context():
        with Session(
            db_engine
        ) as db:  # long idle: a user's unit would be stopped, a pooled one waits
            row = db.get(ComputeUnit, waiting.id)
            row.last_activity_at = utcnow() - timedelta(days=1)
            db.add(row)
            db.commit()
        assert waiting.id not in supervision.stop_idle(1)
        assert pool.shortfall() == 0 and not [
            work for work in unit_work.pending_work() if work[0] == "unit-pool-refill"
        ]
        assert pool.summary().ready == 1

    claimed_id = created_id(create(client, "takes-it"))
    with app.app_context():
        # The refill waits while the claimed unit has not answered its first job: a unit starting
        # beside it would slow that job down.
        assert pool.shortfall() == 0 and not refill_work()
        query = add(db_engine, query_row(user, claimed_id))
        assert pool.shortfall() == 0 and not refill_work()  # submitted, not answered yet
        end_job(db_engine, Query, query.id, "completed")
        assert pool.shortfall() == 1
        refill = refill_work()
        assert len(refill) == 1
        refill[0][1](refill[0][2])  # what the worker does with it
        assert pool.shortfall() == 0
        summary = pool.summary()
        assert (summary.ready, summary.starting) == (0, 1)
    with Session(db_engine) as db:
        new = db.exec(
            select(ComputeUnit).where(
                ComputeUnit.owner_id.is_(None), ComputeUnit.state == "PENDING"
            )
        ).one()
        assert (new.cpus, new.memory_gb, new.worker_nodes, new.kind) == (2, 3.0, 0, "local")
        assert new.name == f"pool-{new.id}"
        pool_rows_made = new.id
    assert client.get(f"/compute-units/{pool_rows_made}").status_code == 404


def refill_work() -> list:
    return [work for work in unit_work.pending_work() if work[0] == "unit-pool-refill"]


def query_row(owner, cu_id: int) -> Query:
    return Query(
        owner_id=owner.id,
        warehouse_name="w",
        compute_unit_id=cu_id,
        sql="SELECT 1",
        state="running",
    )


def end_job(db_engine, model, row_id: int, state: str) -> None:
    with Session(db_engine) as db:
        row = db.get(model, row_id)
        row.state, row.ended_at = state, utcnow()
        db.add(row)
        db.commit()


def test_the_refill_waits_for_a_claimed_units_first_job_at_most_its_hold(app, db_engine, pool_rows):
    """Each claim within REFILL_HOLD holds the refill until a job on it has ended, however it
    ended (an execution failing answers too) and whichever job it is (a table's maintenance on a
    unit started for it answers too); a claim older than the hold, a claimed unit
    terminated, or one that started afresh (no longer the pool's) holds nothing."""
    client, user = signed_in(app, db_engine)
    first, second = pool_rows(), pool_rows()
    app.config["CU_POOL_SIZE"] = 2
    one = created_id(create(client, "one"))
    two = created_id(create(client, "two"))
    assert {one, two} == {first.id, second.id}
    with app.app_context():
        assert pool.shortfall() == 0

        workflow, warehouse = workflow_for(db_engine, user), warehouse_row(db_engine, user)
        execution = execution_row(
            db_engine, user, workflow, warehouse, reload(db_engine, ComputeUnit, one)
        )
        end_job(db_engine, Execution, execution.id, "FAILED")
        assert pool.shortfall() == 0  # the second claim still waits for its first job

        # A unit claimed for a table's maintenance (its policy's start_unit) answers with the job.
        job = add(
            db_engine,
            MaintenanceJob(
                owner_id=user.id,
                warehouse_id=warehouse.id,
                compute_unit_id=two,
                retain_last=1,
                table_name="sales.daily",
                compact=True,
                started_unit=True,
            ),
        )
        assert pool.shortfall() == 0
        end_job(db_engine, MaintenanceJob, job.id, "DONE")
        assert pool.shortfall() == 2 and len(refill_work()) == 1

    for fields in (
        {"claimed_at": utcnow() - pool.REFILL_HOLD - timedelta(seconds=1)},
        {"state": "TERMINATED", "ended_at": utcnow()},
        {"pooled_at": None},
    ):
        waiting, (other, _) = pool_rows(), signed_in(app, db_engine)
        app.config["CU_POOL_SIZE"] = 1
        claimed = created_id(create(other, "claimed"))
        assert claimed == waiting.id
        with app.app_context():
            assert pool.shortfall() == 0
            with Session(db_engine) as db:
                row = db.get(ComputeUnit, claimed)
                for name, value in fields.items():
                    setattr(row, name, value)
                db.add(row)
                db.commit()
            assert pool.shortfall() == 1, fields


def test_a_pool_whose_units_keep_failing_to_start_pauses_and_says_why(app, db_engine, pool_rows):
    with app.app_context():
        assert pool.shortfall() == 1
    for _ in range(pool.FAILURE_LIMIT):
        failed = pool_rows(state="FAILED", ready=False)
        with Session(db_engine) as db:
            row = db.get(ComputeUnit, failed.id)
            row.ended_at, row.reason = utcnow(), "no cgroup for the unit"
            db.add(row)
            db.commit()
    with app.app_context():
        assert pool.shortfall() == 0
        summary = pool.summary()
        assert "no cgroup for the unit" in summary.paused_reason
    client = app.test_client()
    health = client.get(
        "/health"
    ).get_json()  # anyone's to read: the reason stays on the operators' page
    assert health["unit_pool"]["paused"] is True and health["unit_pool"]["size"] == 1
    assert "no cgroup" not in client.get("/health").get_data(as_text=True)


def test_the_operators_page_shows_the_pool(app, db_engine, pool_rows):
    from tests.factories import operator_user

    pool_rows()
    client = app.test_client()
    sign_in_as(client, operator_user(db_engine))
    page = text(client.get("/operators/"))
    assert 'data-testid="operator-pool"' in page and 'data-testid="pool-ready">1<' in page
    assert "<em>warm pool</em>" in page


def test_the_new_unit_form_offers_the_pools_size(app, db_engine):
    client, _ = signed_in(app, db_engine)
    page = text(client.get("/compute-units/new"))
    assert 'data-testid="cu-pool-hint"' in page
    assert (
        'name="cpus"' in page
        and 'value="2"' in page
        and 'name="memory_gb"' in page
        and 'value="3"' in page
    )


def test_settings_refuse_a_pool_unit_larger_than_users_may_ask(portal_config):
    with pytest.raises(ValueError, match="LAKEPORT_CU_POOL_SIZE"):
        replace(portal_config, CU_POOL_SIZE=1, CU_POOL_CPUS=8, CU_MAX_CPUS=2).validate()
    with pytest.raises(ValueError, match="LAKEPORT_CU_POOL_SIZE"):
        replace(portal_config, CU_POOL_SIZE=-1).validate()
    replace(portal_config, CU_POOL_SIZE=2, CU_POOL_CPUS=2, CU_POOL_MEMORY_GB=4.0).validate()


# --------------------------------------------------------------------------- on real units
def pool_units(db_engine) -> list[ComputeUnit]:
    with Session(db_engine) as db:
        return list(
            db.exec(
                select(ComputeUnit).where(
                    ComputeUnit.owner_id.is_(None),
                    ComputeUnit.pooled_at.is_not(None),
                    ComputeUnit.state.in_(("PENDING", "STARTING", "RUNNING")),
                )
            )
        )


def wait_until(what, check, timeout: float = 180.0, db_engine=None, cu_id=None):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, (
            f"{what}: {unit_events(db_engine, cu_id) if cu_id else ''}"
        )
        time.sleep(0.3)
    return found


def _gone(host: SparkHostClient) -> bool:
    try:
        host.info()
    except SparkHostError:
        return True
    return False


def unit_events(db_engine, cu_id: int) -> list[str]:
    with Session(db_engine) as db:
        return [
            event.message
            for event in db.exec(
                select(ComputeUnitEvent)
                .where(ComputeUnitEvent.compute_unit_id == cu_id)
                .order_by(ComputeUnitEvent.id)
            )
        ]


def test_a_claimed_unit_whose_host_will_not_take_its_key_starts_afresh_for_its_user(
    portal_config, db_engine
):
    """The hand-over fails (here: its Spark host is not there): the pooled cluster is stopped and the
    unit starts as a new one, still its user's, with nothing of the pooled cluster kept."""
    app = create_app(portal_config)  # no pool: this test makes the claimed unit itself
    client, user = signed_in(app, db_engine)
    cu_id = created_id(create(client, "handed-over"))
    with app.app_context():
        unit_work.run_start(cu_id)  # a real local cluster, as the pool would have started it
        pooled = reload(db_engine, ComputeUnit, cu_id)
        assert pooled.state == "RUNNING", pooled.reason
        pooled_handle = handles.handle_of(pooled)
        pooled_pids = cluster_pids(pooled_handle)
        assert pooled_pids
        # As a claim leaves it; its host's address one where nothing listens.
        with Session(db_engine) as db:
            row = db.get(ComputeUnit, cu_id)
            row.state, row.progress_step, row.pooled_at, row.claimed_at = (
                "STARTING",
                pool.HANDING_OVER,
                utcnow(),
                utcnow(),
            )
            row.handle = row.handle.replace(pooled_handle.spark_host_url, "http://127.0.0.1:9")
            db.add(row)
            db.commit()
        try:
            unit_work.run_start(cu_id)
            fresh = reload(db_engine, ComputeUnit, cu_id)
            assert (fresh.state, fresh.owner_id, fresh.pooled_at) == ("RUNNING", user.id, None), (
                fresh.reason
            )
            fresh_handle = handles.handle_of(fresh)
            assert fresh_handle.details["cluster_dir"] != pooled_handle.details["cluster_dir"]
            assert not any(pid in cluster_pids(fresh_handle) for pid in pooled_pids)
            assert cluster_pids(pooled_handle) == []  # the pooled cluster is gone
            events = unit_events(db_engine, cu_id)
            assert any(
                event.startswith("the unit from the warm pool could not be handed over")
                and event.endswith("starting a fresh one")
                for event in events
            ), events
            assert events[-1] == "running", events
        finally:
            unit_service.ask_to_stop(cu_id, ("STARTING", "RUNNING"), "the test ends")
            unit_work.run_stop(cu_id)
    assert reload(db_engine, ComputeUnit, cu_id).state == "TERMINATED"


def test_a_real_pooled_unit_is_claimed_runs_its_users_execution_and_a_dead_one_is_replaced(
    portal_config, lakehouse, db_engine
):
    app = create_app(
        replace(
            portal_config,
            **POOL,
            LAKEKEEPER_URL=lakehouse.catalog_url,
            CU_ALLOWED_ENDPOINTS=lakehouse.cu_allowed_endpoints,
            WORKER_SUPERVISOR_SECONDS=2.0,
        )
    )
    background = Worker(app).start()
    started: list[int] = []
    try:
        first = wait_until("a pooled unit", lambda: pool_units(db_engine))[0]
        started.append(first.id)
        wait_until(
            "the pooled unit warm",
            lambda: (
                reload(db_engine, ComputeUnit, first.id).spark_ready_at
                or reload(db_engine, ComputeUnit, first.id).state == "FAILED"
            ),
            db_engine=db_engine,
            cu_id=first.id,
        )
        first = reload(db_engine, ComputeUnit, first.id)
        assert first.state == "RUNNING", (first.reason, unit_events(db_engine, first.id))
        with app.app_context():
            before_claim = handles.handle_of(first)  # the key the host was started with

        client, user = signed_in(app, db_engine)
        warehouse_id = register_warehouse(client, lakehouse, "pooled")
        clicked = time.monotonic()
        cu_id = created_id(create(client, "from-the-pool"))
        assert cu_id == first.id
        wait_until(
            "the claimed unit RUNNING",
            lambda: reload(db_engine, ComputeUnit, cu_id).state != "STARTING",
            db_engine=db_engine,
            cu_id=cu_id,
        )
        claimed = reload(db_engine, ComputeUnit, cu_id)
        assert (claimed.state, claimed.owner_id) == ("RUNNING", user.id), claimed.reason
        assert "handed over: its Spark host has a key of its own" in unit_events(db_engine, cu_id)

        # The host no longer opens with the key of its start: whatever learnt it learnt nothing.
        with pytest.raises(SparkHostError, match="not this unit's Spark host"):
            with SparkHostClient(before_claim, timeout=5) as host:
                host.info()
        with (
            app.app_context()
        ):  # the portal's own key, and a second change, refused now it may run code
            with SparkHostClient(handles.handle_of(claimed), timeout=5) as host:
                assert host.info()["state"] == "ready"

        # Nothing starts beside the claimed unit before its first job has ended.
        assert not [cu for cu in pool_units(db_engine) if cu.id != cu_id]
        response = run(client, workflow_for(db_engine, user), cu_id, warehouse_id)
        execution_id = int(response.headers["Location"].rsplit("/", 1)[1])
        execution = wait_for(client, db_engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED"))
        assert execution.state == "COMPLETED", execution.reason
        print(
            f"[measure] pooled unit: create → execution COMPLETED {time.monotonic() - clicked:.2f} s"
        )
        with app.app_context():
            with SparkHostClient(handles.handle_of(claimed), timeout=5) as host:
                with pytest.raises(SparkHostError, match="409"):
                    host.rekey("0" * 64)
                # Its host dies: the unit's init starts another with the key of the claim, not the start's.
                host.probe(
                    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
                    {},
                    name="kill the host",
                )
                wait_until("the host dead", lambda: _gone(host), timeout=30)
        again = wait_for(
            client,
            db_engine,
            int(
                run(client, workflow_for(db_engine, user), cu_id, warehouse_id)
                .headers["Location"]
                .rsplit("/", 1)[1]
            ),
            ("COMPLETED", "FAILED", "CANCELLED"),
        )
        assert again.state == "COMPLETED", again.reason
        with pytest.raises(SparkHostError, match="not this unit's Spark host"):
            with SparkHostClient(before_claim, timeout=5) as host:
                host.info()

        # The worker refills the pool; a pooled unit that dies is failed and replaced.
        refill = wait_until(
            "the refill", lambda: [cu for cu in pool_units(db_engine) if cu.id != cu_id]
        )[0]
        started.append(refill.id)
        wait_until(
            "the refill RUNNING",
            lambda: reload(db_engine, ComputeUnit, refill.id).state in ("RUNNING", "FAILED"),
            db_engine=db_engine,
            cu_id=refill.id,
        )
        with app.app_context():
            pids = cluster_pids(handles.handle_of(reload(db_engine, ComputeUnit, refill.id)))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_until(
            "the dead pooled unit FAILED",
            lambda: reload(db_engine, ComputeUnit, refill.id).state == "FAILED",
            db_engine=db_engine,
            cu_id=refill.id,
        )
        replacement = wait_until(
            "its replacement",
            lambda: [cu for cu in pool_units(db_engine) if cu.id not in (cu_id, refill.id)],
        )[0]
        started.append(replacement.id)
        assert replacement.owner_id is None
        with Session(db_engine) as db:
            assert (
                db.exec(
                    select(Execution).where(Execution.compute_unit_id == replacement.id)
                ).first()
                is None
            )
    finally:
        app.config["CU_POOL_SIZE"] = 0  # no refill of what is stopped now
        with app.app_context():
            for unit_id in started:
                unit_service.terminate(reload(db_engine, ComputeUnit, unit_id), reason="test over")
            for leftover in pool_units(db_engine):
                unit_service.terminate(leftover, reason="test over")
        deadline = time.monotonic() + 90
        while (
            any(
                reload(db_engine, ComputeUnit, unit_id).state not in ("TERMINATED", "FAILED")
                for unit_id in started
            )
            and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        background.stop()
