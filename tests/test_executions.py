"""Executions through the portal: the run dialog, lists and filters, the pages, ownership, and
end to end on a real local compute unit with its Spark host, the dev catalog and SeaweedFS.

Most tests act as a *newcomer*: a user made for the test and signed in to the test client
directly, because the identity provider knows only alice and bob, whom other test modules
equip with warehouses and compute units in the shared database; a newcomer starts with nothing.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import jwt
import pyarrow as pa
import pytest
from sqlmodel import Session, select

from app import create_app
from app.charts import StepTiming, step_timeline_svg
from app.compute_units import door, handles
from app.executions import logs as logs_view
from app.executions import run_spec
from app.executions import service as execution_service
from app.executions import work as execution_work
from app.extensions import lakekeeper
from app.models import (
    ComputeUnit,
    Execution,
    User,
    Warehouse,
    WorkflowVersion,
    WorkLease,
)
from app.ray_clusters.local import SPARK_HOST_LAUNCHER, cluster_pids
from app.spark_host.client import SparkHostClient, SparkHostError
from app.worker import Worker
from compute.contract import JobKind
from devstack.oidc_provider import SERVICE_CLIENT_ID
from devstack.seaweedfs import TEST_USER_KEYS
from tests.factories import (
    add,
    csrf,
    equipped,
    execution_count,
    execution_row,
    independent_catalog,
    make_user,
    new_execution,
    register_warehouse,
    reload,
    run,
    sign_in_as,
    start_sleeping_step,
    start_unit,
    text,
    unit_events,
    unit_row,
    wait_for,
    warehouse_row,
    workflow_for,
)
from tests.processes import process_command_line, process_running


@pytest.fixture
def app(lakehouse_app):
    return lakehouse_app


def select_options(page: str, name: str) -> set[str]:
    """The option values of the <select name=...> in `page`."""
    block = page.split(f'name="{name}"', 1)[1].split("</select>", 1)[0]
    return set(re.findall(r'<option value="([^"]*)"', block))


# --------------------------------------------------------------------------- the run dialog
def test_the_run_dialog_of_a_new_user_points_to_what_is_missing(client, newcomer, db_engine):
    workflow = workflow_for(db_engine, newcomer)
    page = text(client.get(f"/executions/new?workflow_id={workflow.id}"))
    assert (
        '<a role="button" href="/warehouses/new" data-testid="register-warehouse">Register a warehouse</a>'
        in page
    )
    assert "You have no running compute unit." in page and 'href="/compute-units/new"' in page
    assert 'data-testid="run"' not in page


def test_the_run_dialog_refuses_clearly_and_records_nothing(client, newcomer, db_engine):
    other = make_user(db_engine)
    workflow = workflow_for(db_engine, newcomer)
    cu, stopped_cu = (
        unit_row(db_engine, newcomer),
        unit_row(db_engine, newcomer, state="TERMINATED"),
    )
    active, archived = (
        warehouse_row(db_engine, newcomer),
        warehouse_row(db_engine, newcomer, status="archived"),
    )
    inactive = warehouse_row(db_engine, newcomer, status="inactive")
    others_cu, others_warehouse = unit_row(db_engine, other), warehouse_row(db_engine, other)

    page = text(client.get(f"/executions/new?workflow_id={workflow.id}"))
    # Ids of units and warehouses may coincide: look in each select on its own.
    units, warehouses = (
        select_options(page, "compute_unit_id"),
        select_options(page, "warehouse_id"),
    )
    assert str(cu.id) in units and str(stopped_cu.id) not in units
    assert str(active.id) in warehouses
    assert str(archived.id) not in warehouses and str(inactive.id) not in warehouses

    cases = [
        (
            (cu.id, archived.id),
            "warehouse_id",
            f"Warehouse {archived.name} is archived: it takes no new executions.",
        ),
        (
            (cu.id, inactive.id),
            "warehouse_id",
            f"Warehouse {inactive.name} is deactivated; activate it first.",
        ),
        (
            (cu.id, others_warehouse.id),
            "warehouse_id",
            "Choose an active warehouse you may write into.",
        ),
        ((others_cu.id, active.id), "compute_unit_id", "Choose one of your running compute units."),
        (
            (stopped_cu.id, active.id),
            "compute_unit_id",
            f"Compute unit {stopped_cu.name} is terminated, not running.",
        ),
        ((999_999_999, active.id), "compute_unit_id", "Choose one of your running compute units."),
        (("", ""), "compute_unit_id", "Choose a running compute unit."),
        (("", "x"), "warehouse_id", "Choose the warehouse to write into."),
    ]
    for (cu_id, warehouse_id), field, message in cases:
        response = run(client, workflow, cu_id, warehouse_id)
        assert response.status_code == 422, (cu_id, warehouse_id)
        error = re.search(rf'data-testid="error-{field}">([^<]*)<', text(response)).group(1)
        assert error == message
    # Another user's names never show up in an error.
    assert others_warehouse.name not in text(run(client, workflow, cu.id, others_warehouse.id))

    unsaved = workflow_for(db_engine, newcomer, steps=None)
    assert "no steps yet" in text(client.get(f"/executions/new?workflow_id={unsaved.id}"))
    refused = run(client, unsaved, cu.id, active.id)
    assert refused.status_code == 422 and "This workflow has no steps yet." in text(refused)
    assert execution_count(db_engine, newcomer) == 0


def test_the_run_dialog_preselects_the_warehouse_of_the_last_execution(client, newcomer, db_engine):
    workflow = workflow_for(db_engine, newcomer)
    first = warehouse_row(db_engine, newcomer, name="a-first")
    second = warehouse_row(db_engine, newcomer, name="b-second")
    execution_row(
        db_engine,
        newcomer,
        workflow,
        first,
        None,
        state="COMPLETED",
        created_at=datetime.now(timezone.utc) - timedelta(hours=1),
    )
    execution_row(db_engine, newcomer, workflow, second, None, state="FAILED")
    page = text(client.get(f"/executions/new?workflow_id={workflow.id}"))
    assert f'<option value="{second.id}" selected>' in page
    assert f'<option value="{first.id}" >' in page


# --------------------------------------------------------------------------- lists and pages
def test_lists_filter_by_state_warehouse_and_compute_unit(client, newcomer, db_engine):
    workflow, other_workflow = workflow_for(db_engine, newcomer), workflow_for(db_engine, newcomer)
    north, south = warehouse_row(db_engine, newcomer), warehouse_row(db_engine, newcomer)
    cu_a, cu_b = unit_row(db_engine, newcomer), unit_row(db_engine, newcomer, state="TERMINATED")
    done = execution_row(db_engine, newcomer, workflow, north, cu_a, state="COMPLETED")
    failed = execution_row(
        db_engine, newcomer, workflow, south, cu_a, state="FAILED", reason="step 'x' failed"
    )
    elsewhere = execution_row(db_engine, newcomer, other_workflow, south, cu_b, state="COMPLETED")

    def listed(query: str = "", htmx: bool = False) -> set[int]:
        response = client.get(
            f"/executions/?{query}", headers={"HX-Request": "true"} if htmx else {}
        )
        assert response.status_code == 200
        return {int(number) for number in re.findall(r'id="execution-row-(\d+)"', text(response))}

    assert listed() == {done.id, failed.id, elsewhere.id}
    assert listed("state=FAILED") == {failed.id}
    assert listed(f"warehouse_id={south.id}") == {failed.id, elsewhere.id}
    assert listed(f"compute_unit_id={cu_b.id}") == {elsewhere.id}
    assert listed(f"state=COMPLETED&warehouse_id={south.id}") == {elsewhere.id}
    assert listed("state=bogus&warehouse_id=x") == {done.id, failed.id, elsewhere.id}  # ignored
    # The filter form's HTMX request gets the list alone.
    partial = client.get("/executions/?state=FAILED", headers={"HX-Request": "true"})
    assert text(partial).lstrip().startswith('<div id="execution-list">') and "<html" not in text(
        partial
    )
    assert "step 'x' failed" in text(partial)
    assert "No executions match these filters." in text(client.get("/executions/?state=CANCELLED"))
    # One workflow's history.
    history = text(
        client.get(f"/executions/workflow/{workflow.id}", headers={"HX-Request": "true"})
    )
    assert set(map(int, re.findall(r'id="execution-row-(\d+)"', history))) == {done.id, failed.id}


def test_the_list_shows_durations_and_links_each_workflow(client, newcomer, db_engine):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    began = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    ran = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="COMPLETED",
        started_at=began,
        ended_at=began + timedelta(minutes=1, seconds=5),
    )
    queued = execution_row(db_engine, newcomer, workflow, warehouse, cu, state="QUEUED")
    listing = text(client.get("/executions/"))
    assert '<th class="num">Duration</th>' in listing

    def row(execution):
        return listing.split(f'id="execution-row-{execution.id}"', 1)[1].split("</tr>", 1)[0]

    assert re.search(r'data-testid="execution-duration">1 min 05 s<', row(ran))
    assert re.search(r'data-testid="execution-duration">—<', row(queued))  # not started yet
    assert f'<a href="/workflows/{workflow.id}">{workflow.name}</a>' in row(ran)


def test_the_live_part_polls_until_a_final_state(client, newcomer, db_engine):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    progress = {
        "steps": [
            {"name": "load", "state": "done", "rows_out": 1234},
            {"name": "doubled", "state": "running", "rows_out": None},
            {"name": "last", "state": "pending"},
        ],
        "logs": [
            {"ts": 1767225600.0, "level": "INFO", "step": "load", "message": "step load done"}
        ],
    }
    running = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="RUNNING",
        run_id="r1",
        progress=json.dumps(progress),
    )
    live = text(client.get(f"/executions/{running.id}", headers={"HX-Request": "true"}))
    assert live.lstrip().startswith('<div id="execution-live"') and "<html" not in live
    assert f'hx-get="/executions/{running.id}"' in live and 'hx-trigger="load delay:1s"' in live
    bars = re.findall(r'data-step="(\w+)" data-state="(\w+)">.*?(<progress[^>]*>)', live, re.S)
    assert bars == [
        ("load", "done", '<progress value="1" max="1">'),
        ("doubled", "running", "<progress>"),
        ("last", "pending", '<progress value="0" max="1">'),
    ]
    assert "1,234 rows" in live and "[load] step load done" in live
    assert 'hx-post="/executions/%d/cancel"' % running.id in live and "hx-confirm=" in live

    failed = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="FAILED",
        reason="step 'doubled' failed: ArithmeticException",
    )
    final = text(client.get(f"/executions/{failed.id}", headers={"HX-Request": "true"}))
    assert (
        "hx-trigger" not in final.split(">", 1)[0]
        and "step 'doubled' failed: ArithmeticException" in final
    )
    assert 'data-testid="cancel"' not in final
    page = text(client.get(f"/executions/{failed.id}"))
    assert "<html" in page and 'data-testid="execution-live"' in page


@pytest.mark.parametrize("unit_answers", [True, False])
def test_cancelling_a_running_execution_is_recorded_and_passed_on_by_the_worker(
    app, client, newcomer, db_engine, monkeypatch, unit_answers
):
    """The request only records the cancel (it never calls the unit); the worker's next pass
    passes it on once, and a unit that does not answer leaves it recorded for the watcher."""
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    execution = execution_row(
        db_engine, newcomer, workflow, warehouse, cu, state="RUNNING", run_id="run-7"
    )
    asked = []

    class AskedDoor:
        """The door of the execution's unit: notes each cancel; its host answers or not."""

        def __init__(self, cu_id):
            self.cu_id = cu_id

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def cancel(self, run_id):
            asked.append((self.cu_id, run_id))
            if not unit_answers:
                raise SparkHostError(
                    "Spark host at http://127.0.0.1:1 not reachable: Connection refused"
                )
            return {"state": "RUNNING"}

    monkeypatch.setattr(door.UnitDoor, "of_unit", classmethod(lambda cls, cu_id: AskedDoor(cu_id)))
    response = client.post(
        f"/executions/{execution.id}/cancel",
        headers={"X-CSRFToken": csrf(client), "HX-Request": "true"},
    )
    assert response.headers["HX-Redirect"] == f"/executions/{execution.id}"
    assert (
        asked == [] and reload(db_engine, Execution, execution.id).cancel_requested_at is not None
    )
    with app.app_context():
        work = {
            name: (function, subject) for name, function, subject in execution_work.pending_work()
        }
        function, subject = work[f"execution-cancel:{execution.id}"]
        function(subject)
        assert f"execution-cancel:{execution.id}" not in {
            name for name, _, _ in execution_work.pending_work()
        }  # once
    assert asked == [(cu.id, "run-7")]
    assert reload(db_engine, Execution, execution.id).cancel_requested_at is not None


