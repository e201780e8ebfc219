"""No request waits on a unit: cancel, archive, deactivate and a comparison's rows return within
a second while the unit's Spark host takes connections and never answers, and the request does
not even connect to it. Each records an intent that the worker carries out."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from sqlmodel import Session, select

from app.models import ComparisonJob, ComputeUnit, Execution, Warehouse, utcnow
from app.warehouses import service
from app.warehouses import work as warehouse_work
from tests.factories import csrf, equipped, execution_row, reload

WITHIN_SECONDS = 1.0


class SilentHost:
    """A listener that accepts connections and never answers: a unit whose Spark host hangs."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections.append(connection)

    def close(self) -> None:
        self.socket.close()
        for connection in self.connections:
            connection.close()


@pytest.fixture
def silent_unit(db_engine, newcomer):
    """A workflow, a warehouse row and a RUNNING unit of the newcomer's whose host never answers."""
    host = SilentHost()
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    with Session(db_engine) as db:
        row = db.get(ComputeUnit, cu.id)
        row.handle = json.dumps(
            {"backend": "local", "cu_id": str(cu.id), "spark_host_url": host.url}
        )
        db.add(row)
        db.commit()
    yield workflow, warehouse, reload(db_engine, ComputeUnit, cu.id), host
    host.close()


def timed(call):
    began = time.monotonic()
    response = call()
    return response, time.monotonic() - began


def test_a_cancel_returns_at_once_and_leaves_the_cancel_recorded(
    client, db_engine, newcomer, silent_unit
):
    workflow, warehouse, cu, host = silent_unit
    execution = execution_row(
        db_engine, newcomer, workflow, warehouse, cu, state="RUNNING", run_id="run-1"
    )
    response, took = timed(
        lambda: client.post(
            f"/executions/{execution.id}/cancel",
            headers={"X-CSRFToken": csrf(client), "HX-Request": "true"},
        )
    )
    assert response.status_code == 200 and took < WITHIN_SECONDS, took
    assert reload(db_engine, Execution, execution.id).cancel_requested_at is not None
    assert host.connections == []


@pytest.mark.parametrize(
    "action, status, closing",
    [("archive", "archived", "archive"), ("deactivate", "inactive", "deactivate")],
)
def test_closing_a_warehouse_being_written_returns_at_once_and_leaves_the_catalog_step_to_the_worker(
    client, db_engine, newcomer, silent_unit, action, status, closing
):
    workflow, warehouse, cu, host = silent_unit
    running = execution_row(
        db_engine, newcomer, workflow, warehouse, cu, state="RUNNING", run_id="run-2"
    )
    queued = execution_row(db_engine, newcomer, workflow, warehouse, cu, state="QUEUED")
    response, took = timed(
        lambda: client.post(
            f"/warehouses/{warehouse.id}/{action}", data={"csrf_token": csrf(client)}
        )
    )
    assert response.status_code == 302 and took < WITHIN_SECONDS, took
    row = reload(db_engine, Warehouse, warehouse.id)
    assert (row.status, row.closing) == (status, closing) and row.closing_due_at is not None
    asked = reload(db_engine, Execution, running.id)
    assert asked.state == "RUNNING" and asked.cancel_requested_at is not None
    assert (
        asked.reason
        == f"the warehouse {warehouse.name} was {'archived' if action == 'archive' else 'deactivated'}"
    )
    assert reload(db_engine, Execution, queued.id).state == "FAILED"  # nothing ran: ended at once
    assert 'data-testid="warehouse-closing"' in client.get(f"/warehouses/{warehouse.id}").get_data(
        as_text=True
    )
    assert host.connections == []


def test_the_worker_takes_the_catalog_step_once_the_runs_have_stopped_and_retries_a_refusal(
    app, client, db_engine, newcomer, silent_unit, monkeypatch
):
    workflow, warehouse, cu, _ = silent_unit
    running = execution_row(
        db_engine, newcomer, workflow, warehouse, cu, state="RUNNING", run_id="run-3"
    )
    assert (
        client.post(
            f"/warehouses/{warehouse.id}/archive", data={"csrf_token": csrf(client)}
        ).status_code
        == 302
    )
    steps, refuse = [], []

    def catalog_step(row, step):
        steps.append((row.id, step))
        if refuse:
            raise service.WarehouseActionError(refuse[0])
        return True  # the catalog took it

    monkeypatch.setattr(service, "catalog_step", catalog_step)

    def worker_pass():
        with app.app_context():
            for name, function, subject in warehouse_work.pending_closings():
                if name == f"warehouse-closing:{warehouse.id}":
                    function(subject)

    worker_pass()
    assert steps == []  # its run still writes: not yet
    with Session(db_engine) as db:
        db.get(Execution, running.id).state = "FAILED"
        db.commit()
    refuse.append("Lakekeeper is unreachable")
    worker_pass()
    row = reload(db_engine, Warehouse, warehouse.id)
    assert steps == [(warehouse.id, "archive")] and row.closing == "archive"
    assert row.closing_error == "Lakekeeper is unreachable"
    assert "Lakekeeper is unreachable" in client.get(f"/warehouses/{warehouse.id}").get_data(
        as_text=True
    )
    worker_pass()
    assert len(steps) == 1  # a refusal is tried again later, not at every pass
    with Session(db_engine) as db:
        db.get(Warehouse, warehouse.id).closing_due_at = utcnow()
        db.commit()
    refuse.clear()
    worker_pass()
    row = reload(db_engine, Warehouse, warehouse.id)
    assert len(steps) == 2 and (row.closing, row.closing_error, row.status) == ("", "", "archived")
    assert 'data-testid="warehouse-closing"' not in client.get(
        f"/warehouses/{warehouse.id}"
    ).get_data(as_text=True)


def test_a_comparisons_rows_are_a_job_the_request_only_records(
    client, db_engine, newcomer, silent_unit
):
    workflow, warehouse, cu, host = silent_unit
    a, b = (
        execution_row(
            db_engine,
            newcomer,
            workflow,
            warehouse,
            cu,
            state="COMPLETED",
            run_id="r",
            outputs=json.dumps({"outputs": {"step": f"results.e{n}_step"}}),
        )
        for n in (1, 2)
    )
    url = f"/executions/compare/rows?a={a.id}&b={b.id}"
    response, took = timed(
        lambda: client.post(url, headers={"X-CSRFToken": csrf(client), "HX-Request": "true"})
    )
    assert response.status_code == 200 and took < WITHIN_SECONDS, took
    page = response.get_data(as_text=True)
    assert 'data-state="queued"' in page and 'hx-trigger="every 1s"' in page  # it polls itself
    with Session(db_engine) as db:
        jobs = db.exec(select(ComparisonJob).where(ComparisonJob.a_id == a.id)).all()
    assert [(job.b_id, job.state) for job in jobs] == [(b.id, "queued")]
    again, _ = timed(
        lambda: client.post(url, headers={"X-CSRFToken": csrf(client), "HX-Request": "true"})
    )
    assert again.status_code == 200
    with Session(db_engine) as db:  # the job under way is the answer: no second one
        assert len(db.exec(select(ComparisonJob).where(ComparisonJob.a_id == a.id)).all()) == 1
    polled, took = timed(lambda: client.get(url, headers={"HX-Request": "true"}))
    assert (
        polled.status_code == 200
        and took < WITHIN_SECONDS
        and 'data-state="queued"' in polled.get_data(as_text=True)
    )
    assert host.connections == []
