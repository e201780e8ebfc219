"""Lineage, re-runs on the same inputs and comparisons through the portal (no compute unit:
the unit's side is tests/test_lineage.py). Tables are written with pyiceberg into a real
warehouse, laid out as compute/run/pipeline.py lays them out; except the tests named `on_a_unit`,
which run executions on a real local unit (heavy: under `flock /tmp/lakeport-heavy.lock`)."""

from __future__ import annotations

import json
import re
import time

import pyarrow as pa
import pytest
from sqlmodel import Session

from app.executions import run_spec
from app.models import Execution, Warehouse, WorkflowVersion
from tests.factories import (
    csrf,
    execution_row,
    independent_catalog,
    make_user,
    register_warehouse,
    reload,
    run,
    text,
    unit_row,
    wait_for,
    warehouse_row,
    workflow_for,
)


@pytest.fixture
def app(lakehouse_app):
    return lakehouse_app


LINEAGE = {
    "read": [
        {
            "table": "datasets.people",
            "snapshot_id": 4242,
            "snapshot_at_ms": 1_767_268_800_000,
            "total_records": 3,
            "total_files": 1,
            "total_bytes": 900,
        }
    ],
    "wrote": [
        {
            "table": "results.e1_named",
            "step": "named",
            "snapshot_id": 777,
            "snapshot_at_ms": 1_767_268_860_000,
            "added_records": 3,
            "added_files": 1,
            "added_bytes": 1200,
        }
    ],
}


def test_the_page_shows_lineage_and_a_rerun_is_pinned_to_what_was_read(
    app, client, newcomer, db_engine
):
    workflow = workflow_for(db_engine, newcomer)
    warehouse, cu = warehouse_row(db_engine, newcomer), unit_row(db_engine, newcomer)
    first = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="COMPLETED",
        run_id="r",
        lineage=json.dumps(LINEAGE),
    )

    page = text(client.get(f"/executions/{first.id}"))
    read = re.search(r'data-testid="lineage-read">(.*?)</table>', page, re.S).group(1)
    assert (
        "datasets.people" in read
        and ">4242<" in read
        and "2026-01-01 12:00:00" in read
        and ">900<" in read
    )
    wrote = re.search(r'data-testid="lineage-wrote">(.*?)</table>', page, re.S).group(1)
    assert "results.e1_named" in wrote and ">777<" in wrote and "1,200" in wrote
    assert 'data-testid="rerun"' in page

    response = client.post(f"/executions/{first.id}/rerun", data={"csrf_token": csrf(client)})
    assert response.status_code == 302, text(response)
    again_id = int(response.headers["Location"].rsplit("/", 1)[1])
    again = reload(db_engine, Execution, again_id)
    assert again.state == "QUEUED" and again.workflow_version_id == first.workflow_version_id
    assert (again.compute_unit_id, again.warehouse_id) == (cu.id, warehouse.id)
    assert json.loads(again.pinned_to) == {
        "execution_id": first.id,
        "tables": {"datasets.people": 4242},
    }
    # What the unit receives: the pins, in the execution spec.
    version = reload(db_engine, WorkflowVersion, again.workflow_version_id)
    with app.app_context():
        spec = run_spec.execution_spec(again, workflow, version, newcomer, cu, warehouse, "token")
    assert spec.pinned == {"datasets.people": 4242}
    shown = text(client.get(f"/executions/{again_id}"))
    pinned = re.search(r'data-testid="pinned-to">(.*?)</article>', shown, re.S).group(1)
    assert f"#{first.id}" in pinned and "datasets.people" in pinned and "4242" in pinned
    # Not completed: refused, nothing recorded.
    refused = client.post(f"/executions/{again_id}/rerun", data={"csrf_token": csrf(client)})
    assert refused.status_code == 302 and refused.headers["Location"].endswith(
        f"/executions/{again_id}"
    )
    # Completed before lineage was recorded: nothing to pin to, refused.
    older = execution_row(
        db_engine, newcomer, workflow, warehouse, cu, state="COMPLETED", run_id="r"
    )
    assert 'data-testid="rerun"' not in text(client.get(f"/executions/{older.id}"))
    refused = client.post(
        f"/executions/{older.id}/rerun", data={"csrf_token": csrf(client)}, follow_redirects=True
    )
    assert "recorded no lineage" in text(refused)
    assert reload(db_engine, Execution, older.id + 1) is None