def test_the_runtime_chart_draws_each_step_where_and_as_long_as_it_ran():
    chart = step_timeline_svg(
        [
            StepTiming("load", "done", 0.0, 2.0, 1_000),
            StepTiming("join", "failed", 2.0, 6.0),
            StepTiming("<b>", "cancelled", 8.0, 0.0),
        ]
    )
    bars = re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"[^>]*fill="(#\w+)"', chart)
    (load_x, load_width, load_color), (join_x, join_width, join_color), (_, tiny_width, _) = bars
    assert float(join_width) == pytest.approx(3 * float(load_width), rel=0.01)
    assert float(join_x) == pytest.approx(float(load_x) + float(load_width), rel=0.01)
    assert float(tiny_width) > 0 and load_color != join_color
    assert "2.0 s · 1,000 rows" in chart and "&lt;b&gt;" in chart and "<b>" not in chart
    assert "<script" not in chart and "style=" not in chart
    # A step of a millisecond: the axis counts tenths of milliseconds, not "0 ms" at every tick.
    quick = step_timeline_svg([StepTiming("broken", "failed", 0.0, 0.001)])
    ticks = re.findall(r'text-anchor="middle"[^>]*>([^<]+)</text>', quick)
    assert len(ticks) == 5 and len(set(ticks)) == 5 and ticks[0] == "0.0 ms", ticks


def test_every_execution_route_answers_404_to_another_user(client, newcomer, db_engine):
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    execution = execution_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        cu,
        state="COMPLETED",
        run_id="r",
        outputs=json.dumps({"outputs": {"doubled": "results.e1_doubled"}}),
    )
    running = execution_row(db_engine, owner, workflow, warehouse, cu, state="RUNNING", run_id="r2")
    token = csrf(client)
    htmx = {"HX-Request": "true"}
    gets = [
        f"/executions/{execution.id}",
        f"/executions/{execution.id}/row",
        f"/executions/{execution.id}/stats",
        f"/executions/{execution.id}/results/doubled",
        f"/executions/{execution.id}/results/doubled?page=2&size=25",
        f"/executions/{execution.id}/results/doubled/csv",
        f"/executions/{execution.id}/logs",
        f"/executions/{running.id}/logs?tail=1",
        f"/executions/workflow/{workflow.id}",
        f"/executions/new?workflow_id={workflow.id}",
    ]
    for path in gets:
        for headers in ({}, htmx):
            assert client.get(path, headers=headers).status_code == 404, (path, headers)
    for execution_id in (execution.id, running.id):
        assert (
            client.post(
                f"/executions/{execution_id}/cancel", headers={"X-CSRFToken": token}
            ).status_code
            == 404
        )
    assert (
        client.post(
            f"/executions/new?workflow_id={workflow.id}",
            data={"compute_unit_id": cu.id, "warehouse_id": warehouse.id, "csrf_token": token},
        ).status_code
        == 404
    )
    # The owner reaches the same pages.
    sign_in_as(client, owner)
    assert client.get(f"/executions/{execution.id}").status_code == 200
    assert client.get(f"/executions/{execution.id}/results/doubled").status_code == 200
    assert client.get(f"/executions/{execution.id}/results/not-an-output").status_code == 404
    assert reload(db_engine, Execution, running.id).state == "RUNNING"


def test_the_token_a_unit_receives_acts_as_the_executing_user_for_one_warehouse(
    portal_config, lakehouse, db_engine
):
    """The catalog token of an execution, as `runner` puts it into the ExecutionSpec, used the way
    the unit's code could use it: through the API a real Lakekeeper offers."""
    app = create_app(replace(portal_config, LAKEKEEPER_URL=lakehouse.catalog_url))
    owner_client, stranger_client = app.test_client(), app.test_client()
    owner, stranger = make_user(db_engine), make_user(db_engine)
    sign_in_as(owner_client, owner)
    sign_in_as(stranger_client, stranger)
    own, second = (
        reload(db_engine, Warehouse, register_warehouse(owner_client, lakehouse, name))
        for name in ("mine", "second")
    )
    theirs = reload(db_engine, Warehouse, register_warehouse(stranger_client, lakehouse, "theirs"))

    with app.app_context():
        token = door.run_token(own, owner)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert (
        claims["sub"] == owner.subject != SERVICE_CLIENT_ID
    )  # the user, never the portal's service identity
    assert claims["act"] == {"sub": SERVICE_CLIENT_ID}
    assert claims["scope"] == f"warehouse:{own.lakekeeper_id}"
    assert claims["exp"] - claims["iat"] == lakehouse.oidc.user_token_ttl

    with httpx.Client(
        base_url=lakehouse.catalog_url, headers={"Authorization": f"Bearer {token}"}
    ) as catalog:
        assert catalog.get("/management/v1/whoami").json()["id"] == f"oidc~{owner.subject}"
        listed = catalog.get("/management/v1/warehouse").raise_for_status().json()["warehouses"]
        assert [w["name"] for w in listed] == [own.lakekeeper_name]
        assert (
            catalog.get("/catalog/v1/config", params={"warehouse": own.lakekeeper_name}).status_code
            == 200
        )
        # The user's other warehouse and another user's are not there for this token: a
        # warehouse the caller may not see answers as a missing one, 404 NoSuchWarehouseException
        # (devstack/devcatalog/README.md, "warehouse the caller may not see").
        for elsewhere in (second, theirs):
            for answer in (
                catalog.get(f"/management/v1/warehouse/{elsewhere.lakekeeper_id}"),
                catalog.get("/catalog/v1/config", params={"warehouse": elsewhere.lakekeeper_name}),
                catalog.get(f"/catalog/v1/{elsewhere.lakekeeper_id}/namespaces"),
            ):
                assert answer.status_code == 404, answer.text
                assert answer.json()["error"]["type"] == "NoSuchWarehouseException"


def test_results_logs_and_stats_of_a_completed_execution_are_read_from_its_warehouse(
    client, newcomer, db_engine, lakehouse
):
    """The tables a run leaves (written here with pyiceberg, as compute/run/pipeline.py lays them out)
    read through the portal's pages: paging, page size, jumping, CSV, logs, the chart."""
    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "read"))
    workflow, cu = (
        workflow_for(db_engine, newcomer),
        unit_row(db_engine, newcomer, state="TERMINATED"),
    )
    execution = execution_row(
        db_engine, newcomer, workflow, warehouse, cu, state="COMPLETED", run_id="r"
    )
    table = f"results.e{execution.id}_doubled"
    with Session(db_engine) as db:
        db.get(Execution, execution.id).outputs = json.dumps({"outputs": {"doubled": table}})
        db.commit()
    catalog = independent_catalog(lakehouse, warehouse)
    for namespace in ("results", "runtime_stats", "console_logs"):
        catalog.create_namespace(namespace)
    doubled = pa.schema([("id", pa.int64()), ("twice", pa.int64())])
    catalog.create_table(table, schema=doubled).append(
        pa.table({"id": list(range(130)), "twice": [2 * i for i in range(130)]}, schema=doubled)
    )
    began = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    stats = pa.schema(
        [
            ("step", pa.string()),
            ("status", pa.string()),
            ("rows_out", pa.int64()),
            ("started_at", pa.timestamp("us", tz="UTC")),
            ("duration_ms", pa.int64()),
        ]
    )
    catalog.create_table(f"runtime_stats.e{execution.id}", schema=stats).append(
        pa.table(
            {
                "step": ["load", "doubled"],
                "status": ["done", "done"],
                "rows_out": [None, 130],
                "started_at": [began, began + timedelta(seconds=1)],
                "duration_ms": [1000, 3000],
            },
            schema=stats,
        )
    )
    logs = pa.schema(
        [
            ("ts", pa.timestamp("us", tz="UTC")),
            ("level", pa.string()),
            ("step", pa.string()),
            ("message", pa.string()),
        ]
    )
    catalog.create_table(f"console_logs.e{execution.id}", schema=logs).append(
        pa.table(
            {
                "ts": [began],
                "level": ["INFO"],
                "step": ["doubled"],
                "message": ["step doubled done"],
            },
            schema=logs,
        )
    )
    base = f"/executions/{execution.id}/results/doubled"

    page = text(client.get(base))
    assert re.search(r'data-testid="total-rows">130<', page) and "page 1 of 3" in page
    assert 'data-testid="read-snippet"' in page and f"lake.{table}" in page
    assert TEST_USER_KEYS["alice"].secret_access_key not in page
    jumped = text(client.get(f"{base}?page=3&size=25", headers={"HX-Request": "true"}))
    assert jumped.lstrip().startswith('<div id="table-page"') and "<html" not in jumped
    assert "Rows 51–75 of" in jumped and "page 3 of 6" in jumped
    assert (
        len(re.findall(r"<tr><td class=\"num\">\d+</td><td class=\"num\">\d+</td></tr>", jumped))
        == 25
    )
    assert 'hx-get="%s?page=4&amp;size=25"' % base in jumped
    last = text(client.get(f"{base}?page=99&size=100", headers={"HX-Request": "true"}))
    assert "Rows 101–130 of" in last and "page 2 of 2" in last
    odd = text(
        client.get(f"{base}?page=x&size=7", headers={"HX-Request": "true"})
    )  # not offered: the default
    assert "Rows 1–50 of" in odd

    download = client.get(f"{base}/csv")
    assert download.mimetype == "text/csv"
    rows = list(csv.reader(io.StringIO(text(download))))
    assert rows[0] == ["id", "twice"] and sorted(int(row[0]) for row in rows[1:]) == list(
        range(130)
    )

    chart = text(client.get(f"/executions/{execution.id}/stats", headers={"HX-Request": "true"}))
    assert (
        'data-step="load"' in chart
        and 'data-step="doubled"' in chart
        and "3.0 s · 130 rows" in chart
    )
    logs_page = text(client.get(f"/executions/{execution.id}/logs"))
    assert "step doubled done" in logs_page and "<html" in logs_page

    catalog.drop_table(table)
    gone = text(client.get(base))
    assert re.search(r'data-testid="table-error">This table does not exist in the warehouse', gone)
    assert client.get(f"{base}/csv").status_code == 502


LOG_SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("level", pa.string()),
        ("step", pa.string()),
        ("message", pa.string()),
    ]
)


def test_log_filters_keep_lines_matching_level_step_and_text_in_time_order():
    began = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    rows = pa.table(
        {
            "ts": [began + timedelta(seconds=s) for s in (3, 1, 2, 0)],
            "level": ["ERROR", "INFO", "INFO", None],
            "step": ["load", "load", "sum", None],
            "message": ["Load failed", "loading ROWS", "summing rows", "starting"],
        },
        schema=LOG_SCHEMA,
    )
    messages = lambda table: table["message"].to_pylist()  # noqa: E731
    assert messages(logs_view.filtered(rows, logs_view.LogFilters())) == [
        "starting",
        "loading ROWS",
        "summing rows",
        "Load failed",
    ]  # by time, not as written
    assert messages(logs_view.filtered(rows, logs_view.LogFilters(level="INFO"))) == [
        "loading ROWS",
        "summing rows",
    ]
    assert messages(logs_view.filtered(rows, logs_view.LogFilters(step="load"))) == [
        "loading ROWS",
        "Load failed",
    ]
    assert messages(logs_view.filtered(rows, logs_view.LogFilters(text="rows"))) == [
        "loading ROWS",
        "summing rows",
    ]
    assert messages(
        logs_view.filtered(rows, logs_view.LogFilters(level="INFO", step="load", text="LOAD"))
    ) == ["loading ROWS"]
    assert logs_view.filtered(rows, logs_view.LogFilters(level="DEBUG")).num_rows == 0
    assert logs_view.LogFilters.from_args({"level": "INFO", "step": "", "q": "  x "}).params == {
        "level": "INFO",
        "q": "x",
    }


def test_the_logs_viewer_filters_on_the_server_and_keeps_its_filters_in_the_url(
    client, newcomer, db_engine, lakehouse
):
    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "logs"))
    workflow, cu = (
        workflow_for(db_engine, newcomer),
        unit_row(db_engine, newcomer, state="TERMINATED"),
    )
    execution = execution_row(
        db_engine, newcomer, workflow, warehouse, cu, state="COMPLETED", run_id="r"
    )
    catalog = independent_catalog(lakehouse, warehouse)
    catalog.create_namespace("console_logs")
    began = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    lines = [
        ("INFO", None, "run started"),
        ("WARN", "load", "Slow storage answer"),
        ("ERROR", "load", "retrying"),
    ] + [("INFO", "bulk", f"bulk line {number}") for number in range(60)]
    catalog.create_table(f"console_logs.e{execution.id}", schema=LOG_SCHEMA).append(
        pa.table(
            {
                "ts": [began + timedelta(seconds=number) for number in range(len(lines))],
                "level": [line[0] for line in lines],
                "step": [line[1] for line in lines],
                "message": [line[2] for line in lines],
            },
            schema=LOG_SCHEMA,
        )
    )
    base = f"/executions/{execution.id}/logs"

    page = text(client.get(base))
    assert 'data-testid="log-filters"' in page
    assert select_options(page, "level") == {"", "ERROR", "INFO", "WARN"}
    assert select_options(page, "step") == {"", "bulk", "load"}
    # Times travel in UTC for the page's script to show in the viewer's time zone.
    assert (
        '<time datetime="2026-01-01T12:00:01+00:00" data-local>2026-01-01 12:00:01 UTC</time>'
        in page
    )
    assert "Rows 1–50 of" in page and 'data-testid="total-rows">63<' in page

    warned = client.get(f"{base}?level=WARN", headers={"HX-Request": "true"})
    partial = text(warned)
    assert partial.lstrip().startswith('<div id="table-page"') and "<html" not in partial
    assert (
        "Slow storage answer" in partial
        and "retrying" not in partial
        and "bulk line" not in partial
    )
    assert warned.headers["HX-Push-Url"] == f"{base}?page=1&size=50&level=WARN"

    searched = text(client.get(f"{base}?step=load&q=SLOW", headers={"HX-Request": "true"}))
    assert "Slow storage answer" in searched and "retrying" not in searched

    # The pager keeps the filters: its links, its forms and the address bar.
    bulk = client.get(f"{base}?step=bulk&size=25&page=2", headers={"HX-Request": "true"})
    paged = text(bulk)
    assert "Rows 26–50 of" in paged and "page 2 of 3" in paged and "bulk line 25" in paged
    assert 'hx-get="%s?page=3&amp;size=25&amp;step=bulk"' % base in paged
    assert '<input type="hidden" name="step" value="bulk">' in paged
    assert bulk.headers["HX-Push-Url"] == f"{base}?page=2&size=25&step=bulk"
    # Without htmx the same address shows the whole page with the filters filled in.
    full = text(client.get(f"{base}?step=bulk&q=line 1"))
    assert "<html" in full and 'value="line 1"' in full and '<option value="bulk" selected>' in full
    assert "bulk line 17" in full and "bulk line 20" not in full
    nothing = text(client.get(f"{base}?q=no such words", headers={"HX-Request": "true"}))
    assert 'data-testid="total-rows">0<' in nothing