def test_rerun_and_compare_answer_404_to_another_user(client, newcomer, db_engine):
    owner = make_user(db_engine)
    workflow, warehouse, cu = (
        workflow_for(db_engine, owner),
        warehouse_row(db_engine, owner),
        unit_row(db_engine, owner),
    )
    theirs = [
        execution_row(
            db_engine,
            owner,
            workflow,
            warehouse,
            cu,
            state="COMPLETED",
            run_id="r",
            lineage=json.dumps(LINEAGE),
        )
        for _ in range(2)
    ]
    mine_workflow = workflow_for(db_engine, newcomer)
    mine_warehouse, mine_cu = warehouse_row(db_engine, newcomer), unit_row(db_engine, newcomer)
    mine = execution_row(
        db_engine, newcomer, mine_workflow, mine_warehouse, mine_cu, state="COMPLETED", run_id="r"
    )
    assert (
        client.post(
            f"/executions/{theirs[0].id}/rerun", data={"csrf_token": csrf(client)}
        ).status_code
        == 404
    )
    for a, b in ((theirs[0].id, theirs[1].id), (mine.id, theirs[0].id), (theirs[0].id, mine.id)):
        for path in (f"/executions/compare?a={a}&b={b}", f"/executions/compare/rows?a={a}&b={b}"):
            assert client.get(path).status_code == 404, path
    assert client.get(f"/executions/compare?a={mine.id}").status_code == 404
    other = execution_row(
        db_engine,
        newcomer,
        workflow_for(db_engine, newcomer),
        mine_warehouse,
        mine_cu,
        state="COMPLETED",
        run_id="r",
    )
    assert (
        client.get(f"/executions/compare?a={mine.id}&b={other.id}").status_code == 422
    )  # other workflows


def test_a_comparison_without_a_running_unit_shows_counts_and_schemas(
    client, newcomer, db_engine, lakehouse
):
    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "compare"))
    workflow, cu = (
        workflow_for(db_engine, newcomer),
        unit_row(db_engine, newcomer, state="TERMINATED"),
    )
    a, b = (
        execution_row(db_engine, newcomer, workflow, warehouse, cu, state="COMPLETED", run_id="r")
        for _ in range(2)
    )
    catalog = independent_catalog(lakehouse, warehouse)
    catalog.create_namespace("results")
    first = pa.schema([("id", pa.int64()), ("name", pa.string())])
    second = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
    catalog.create_table(f"results.e{a.id}_named", schema=first).append(
        pa.table({"id": [1, 2, 3], "name": ["ann", "bob", "cy"]}, schema=first)
    )
    catalog.create_table(f"results.e{b.id}_named", schema=second).append(
        pa.table({"id": [1, 4], "name": ["ann", "dee"], "score": [1.0, 2.0]}, schema=second)
    )
    with Session(db_engine) as db:
        for execution in (a, b):
            db.get(Execution, execution.id).outputs = json.dumps(
                {"outputs": {"named": f"results.e{execution.id}_named"}}
            )
        db.commit()

    page = text(client.get(f"/executions/compare?a={a.id}&b={b.id}"))
    row = re.search(r'<tr data-output="named">(.*?)</tr>', page, re.S).group(1)
    assert re.search(r'data-testid="rows-a">3<', row) and re.search(r'data-testid="rows-b">2<', row)
    assert "column score only in B (double)" in row
    assert 'hx-post="/executions/compare/rows?' in page  # the rows are asked for as the page loads
    rows = text(
        client.post(
            f"/executions/compare/rows?a={a.id}&b={b.id}",
            headers={"HX-Request": "true", "X-CSRFToken": csrf(client)},
        )
    )
    assert 'data-testid="compare-no-unit"' in rows and "No compute unit of yours is running" in rows
    detail = text(client.get(f"/executions/{a.id}"))
    assert 'data-testid="compare-form"' in detail and f'value="{b.id}"' in detail