def test_a_failed_execution_says_why_first_and_links_to_its_step_with_the_stats_it_has(
    client, newcomer, db_engine, lakehouse
):
    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "failed"))
    workflow = workflow_for(
        db_engine,
        newcomer,
        [
            {"name": "numbers", "kind": "sql", "code": "SELECT 1 AS id", "output": False},
            {
                "name": "broken",
                "kind": "python",
                "code": "def run(spark, numbers):\n    raise ValueError('no')",
                "output": True,
            },
        ],
    )
    cu = unit_row(db_engine, newcomer, state="TERMINATED")
    began = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc).timestamp()
    progress = {
        "steps": [
            {
                "name": "numbers",
                "state": "done",
                "rows_out": None,
                "started_at": began,
                "ended_at": began + 2,
            },
            {
                "name": "broken",
                "state": "failed",
                "rows_out": None,
                "started_at": began + 2,
                "ended_at": began + 3,
            },
            {
                "name": "never",
                "state": "pending",
                "rows_out": None,
                "started_at": None,
                "ended_at": None,
            },
        ],
        "logs": [],
    }
    reason = "step 'broken' failed: ValueError: no"
    # Its runtime_stats table was never written (e.g. it failed while recording).
    execution = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="FAILED",
        run_id="r",
        reason=reason,
        progress=json.dumps(progress),
    )

    page = text(client.get(f"/executions/{execution.id}"))
    box = page.split('data-testid="failure-box"', 1)[1].split("</article>", 1)[0]
    assert 'role="alert"' in page.split('data-testid="failure-box"', 1)[0].rsplit("<article", 1)[1]
    assert reason in box
    assert f'href="/workflows/{workflow.id}/edit#step-broken"' in box
    assert 'data-testid="execution-reason"' not in page  # said once, in the box
    editor = text(client.get(f"/workflows/{workflow.id}/edit"))
    assert '<legend id="step-broken">' in editor

    stats = text(client.get(f"/executions/{execution.id}/stats", headers={"HX-Request": "true"}))
    assert "does not exist" not in stats
    assert 'data-testid="stats-from-progress"' in stats
    assert (
        'data-step="numbers"' in stats
        and 'data-step="broken"' in stats
        and 'data-step="never"' not in stats
    )

    # A failure outside any step has the box, without a step to open.
    unbound = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="FAILED",
        run_id="r2",
        reason="the compute unit stopped: it was deleted",
        progress=json.dumps({"steps": []}),
    )
    page = text(client.get(f"/executions/{unbound.id}"))
    assert (
        'data-testid="failure-box"' in page and "the compute unit stopped: it was deleted" in page
    )
    assert 'data-testid="failing-step-link"' not in page
    stats = text(client.get(f"/executions/{unbound.id}/stats", headers={"HX-Request": "true"}))
    assert "does not exist" not in stats and 'data-testid="no-stats"' in stats


def test_an_unreachable_catalog_fails_the_execution_with_that_reason(
    portal_config, db_engine, closed_port
):
    app = create_app(
        replace(
            portal_config,
            LAKEKEEPER_URL=f"http://127.0.0.1:{closed_port}",
            LAKEKEEPER_TIMEOUT_SECONDS=2.0,
        )
    )
    background = Worker(app).start()
    client = app.test_client()
    owner = make_user(db_engine)
    sign_in_as(client, owner)
    workflow, warehouse, cu = equipped(db_engine, owner)
    response = run(client, workflow, cu.id, warehouse.id)
    assert response.status_code == 302, text(response)
    execution_id = int(response.headers["Location"].rsplit("/", 1)[1])
    execution = wait_for(client, db_engine, execution_id, ("FAILED",), timeout=30)
    assert execution.reason.startswith("the catalog (Lakekeeper) is unreachable")
    assert execution.workflow_version == 1 and execution.compute_unit_id == cu.id
    assert execution.warehouse_id == warehouse.id and execution.owner_id == owner.id
    assert reload(db_engine, ComputeUnit, cu.id).state == "RUNNING"
    background.stop()


def test_a_warehouse_gone_from_the_catalog_fails_the_execution_at_submit(
    app, client, newcomer, db_engine, lakehouse, worker
):
    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "vanishing"))
    with app.app_context():
        lakekeeper().delete_warehouse(warehouse.lakekeeper_id)  # behind Lakeport's back
    workflow, cu = workflow_for(db_engine, newcomer), unit_row(db_engine, newcomer)
    response = run(client, workflow, cu.id, warehouse.id)
    assert response.status_code == 302, text(response)
    execution = wait_for(
        client,
        db_engine,
        int(response.headers["Location"].rsplit("/", 1)[1]),
        ("FAILED",),
        timeout=30,
    )
    assert execution.reason == "the warehouse vanishing no longer exists in the catalog"
    assert execution.run_id == ""


def test_a_worker_takes_over_an_execution_whose_worker_died_and_prepares_it_again(
    app, newcomer, db_engine, worker
):
    """Its lease expired: the execution is prepared again from its row (here its warehouse is not in
    the catalog, so it fails saying so); one whose lease a live worker holds is left to that worker."""
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    long_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    with Session(db_engine, expire_on_commit=False) as db:
        abandoned = new_execution(
            db, newcomer, workflow, warehouse, cu, state="INITIALIZING", created_at=long_ago
        )
        held = new_execution(db, newcomer, workflow, warehouse, cu, state="INITIALIZING")
        db.add_all([abandoned, held])
        db.flush()
        # In the same transaction: the worker hears of new executions at once, and must find them leased.
        db.add_all(
            [
                WorkLease(
                    name=f"execution:{abandoned.id}", holder="dead-worker", expires_at=long_ago
                ),
                WorkLease(
                    name=f"execution:{held.id}",
                    holder="live-worker",
                    expires_at=datetime.now(timezone.utc) + timedelta(minutes=5),
                ),
            ]
        )
        db.commit()
    deadline = time.monotonic() + 30
    while (execution := reload(db_engine, Execution, abandoned.id)).state == "INITIALIZING":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert execution.state == "FAILED", execution.reason
    # Prepared again from the start: the warehouse is checked first (this one is Lakeport's row only).
    assert execution.reason == f"the warehouse {warehouse.name} no longer exists in the catalog"
    assert reload(db_engine, Execution, held.id).state == "INITIALIZING"
    with Session(db_engine) as db:
        db.delete(db.get(WorkLease, f"execution:{held.id}"))
        db.get(Execution, held.id).state = "CANCELLED"
        db.commit()


def test_archiving_or_deactivating_a_warehouse_stops_the_executions_waiting_to_write_into_it(
    client, newcomer, db_engine, lakehouse
):
    warehouses = {
        action: reload(db_engine, Warehouse, register_warehouse(client, lakehouse, action))
        for action in ("archive", "deactivate")
    }
    workflow, cu = workflow_for(db_engine, newcomer), unit_row(db_engine, newcomer)
    elsewhere = execution_row(
        db_engine, newcomer, workflow, warehouse_row(db_engine, newcomer), cu, state="QUEUED"
    )
    for action, warehouse in warehouses.items():
        queued = execution_row(
            db_engine,
            newcomer,
            workflow,
            warehouse,
            cu,
            state="QUEUED",
            progress=json.dumps({"steps": [{"name": "doubled", "state": "pending"}], "logs": []}),
        )
        finished = execution_row(db_engine, newcomer, workflow, warehouse, cu, state="COMPLETED")
        response = client.post(
            f"/warehouses/{warehouse.id}/{action}",
            data={"csrf_token": csrf(client)},
            follow_redirects=True,
        )
        assert "1 execution writing into it stopped." in text(response)
        stopped = reload(db_engine, Execution, queued.id)
        assert (stopped.state, stopped.reason) == (
            "FAILED",
            f"the warehouse {action} was {action}d",
        )
        assert stopped.ended_at is not None
        assert json.loads(stopped.progress)["steps"] == [{"name": "doubled", "state": "cancelled"}]
        assert reload(db_engine, Execution, finished.id).state == "COMPLETED"
    assert reload(db_engine, Execution, elsewhere.id).state == "QUEUED"


# --------------------------------------------------------------------------- end to end on Ray