SCORES = pa.schema([("id", pa.int64()), ("score", pa.int64())])
KEPT = [
    {
        "name": "kept",
        "kind": "sql",
        "output": True,
        "code": "SELECT id, score FROM datasets.scores WHERE score > 1",
    }
]


def executed(client, db_engine, response) -> Execution:
    assert response.status_code == 302, text(response)
    execution = wait_for(
        client,
        db_engine,
        int(response.headers["Location"].rsplit("/", 1)[1]),
        ("COMPLETED", "FAILED", "CANCELLED"),
    )
    assert execution.state == "COMPLETED", execution.reason
    return execution


def compared_rows(client, a: Execution, b: Execution) -> str:
    """Ask for the differing rows as the page does, and poll the partial until the worker has them."""
    url = f"/executions/compare/rows?a={a.id}&b={b.id}"
    rows = text(client.post(url, headers={"HX-Request": "true", "X-CSRFToken": csrf(client)}))
    deadline = time.monotonic() + 120
    while 'hx-trigger="every 1s"' in rows:
        assert time.monotonic() < deadline, rows
        time.sleep(0.5)
        rows = text(client.get(url, headers={"HX-Request": "true"}))
    return rows


def test_on_a_unit_lineage_pinned_rerun_and_comparison_through_the_portal(
    e2e, db_engine, lakehouse
):
    app, client, user, cu_id, warehouse_id = e2e
    catalog = independent_catalog(lakehouse, reload(db_engine, Warehouse, warehouse_id))
    catalog.create_namespace_if_not_exists("datasets")
    catalog.create_table("datasets.scores", schema=SCORES).append(
        pa.table({"id": [1, 2, 3], "score": [5, 1, 7]}, schema=SCORES)
    )
    read_at = catalog.load_table("datasets.scores").current_snapshot().snapshot_id
    workflow = workflow_for(db_engine, user, KEPT)

    first = executed(client, db_engine, run(client, workflow, cu_id, warehouse_id))
    lineage = json.loads(first.lineage)
    assert [(entry["table"], entry["snapshot_id"]) for entry in lineage["read"]] == [
        ("datasets.scores", read_at)
    ]
    result = catalog.load_table(f"results.e{first.id}_kept")
    assert [
        (entry["table"], entry["snapshot_id"], entry["added_records"]) for entry in lineage["wrote"]
    ] == [(f"results.e{first.id}_kept", result.current_snapshot().snapshot_id, 2)]
    page = text(client.get(f"/executions/{first.id}"))
    assert re.search(
        rf'data-table="datasets.scores">.*?data-testid="snapshot-id">{read_at}<', page, re.S
    )

    catalog.load_table("datasets.scores").overwrite(
        pa.table({"id": [1, 4], "score": [5, 9]}, schema=SCORES)
    )
    pinned = executed(
        client,
        db_engine,
        client.post(f"/executions/{first.id}/rerun", data={"csrf_token": csrf(client)}),
    )
    assert json.loads(pinned.pinned_to) == {
        "execution_id": first.id,
        "tables": {"datasets.scores": read_at},
    }
    assert [entry["snapshot_id"] for entry in json.loads(pinned.lineage)["read"]] == [read_at]
    fresh = executed(client, db_engine, run(client, workflow, cu_id, warehouse_id))

    def kept(execution):
        return sorted(
            catalog.load_table(f"results.e{execution.id}_kept").scan().to_arrow().to_pylist(),
            key=lambda row: row["id"],
        )

    assert kept(pinned) == kept(first) == [{"id": 1, "score": 5}, {"id": 3, "score": 7}]
    assert kept(fresh) == [{"id": 1, "score": 5}, {"id": 4, "score": 9}]

    compared = compared_rows(client, first, fresh)
    only_a = re.search(r'data-testid="only-in-a">(.*?)</table>', compared, re.S).group(1)
    only_b = re.search(r'data-testid="only-in-b">(.*?)</table>', compared, re.S).group(1)
    assert re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td></tr>", only_a) == [("3", "7")]
    assert re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td></tr>", only_b) == [("4", "9")]
    assert 'data-state="done"' in compared_rows(client, first, pinned)