def is_java(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "java"
    except OSError:
        return False


def test_a_running_unit_starts_its_spark_session_before_any_execution_asks(e2e, db_engine):
    """First in this module: the unit's first execution then finds Spark warm."""
    app, client, user, cu_id, _ = e2e
    deadline = time.monotonic() + 180
    while not any(
        event.startswith("Spark session ready after") for event in unit_events(db_engine, cu_id)
    ):
        assert time.monotonic() < deadline, unit_events(db_engine, cu_id)
        time.sleep(1)
    assert "starting its Spark session" in unit_events(db_engine, cu_id)
    with Session(db_engine) as db:
        assert (
            db.exec(select(Execution.id).where(Execution.compute_unit_id == cu_id)).first() is None
        )
    with app.app_context():
        handle = handles.handle_of(reload(db_engine, ComputeUnit, cu_id))
        with SparkHostClient(handle) as host:
            info = host.info()
        assert info["state"] == "ready"
        # The host was started with the cluster by the unit's init, not by a Ray Job afterwards;
        # its launcher ends once the host is ready.
        backend = handles.backend_of(reload(db_engine, ComputeUnit, cu_id))
        deadline = time.monotonic() + 30
        while backend.spark_host_launch(handle) != "ENDED":
            assert time.monotonic() < deadline, "the Spark host's launcher did not end"
            time.sleep(0.5)
        # A unit runs no Ray dashboard, so no Jobs API either: nothing else can have started it.
        assert handle.dashboard_url is None
    # Nor what only the dashboard or Ray Client would use: a lean unit (idle memory, issue 14).
    programs = [process_command_line(pid) for pid in cluster_pids(handle)]
    for absent in (
        "dashboard/dashboard.py",
        "autoscaler/_private/monitor.py",
        "ray.util.client.server",
        "_private/log_monitor.py",
    ):
        assert not [program for program in programs if absent in program], absent
    # Its page shows the unit's resources as its Spark host sees them in Ray: the executors hold CPUs.
    # (as the worker last found them: it checks the unit again once its session is warm)
    deadline = time.monotonic() + 30
    while True:
        page = client.get(f"/compute-units/{cu_id}").get_data(as_text=True)
        in_use = re.search(r"CPUs in use: ([\d.]+) of ([\d.]+)", page)
        if (in_use and float(in_use.group(1)) > 0) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert page.count('data-testid="cu-node"') == 1
    assert in_use and 0 < float(in_use.group(1)) <= float(in_use.group(2)), in_use
    launcher = json.loads(
        (Path(handle.details["cluster_dir"]) / "nodes" / f"{SPARK_HOST_LAUNCHER}.json").read_text()
    )
    assert launcher["returncode"] == 0
    detail = text(client.get(f"/compute-units/{cu_id}"))
    assert "Spark session ready after" in detail


def test_terminating_a_unit_while_its_spark_session_starts_leaves_nothing_behind(e2e, db_engine):
    app, client, user, _, _ = e2e
    cu = start_unit(client, db_engine, "short-lived")
    with app.app_context():
        pids = cluster_pids(handles.handle_of(cu))
    deadline = time.monotonic() + 60
    # Wait until Spark's JVMs are coming up, then pull the plug.
    while not any(is_java(pid) for pid in pids):
        assert time.monotonic() < deadline, "no JVM started"
        time.sleep(0.5)
        with app.app_context():
            pids = cluster_pids(handles.handle_of(reload(db_engine, ComputeUnit, cu.id)))
    terminated = client.post(
        f"/compute-units/{cu.id}/terminate", headers={"X-CSRFToken": csrf(client)}
    )
    assert terminated.status_code in (200, 302), text(terminated)
    deadline = time.monotonic() + 60
    while (latest := reload(db_engine, ComputeUnit, cu.id)).state != "TERMINATED":
        assert time.monotonic() < deadline and latest.state != "FAILED", (
            latest.state,
            latest.reason,
        )
        time.sleep(0.5)
    deadline = time.monotonic() + 30
    while alive := [pid for pid in pids if process_running(pid)]:
        assert time.monotonic() < deadline, f"left running: {alive}"
        time.sleep(0.5)
    # The unit's start waits in its warm-up for the Spark session; the worker releases the start's
    # lease only once the start has returned, so from then on the warm-up has said all it will.
    deadline = time.monotonic() + 120
    while reload(db_engine, WorkLease, f"unit-start:{cu.id}") is not None:
        assert time.monotonic() < deadline, "the unit's start did not end"
        time.sleep(0.5)
    events = unit_events(db_engine, cu.id)
    assert "starting its Spark session" in events  # it was stopped while warming up
    # and reports no failure of a unit it was told to stop
    assert not any("did not start" in event for event in events), events


def test_run_a_one_step_workflow_into_a_warehouse_and_page_its_results(e2e, db_engine, lakehouse):
    app, client, user, cu_id, warehouse_id = e2e
    workflow = workflow_for(db_engine, user)
    before = reload(db_engine, ComputeUnit, cu_id).last_activity_at
    response = run(client, workflow, cu_id, warehouse_id)
    assert response.status_code == 302, text(response)
    execution_id = int(response.headers["Location"].rsplit("/", 1)[1])
    execution = wait_for(client, db_engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED"))
    assert execution.state == "COMPLETED", execution.reason
    assert json.loads(execution.outputs)["outputs"] == {
        "doubled": f"results.e{execution_id}_doubled"
    }
    assert [step["state"] for step in json.loads(execution.progress)["steps"]] == ["done"]
    assert reload(db_engine, ComputeUnit, cu_id).last_activity_at > before

    # The table is in the chosen warehouse, complete, read by an independent client.
    warehouse = reload(db_engine, Warehouse, warehouse_id)
    table = independent_catalog(lakehouse, warehouse).load_table(f"results.e{execution_id}_doubled")
    assert table.properties["lakeport.status"] == "complete"
    assert table.properties["lakeport.execution-id"] == str(execution_id)

    page = text(client.get(f"/executions/{execution_id}"))
    assert f'href="/executions/{execution_id}/results/doubled"' in page
    results = text(client.get(f"/executions/{execution_id}/results/doubled"))
    assert re.search(r'data-testid="total-rows">130<', results)
    assert 'data-testid="read-snippet"' in results and warehouse.lakekeeper_name in results
    second = text(
        client.get(
            f"/executions/{execution_id}/results/doubled?page=2&size=25",
            headers={"HX-Request": "true"},
        )
    )
    assert second.lstrip().startswith('<div id="table-page"')
    cells = re.findall(r"<tr><td class=\"num\">(\d+)</td><td class=\"num\">(\d+)</td></tr>", second)
    assert len(cells) == 25 and all(int(twice) == 2 * int(number) for number, twice in cells)
    assert "Rows 26–50 of" in second

    download = client.get(f"/executions/{execution_id}/results/doubled/csv")
    assert (
        download.headers["Content-Disposition"]
        == f'attachment; filename="results-e{execution_id}_doubled.csv"'
    )
    rows = list(csv.reader(io.StringIO(text(download))))
    assert rows[0] == ["id", "twice"] and sorted(int(row[0]) for row in rows[1:]) == list(
        range(130)
    )

    stats = text(client.get(f"/executions/{execution_id}/stats", headers={"HX-Request": "true"}))
    assert 'data-testid="runtime-chart"' in stats and 'data-step="doubled"' in stats
    logs = text(client.get(f"/executions/{execution_id}/logs"))
    assert "step doubled done" in logs and 'data-testid="result-table"' in logs


def test_a_schedule_starts_its_ended_unit_for_a_run_and_stops_it_after(e2e, db_engine, monkeypatch):
    """A due time on a schedule whose unit has ended: a copy starts, the run completes on it, and
    the copy is stopped; the worker does the starting and stopping, as for any unit."""
    from app.models import Schedule, ScheduledRun
    from app.schedules import work as schedules_work
    from tests.factories import T0, at

    app, client, user, cu_id, warehouse_id = e2e
    ended = add(
        db_engine,
        ComputeUnit(
            owner_id=user.id, name="nightly", kind="local", cpus=2, memory_gb=3, state="TERMINATED"
        ),
    )
    schedule = add(
        db_engine,
        Schedule(
            owner_id=user.id,
            workflow_id=workflow_for(db_engine, user).id,
            cron="0 6 * * *",
            timezone="UTC",
            compute_unit_id=ended.id,
            warehouse_id=warehouse_id,
            start_unit=True,
            handled_until=T0 - timedelta(minutes=1),
            created_at=T0 - timedelta(minutes=1),
        ),
    )
    at(monkeypatch, T0 + timedelta(seconds=5))

    def the_run() -> ScheduledRun:
        with app.app_context():
            schedules_work.fire_due()
        with Session(db_engine) as db:
            return db.exec(
                select(ScheduledRun).where(ScheduledRun.schedule_id == schedule.id)
            ).one()

    deadline = time.monotonic() + 180
    while (scheduled := the_run()).outcome == "waiting":
        assert time.monotonic() < deadline, unit_events(db_engine, scheduled.started_unit_id)
        time.sleep(1)
    assert scheduled.outcome == "started", scheduled.reason
    copy_id = scheduled.started_unit_id
    assert reload(db_engine, ComputeUnit, copy_id).state == "RUNNING" and copy_id not in (
        ended.id,
        cu_id,
    )
    execution = wait_for(
        client, db_engine, scheduled.execution_id, ("COMPLETED", "FAILED", "CANCELLED")
    )
    assert (execution.state, execution.compute_unit_id) == ("COMPLETED", copy_id), execution.reason
    deadline = time.monotonic() + 90
    while (copy := reload(db_engine, ComputeUnit, copy_id)).state != "TERMINATED":
        assert time.monotonic() < deadline, copy.state
        the_run()
        time.sleep(1)
    assert "stopped by its schedule" in copy.reason
    assert (
        reload(db_engine, ComputeUnit, cu_id).state == "RUNNING"
    )  # the user's other unit is untouched


def test_runs_leave_no_connections_open_on_their_unit(e2e, db_engine, lakehouse):
    """Each run opens catalog clients of its own (pyiceberg's, its Spark session's Iceberg REST
    client), which keep their connections alive; once it has ended they are closed: the unit holds
    no more catalog connections after five more runs than after one. Storage is reached per table
    with the credentials vended for it (VendedCredentialsFileIO), so a run's new tables open S3A
    connections of their own; the AWS SDK closes them once idle for a minute (its idle connection
    reaper looks every minute), so an idle unit holds none of them two minutes on."""
    app, client, user, cu_id, warehouse_id = e2e
    workflow = workflow_for(db_engine, user)
    with app.app_context():
        handle = handles.handle_of(reload(db_engine, ComputeUnit, cu_id))
    catalog, storage = (
        f"TCP:{urlsplit(url).netloc}," for url in (lakehouse.catalog_url, lakehouse.s3_endpoint)
    )

    def connections_out(
        to: str,
    ) -> int:  # each connection out of the sandbox is relayed by socat processes
        commands = [process_command_line(pid) for pid in cluster_pids(handle)]
        return sum(
            command.startswith("socat") and "egress-" in command and to in command
            for command in commands
        )

    catalog_counts, storage_counts = [], []
    for _ in range(6):
        execution_id = int(
            run(client, workflow, cu_id, warehouse_id).headers["Location"].rsplit("/", 1)[1]
        )
        assert (
            wait_for(client, db_engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED")).state
            == "COMPLETED"
        )
        time.sleep(0.5)
        catalog_counts.append(connections_out(catalog))
        storage_counts.append(connections_out(storage))
    assert catalog_counts[-1] <= catalog_counts[0] + 2, catalog_counts
    deadline = time.monotonic() + 150
    while connections_out(storage) > storage_counts[0] + 2:
        assert time.monotonic() < deadline, (storage_counts, connections_out(storage))
        time.sleep(2)


def test_cancel_mid_run(e2e, db_engine):
    app, client, user, cu_id, warehouse_id = e2e
    execution_id = start_sleeping_step(client, db_engine, user, cu_id, warehouse_id)
    cancelled = client.post(
        f"/executions/{execution_id}/cancel",
        headers={"X-CSRFToken": csrf(client), "HX-Request": "true"},
    )
    assert cancelled.headers["HX-Redirect"] == f"/executions/{execution_id}"
    execution = wait_for(
        client, db_engine, execution_id, ("CANCELLED", "FAILED", "COMPLETED"), timeout=60
    )
    assert execution.state == "CANCELLED", execution.reason
    assert execution.reason == "cancelled by its owner"
    assert [step["state"] for step in json.loads(execution.progress)["steps"]] == ["cancelled"]


def test_a_step_that_raises_fails_the_execution_with_the_step_and_its_error(e2e, db_engine):
    app, client, user, cu_id, warehouse_id = e2e
    workflow = workflow_for(
        db_engine,
        user,
        [
            {"name": "numbers", "kind": "sql", "code": "SELECT id FROM range(3)", "output": True},
            {
                "name": "broken",
                "kind": "python",
                "code": "def run(spark, numbers):\n    raise ValueError('no good')",
            },
        ],
    )
    execution_id = int(
        run(client, workflow, cu_id, warehouse_id).headers["Location"].rsplit("/", 1)[1]
    )
    execution = wait_for(
        client, db_engine, execution_id, ("FAILED", "COMPLETED", "CANCELLED"), timeout=120
    )
    assert execution.state == "FAILED"
    assert execution.reason == "step 'broken' failed: ValueError: no good"
    assert [step["state"] for step in json.loads(execution.progress)["steps"]] == ["done", "failed"]
    page = text(client.get(f"/executions/{execution_id}"))
    assert "step 'broken' failed: ValueError: no good" in page
    assert 'data-testid="execution-outputs"' not in page  # a failed run offers no results


def test_the_worker_watches_runs_no_worker_watches_that_their_unit_still_knows(e2e, db_engine):
    """A run submitted by a worker that then died (no lease) is followed to its end by the running
    worker; a run the unit does not know fails."""
    app, client, user, cu_id, warehouse_id = e2e
    workflow = workflow_for(db_engine, user)
    cu, warehouse = (
        reload(db_engine, ComputeUnit, cu_id),
        reload(db_engine, Warehouse, warehouse_id),
    )
    # Made final so that no worker drives it before it looks like a dead worker's run: RUNNING with
    # the run id of a run on its unit, set below in one write.
    orphan = execution_row(db_engine, user, workflow, warehouse, cu, state="FAILED")
    unknown = execution_row(
        db_engine, user, workflow, warehouse, cu, state="RUNNING", run_id="no-such-run"
    )
    no_run = execution_row(db_engine, user, workflow, warehouse, cu, state="RUNNING")
    with app.app_context(), SparkHostClient(handles.handle_of(cu)) as host:
        with Session(db_engine) as db:
            version = db.get(WorkflowVersion, orphan.workflow_version_id)
            owner = db.get(User, user.id)
        token = lakekeeper().user_token(owner.subject, warehouse.lakekeeper_id).access_token
        spec = run_spec.execution_spec(orphan, workflow, version, owner, cu, warehouse, token)
        run_id = host.submit(JobKind.EXECUTION, spec.to_json(), name="left by a dead portal")[
            "run_id"
        ]
    with Session(db_engine) as db:
        row = db.get(Execution, orphan.id)
        row.state, row.run_id = "RUNNING", run_id
        db.commit()

    adopted = wait_for(
        client, db_engine, orphan.id, ("COMPLETED", "FAILED", "CANCELLED"), timeout=120
    )
    assert adopted.state == "COMPLETED", adopted.reason
    assert json.loads(adopted.outputs)["outputs"] == {"doubled": f"results.e{orphan.id}_doubled"}
    lost = wait_for(client, db_engine, unknown.id, ("FAILED", "COMPLETED"), timeout=30)
    assert lost.reason.startswith("the compute unit's Spark host no longer knows this run")
    never_submitted = wait_for(client, db_engine, no_run.id, ("FAILED", "COMPLETED"), timeout=30)
    assert (
        never_submitted.reason == "it is marked running but no run on its compute unit is recorded"
    )


class AnsweringHost:
    """A unit's door whose host answers its info call (the host is up) and whose unit has not
    failed."""

    def info(self) -> dict:
        return {"state": "ready"}

    def failure(self) -> str | None:
        return None


@pytest.mark.parametrize(
    "silent_for, fails", [(1.0, False), (execution_work.HOST_SILENCE_SECONDS + 1, True)]
)
def test_a_broken_connection_to_a_host_that_answers_is_a_hiccup_not_a_forgotten_run(
    silent_for, fails
):
    """Only a 404 for the run means the host lost it; a dropped connection is waited out."""
    dropped = SparkHostError("Spark host at http://127.0.0.1:1 not reachable: Server disconnected")
    if not fails:
        execution_work._check_silence(AnsweringHost(), dropped, silent_for=silent_for)
        return
    with pytest.raises(execution_work.ExecutionFailed, match="stopped answering: Spark host at"):
        execution_work._check_silence(AnsweringHost(), dropped, silent_for=silent_for)


def test_a_host_that_answers_404_for_the_run_lost_it():
    unknown = SparkHostError('Spark host answered 404: {"error": "no such run"}', 404)
    with pytest.raises(execution_work.ExecutionFailed, match="no longer knows this run"):
        execution_work._check_silence(AnsweringHost(), unknown, silent_for=0.5)


TWO_OUTPUTS = [
    {
        "name": "numbers",
        "kind": "sql",
        "code": "SELECT id, id % 7 AS bucket FROM range(0, 1000)",
        "output": True,
    },
    {
        "name": "per_bucket",
        "kind": "python",
        "output": True,
        "code": "def run(spark, numbers):\n    return numbers.groupBy('bucket').count()",
    },
]


def test_one_workflow_runs_into_two_warehouses_at_once_each_output_lands_in_its_own(
    e2e, db_engine, lakehouse
):
    app, client, user, cu_id, _ = e2e
    north, south = (
        reload(db_engine, Warehouse, register_warehouse(client, lakehouse, name))
        for name in ("north", "south")
    )
    workflow = workflow_for(db_engine, user, TWO_OUTPUTS)
    submitted = {
        warehouse.id: run(client, workflow, cu_id, warehouse.id) for warehouse in (north, south)
    }
    ids = {}
    for warehouse_id, response in submitted.items():
        assert response.status_code == 302, text(response)
        ids[warehouse_id] = int(response.headers["Location"].rsplit("/", 1)[1])
    ended = {
        warehouse_id: wait_for(
            client, db_engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED")
        )
        for warehouse_id, execution_id in ids.items()
    }
    for execution in ended.values():
        assert execution.state == "COMPLETED", execution.reason
    first, second = ended[north.id], ended[south.id]
    assert (
        first.started_at < second.ended_at and second.started_at < first.ended_at
    )  # they overlapped

    catalogs = {
        warehouse.id: independent_catalog(lakehouse, warehouse) for warehouse in (north, south)
    }
    for warehouse in (north, south):
        execution, other = ended[warehouse.id], (south if warehouse is north else north)
        own, foreign = catalogs[warehouse.id], catalogs[other.id]
        assert execution.warehouse_id == warehouse.id
        tables = [
            f"results.e{execution.id}_numbers",
            f"results.e{execution.id}_per_bucket",
            f"runtime_stats.e{execution.id}",
            f"console_logs.e{execution.id}",
        ]
        for name in tables:
            assert own.table_exists(name), (name, warehouse.name)
            assert not foreign.table_exists(name), (name, other.name)
        numbers = own.load_table(tables[0])
        rows = numbers.scan().to_arrow()
        assert sorted(rows.column("id").to_pylist()) == list(range(1000))
        per_bucket = own.load_table(tables[1]).scan().to_arrow().to_pylist()
        assert sorted((row["bucket"], row["count"]) for row in per_bucket) == [
            (bucket, len(range(bucket, 1000, 7))) for bucket in range(7)
        ]
        for name in tables[:2]:
            properties = own.load_table(name).properties
            assert {
                key: properties[key]
                for key in (
                    "lakeport.execution-id",
                    "lakeport.workflow-id",
                    "lakeport.workflow-version",
                    "lakeport.user-id",
                    "lakeport.compute-unit-id",
                    "lakeport.status",
                )
            } == {
                "lakeport.execution-id": str(execution.id),
                "lakeport.workflow-id": str(workflow.id),
                "lakeport.workflow-version": "1",
                "lakeport.user-id": str(user.id),
                "lakeport.compute-unit-id": str(cu_id),
                "lakeport.status": "complete",
            }
        assert own.load_table(tables[1]).properties["lakeport.step"] == "per_bucket"
        stats = own.load_table(tables[2]).scan().to_arrow().to_pylist()
        assert {row["step"]: row["rows_out"] for row in stats} == {"numbers": 1000, "per_bucket": 7}


def test_archiving_a_warehouse_mid_run_fails_the_execution_and_leaves_no_result(
    e2e, db_engine, lakehouse
):
    app, client, user, cu_id, _ = e2e
    warehouse = reload(
        db_engine, Warehouse, register_warehouse(client, lakehouse, "archived-mid-run")
    )
    execution_id = start_sleeping_step(client, db_engine, user, cu_id, warehouse.id)
    run_id = reload(db_engine, Execution, execution_id).run_id
    archived = client.post(
        f"/warehouses/{warehouse.id}/archive",
        data={"csrf_token": csrf(client)},
        follow_redirects=True,
    )
    assert "1 execution writing into it stopped." in text(archived)
    execution = wait_for(
        client, db_engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60
    )
    assert (execution.state, execution.reason) == (
        "FAILED",
        "the warehouse archived-mid-run was archived",
    )
    assert [step["state"] for step in json.loads(execution.progress)["steps"]] == ["cancelled"]
    # The unit stops the run and drops its unfinished result; the unit itself carries on.
    with (
        app.app_context(),
        SparkHostClient(handles.handle_of(reload(db_engine, ComputeUnit, cu_id))) as host,
    ):
        assert host.wait(run_id, timeout_s=60)["state"] == "CANCELLED"
    assert not independent_catalog(lakehouse, warehouse).table_exists(
        f"results.e{execution_id}_slow"
    )
    assert reload(db_engine, ComputeUnit, cu_id).state == "RUNNING"
    assert reload(db_engine, Execution, execution_id).state == "FAILED"  # the watcher left it so


LAST_STEP_WRITES = [
    {"name": "first", "kind": "sql", "code": "SELECT id FROM range(3)", "output": True},
    {
        "name": "last",
        "kind": "python",
        "output": True,
        "code": "def run(spark, first):\n    return first.selectExpr('id * 2 AS twice')",
    },
]


def left_statuses(catalog, execution_id: int) -> dict[str, str]:
    """`lakeport.status` of every table the execution left in the warehouse."""
    found = {}
    for namespace, names in (
        ("results", ("first", "last")),
        ("runtime_stats", ()),
        ("console_logs", ()),
    ):
        for table in [f"{namespace}.e{execution_id}_{name}" for name in names] or [
            f"{namespace}.e{execution_id}"
        ]:
            if catalog.table_exists(table):
                found[table] = catalog.load_table(table).properties["lakeport.status"]
    return found


@pytest.mark.parametrize("stop", ["cancel", "archive"])
def test_stopping_a_run_during_its_last_step_never_leaves_a_table_marked_complete(
    e2e, db_engine, lakehouse, stop
):
    """Ten runs, each stopped at another moment of its last step (its write, its end, the
    marking): the execution's final state and its tables agree every time. Only a COMPLETED
    execution has tables marked complete; the tables of any other were dropped."""
    app, client, user, cu_id, shared_warehouse_id = e2e
    workflow = workflow_for(db_engine, user, LAST_STEP_WRITES)
    with app.app_context():
        handle = handles.handle_of(reload(db_engine, ComputeUnit, cu_id))
    ends = []
    with SparkHostClient(handle) as host:
        for attempt in range(10):
            warehouse_id = (
                register_warehouse(client, lakehouse, f"stopped-{attempt}")
                if stop == "archive"
                else shared_warehouse_id
            )
            execution_id = int(
                run(client, workflow, cu_id, warehouse_id).headers["Location"].rsplit("/", 1)[1]
            )
            deadline = time.monotonic() + 60
            while not (run_id := reload(db_engine, Execution, execution_id).run_id):
                assert time.monotonic() < deadline, "the execution was not submitted"
                time.sleep(0.05)
            while (unit_run := host.run(run_id))["state"] not in (
                "COMPLETED",
                "FAILED",
                "CANCELLED",
            ) and [step["state"] for step in unit_run["progress"]["steps"]][1:] != ["running"]:
                assert time.monotonic() < deadline, unit_run
                time.sleep(0.02)
            time.sleep(attempt * 0.12)
            if stop == "cancel":
                client.post(
                    f"/executions/{execution_id}/cancel",
                    headers={"X-CSRFToken": csrf(client), "HX-Request": "true"},
                )
            else:
                client.post(
                    f"/warehouses/{warehouse_id}/archive", data={"csrf_token": csrf(client)}
                )
            execution = wait_for(
                client, db_engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60
            )
            unit_state = host.wait(run_id, timeout_s=60)["state"]
            assert (unit_state == "COMPLETED") == (execution.state == "COMPLETED"), (
                attempt,
                unit_state,
            )
            ends.append(execution.state)
            left = left_statuses(
                independent_catalog(lakehouse, reload(db_engine, Warehouse, warehouse_id)),
                execution_id,
            )
            if execution.state == "COMPLETED":
                assert set(left.values()) == {"complete"} and len(left) == 4, (attempt, left)
                assert execution.reason == ""
            else:
                # Its result tables are dropped; its stats and logs stay, never marked complete.
                assert (
                    set(left) == {f"runtime_stats.e{execution_id}", f"console_logs.e{execution_id}"}
                    and "complete" not in left.values()
                ), (attempt, execution.state, unit_state, left)
                assert (execution.state, execution.reason) == (
                    ("CANCELLED", "cancelled by its owner")
                    if stop == "cancel"
                    else ("FAILED", f"the warehouse stopped-{attempt} was archived")
                ), attempt
                assert 'data-testid="outputs-dropped"' in text(
                    client.get(f"/executions/{execution_id}")
                )
    print(f"\n{stop} during the last step, 10 runs: {ends}")
    assert set(ends) - {"COMPLETED"}, ends  # the stops did land during the runs


def test_a_python_step_sleeping_60_s_is_cancelled_within_seconds(e2e, db_engine, lakehouse):
    app, client, user, cu_id, warehouse_id = e2e
    workflow = workflow_for(
        db_engine,
        user,
        [
            {
                "name": "nap",
                "kind": "python",
                "output": True,
                "code": "import time\n\ndef run(spark):\n    time.sleep(60)\n    return spark.range(1)",
            }
        ],
    )
    execution_id = int(
        run(client, workflow, cu_id, warehouse_id).headers["Location"].rsplit("/", 1)[1]
    )
    deadline = time.monotonic() + 120
    while (
        json.loads(reload(db_engine, Execution, execution_id).progress)["steps"][0].get("state")
        != "running"
    ):
        assert time.monotonic() < deadline, "the step did not start"
        time.sleep(0.2)
    time.sleep(1)
    cancelled_at = time.monotonic()
    client.post(
        f"/executions/{execution_id}/cancel",
        headers={"X-CSRFToken": csrf(client), "HX-Request": "true"},
    )
    execution = wait_for(
        client, db_engine, execution_id, ("CANCELLED", "FAILED", "COMPLETED"), timeout=30
    )
    took = time.monotonic() - cancelled_at
    print(f"\na 60 s Python sleep: CANCELLED {took:.1f} s after the cancel")
    assert execution.state == "CANCELLED", execution.reason
    assert took < 6
    assert [step["state"] for step in json.loads(execution.progress)["steps"]] == ["cancelled"]
    catalog = independent_catalog(lakehouse, reload(db_engine, Warehouse, warehouse_id))
    assert not catalog.table_exists(f"results.e{execution_id}_nap")
    assert (
        catalog.load_table(f"console_logs.e{execution_id}").properties["lakeport.status"]
        == "cancelled"
    )


def test_after_the_units_spark_host_dies_the_next_execution_runs_on_a_new_one(e2e, db_engine):
    """The worker submits to a host it found ready before without asking it first; when that
    host is gone, the execution starts (or waits for) a new one and runs there."""
    app, client, user, cu_id, warehouse_id = e2e
    workflow = workflow_for(db_engine, user)
    first = wait_for(
        client,
        db_engine,
        int(run(client, workflow, cu_id, warehouse_id).headers["Location"].rsplit("/", 1)[1]),
        ("COMPLETED", "FAILED", "CANCELLED"),
    )
    assert first.state == "COMPLETED", first.reason
    with app.app_context():
        handle = handles.handle_of(reload(db_engine, ComputeUnit, cu_id))
    with SparkHostClient(handle, timeout=10.0) as host:
        old_app = host.info()["app_id"]
        host.probe(
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", {}, name="kill the host"
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                host.info()
            except SparkHostError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the Spark host did not die")

    second = wait_for(
        client,
        db_engine,
        int(run(client, workflow, cu_id, warehouse_id).headers["Location"].rsplit("/", 1)[1]),
        ("COMPLETED", "FAILED", "CANCELLED"),
    )
    assert second.state == "COMPLETED", second.reason
    with SparkHostClient(handle, timeout=10.0) as host:
        assert host.info()["app_id"] != old_app
    assert reload(db_engine, ComputeUnit, cu_id).state == "RUNNING"


def test_a_host_seen_ready_that_refuses_a_run_but_is_still_there_gets_no_second_submit(monkeypatch):
    """It may have taken the run before the connection broke: submitting again could run it twice."""
    submits, prepared = [], []

    class SameHostDoor:
        """The unit's door: its host was seen ready as app-1, refuses the submit, and still
        answers as app-1."""

        cu = ComputeUnit(id=7)

        def submit(self, spec):
            submits.append(spec)
            raise SparkHostError(
                "Spark host at http://127.0.0.1:1 not reachable: Server disconnected"
            )

        def ready_app(self):
            return "app-1"

        def forget_ready(self):
            pass

        def failure(self):
            return None

        def close(self):
            pass

    monkeypatch.setattr(
        execution_work,
        "_prepare",
        lambda execution_id, groundwork: (
            prepared.append(execution_id)
            or (f"spec-{execution_id}", SameHostDoor(), "app-1" if len(prepared) == 1 else None)
        ),
    )
    monkeypatch.setattr(
        execution_service,
        "load",
        lambda execution_id: Execution(id=execution_id, state="INITIALIZING"),
    )
    monkeypatch.setattr(execution_work, "_state_of", lambda execution_id: "INITIALIZING")
    monkeypatch.setattr(
        execution_work._Groundwork, "start", classmethod(lambda cls, execution: None)
    )
    with pytest.raises(
        execution_work.ExecutionFailed, match="the compute unit did not take the run: Spark host at"
    ):
        execution_work._submit_and_watch(41, None)
    assert submits == ["spec-41"] and prepared == [41, 41]


def test_the_lakeport_command_runs_a_workflow_to_its_end_and_says_so_by_its_exit_code(
    e2e, db_engine, monkeypatch
):
    """`lakeport run ... --wait` against this portal (in-process over WSGI) with a token: the live
    log, exit 0 on COMPLETED; a failing run exits 1 with its reason."""
    from click.testing import CliRunner

    from app.tokens import service as tokens
    from lakeport_client import Client, cli

    app, client, user, cu_id, warehouse_id = e2e
    with app.app_context():
        token = tokens.create(user, "cli", "run", 1).text
    monkeypatch.setattr(
        cli,
        "make_client",
        lambda: Client("http://portal.test", token, transport=httpx.WSGITransport(app=app)),
    )
    monkeypatch.setattr(cli, "POLL_SECONDS", 0.2)
    good = workflow_for(
        db_engine,
        user,
        [
            {
                "name": "said",
                "kind": "python",
                "output": True,
                "code": "def run(spark):\n    print('hello from the cli run')\n"
                "    return spark.range(3)",
            }
        ],
    )
    ran = CliRunner().invoke(
        cli.main,
        ["run", good.name, "--unit", str(cu_id), "--warehouse", str(warehouse_id), "--wait"],
    )
    assert ran.exit_code == 0, ran.output
    assert "COMPLETED" in ran.output.splitlines()[-1] and "hello from the cli run" in ran.output
    bad = workflow_for(
        db_engine,
        user,
        [
            {
                "name": "broken",
                "kind": "python",
                "output": True,
                "code": "def run(spark):\n    raise ValueError('no such luck')",
            }
        ],
    )
    failed = CliRunner().invoke(
        cli.main,
        ["run", bad.name, "--unit", str(cu_id), "--warehouse", str(warehouse_id), "--wait"],
    )
    assert (
        failed.exit_code == 1 and "FAILED" in failed.output and "no such luck" in failed.output
    ), failed.output


def test_a_compute_unit_that_dies_mid_run_fails_the_execution_with_that_reason(e2e, db_engine):
    """Last in this module: it kills the unit."""
    app, client, user, cu_id, warehouse_id = e2e
    execution_id = start_sleeping_step(client, db_engine, user, cu_id, warehouse_id)
    with app.app_context():
        head = handles.handle_of(reload(db_engine, ComputeUnit, cu_id)).details["nodes"][0]
    os.kill(head["pid"], signal.SIGKILL)
    execution = wait_for(
        client, db_engine, execution_id, ("FAILED", "CANCELLED", "COMPLETED"), timeout=60
    )
    assert execution.state == "FAILED"
    assert execution.reason.startswith("the compute unit stopped: head node"), execution.reason
    assert reload(db_engine, ComputeUnit, cu_id).state == "FAILED"
