"""The API on real storage and a real catalog: registering a warehouse (its keys never come
back), its tables, archiving it; an execution's results page by page, as CSV, its logs and
lineage; saving a workflow version. Every answer is checked against the OpenAPI document."""

from __future__ import annotations

import json
import secrets
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from sqlmodel import Session
from sqlmodel import text as sql

from app.models import Execution, Query, QueryState, Warehouse
from devstack.seaweedfs import TEST_USER_KEYS
from tests.factories import (
    Api,
    execution_row,
    independent_catalog,
    reload,
    token_for,
    unit_row,
    workflow_for,
)


@pytest.fixture
def app(lakehouse_app):
    return lakehouse_app


def storage(lakehouse, name: str, **changes) -> dict:
    keys = TEST_USER_KEYS["alice"]
    return {
        "name": name,
        "bucket": keys.bucket,
        "key_prefix": f"tests/api-{name}-{secrets.token_hex(3)}",
        "endpoint": lakehouse.s3_endpoint,
        "region": "us-east-1",
        "path_style_access": True,
        "flavor": "s3-compat",
        "access_key_id": keys.access_key_id,
        "secret_access_key": keys.secret_access_key,
        **changes,
    }


def test_a_warehouse_registered_tested_browsed_and_archived_through_the_api(
    app, client, db_engine, lakehouse, newcomer
):
    api = Api(client, token_for(app, newcomer))
    body = storage(lakehouse, "api-lake")
    tested = api.call("POST", "/api/v1/warehouses/test-connection", body)
    assert tested.status_code == 200 and tested.get_json()["ok"] is True
    assert {check["name"] for check in tested.get_json()["checks"]} >= {"write", "read", "delete"}
    wrong = api.call(
        "POST", "/api/v1/warehouses/test-connection", {**body, "secret_access_key": "wrong" * 8}
    )
    assert wrong.status_code == 200 and wrong.get_json()["ok"] is False
    bad = api.call("POST", "/api/v1/warehouses", {**body, "bucket": "Not_A_Bucket"})
    assert bad.status_code == 400 and bad.get_json()["field"] == "bucket"
    made = api.call("POST", "/api/v1/warehouses", body)
    assert made.status_code == 201, made.get_json()
    secret = body["secret_access_key"]
    assert secret not in made.get_data(as_text=True)
    with Session(db_engine) as db:
        dump = " ".join(str(row) for row in db.exec(sql("SELECT * FROM warehouses")).all())
    assert secret not in dump
    warehouse = reload(db_engine, Warehouse, made.get_json()["id"])
    assert api.call("GET", f"/api/v1/warehouses/{warehouse.id}/tables").get_json() == []
    catalog = independent_catalog(lakehouse, warehouse)
    catalog.create_namespace("sales")
    schema = pa.schema([("id", pa.int64()), ("amount", pa.float64())])
    catalog.create_table("sales.orders", schema=schema).append(
        pa.table({"id": [1, 2], "amount": [9.5, 3.0]})
    )
    assert api.call("GET", f"/api/v1/warehouses/{warehouse.id}/tables").get_json() == [
        {"namespace": "sales", "name": "orders"}
    ]
    table = api.call("GET", f"/api/v1/warehouses/{warehouse.id}/tables/sales.orders").get_json()
    assert [column["name"] for column in table["columns"]] == ["id", "amount"]
    assert table["total_records"] == 2 and len(table["snapshots"]) == 1
    assert (
        api.call("GET", f"/api/v1/warehouses/{warehouse.id}/tables/sales.nothing").status_code
        == 404
    )
    archived = api.call("POST", f"/api/v1/warehouses/{warehouse.id}/archive")
    assert archived.status_code == 202 and archived.get_json()["status"] == "archived"
    mistyped = api.call(
        "POST", f"/api/v1/warehouses/{warehouse.id}/purge", {"confirm_name": "api-lak"}
    )
    assert mistyped.status_code == 400 and mistyped.get_json()["field"] == "confirm_name"
    purged = api.call(
        "POST", f"/api/v1/warehouses/{warehouse.id}/purge", {"confirm_name": "api-lake"}
    )
    assert purged.status_code == 200 and purged.get_json()["tables_dropped"] == 1
    assert api.call("GET", f"/api/v1/warehouses/{warehouse.id}").status_code == 404


def test_an_executions_results_csv_logs_and_lineage(app, client, db_engine, lakehouse, newcomer):
    api = Api(client, token_for(app, newcomer))
    made = api.call("POST", "/api/v1/warehouses", storage(lakehouse, "api-results"))
    warehouse = reload(db_engine, Warehouse, made.get_json()["id"])
    workflow, cu = (
        workflow_for(db_engine, newcomer),
        unit_row(db_engine, newcomer, state="TERMINATED"),
    )
    lineage = {"read": [{"table": "datasets.people", "snapshot_id": 42}], "wrote": []}
    execution = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="COMPLETED",
        run_id="r",
        lineage=json.dumps(lineage),
    )
    catalog = independent_catalog(lakehouse, warehouse)
    for namespace in ("results", "console_logs"):
        catalog.create_namespace(namespace)
    schema = pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("at", pa.timestamp("us", tz="UTC"))]
    )
    moment = datetime(2026, 11, 25, 3, 0, tzinfo=timezone.utc)
    catalog.create_table(f"results.e{execution.id}_named", schema=schema).append(
        pa.table(
            {"id": list(range(7)), "name": [f"n{i}" for i in range(7)], "at": [moment] * 7},
            schema=schema,
        )
    )
    log_schema = pa.schema(
        [
            ("ts", pa.timestamp("us", tz="UTC")),
            ("level", pa.string()),
            ("step", pa.string()),
            ("message", pa.string()),
        ]
    )
    catalog.create_table(f"console_logs.e{execution.id}", schema=log_schema).append(
        pa.table(
            {
                "ts": [moment, moment],
                "level": ["INFO", "ERROR"],
                "step": ["named", "named"],
                "message": ["started", "boom"],
            },
            schema=log_schema,
        )
    )
    with Session(db_engine) as db:
        db.get(Execution, execution.id).outputs = json.dumps(
            {"outputs": {"named": f"results.e{execution.id}_named"}}
        )
        db.commit()

    got = api.call("GET", f"/api/v1/executions/{execution.id}").get_json()
    assert got["outputs"] == {"named": f"results.e{execution.id}_named"}
    first = api.call(
        "GET", f"/api/v1/executions/{execution.id}/results/named?page=1&size=5"
    ).get_json()
    assert (first["total_rows"], first["pages"], len(first["rows"])) == (7, 2, 5)
    assert first["columns"] == ["id", "name", "at"] and first["rows"][0][2].startswith(
        "2026-11-25T03:00"
    )
    second = api.call(
        "GET", f"/api/v1/executions/{execution.id}/results/named?page=2&size=5"
    ).get_json()
    assert [row[0] for row in second["rows"]] == [5, 6]
    assert (
        api.call("GET", f"/api/v1/executions/{execution.id}/results/named?size=501").status_code
        == 400
    )
    assert api.call("GET", f"/api/v1/executions/{execution.id}/results/other").status_code == 404
    csv = api.call("GET", f"/api/v1/executions/{execution.id}/results/named/csv")
    assert (
        csv.content_type.startswith("text/csv")
        and csv.get_data(as_text=True).splitlines()[0] == "id,name,at"
    )
    assert len(csv.get_data(as_text=True).splitlines()) == 8
    errors = api.call("GET", f"/api/v1/executions/{execution.id}/logs?level=ERROR").get_json()
    assert errors["total_rows"] == 1 and "boom" in errors["rows"][0]
    assert api.call("GET", f"/api/v1/executions/{execution.id}/lineage").get_json() == {
        **lineage,
        "changes": [],  # no incremental read
    }


def test_saving_a_workflow_version_gets_the_editors_checks(app, client, db_engine, newcomer):
    api = Api(client, token_for(app, newcomer))
    workflow = workflow_for(db_engine, newcomer)
    step = {"name": "doubled", "kind": "sql", "code": "SELECT 2 AS two", "output": True}
    saved = api.call(
        "POST", f"/api/v1/workflows/{workflow.id}/versions", {"base_version": 1, "steps": [step]}
    )
    assert saved.status_code == 201 and saved.get_json()["latest_version"] == 2
    assert saved.get_json()["steps"] == [step]
    stale = api.call(
        "POST", f"/api/v1/workflows/{workflow.id}/versions", {"base_version": 1, "steps": [step]}
    )
    assert stale.status_code == 409 and stale.get_json()["field"] == "base_version"
    broken = api.call(
        "POST",
        f"/api/v1/workflows/{workflow.id}/versions",
        {"base_version": 2, "steps": [{**step, "code": "SELECT (1"}]},
    )
    assert broken.status_code == 400 and broken.get_json()["field"] == "steps.0.code"
    unnamed = api.call(
        "POST",
        f"/api/v1/workflows/{workflow.id}/versions",
        {"base_version": 2, "steps": [{**step, "name": "Bad Name"}]},
    )
    assert unnamed.status_code == 400 and unnamed.get_json()["field"] == "steps.0.name"
    assert (
        api.call(
            "POST", f"/api/v1/workflows/{workflow.id}/versions", {"base_version": 2, "steps": []}
        ).get_json()["field"]
        == "steps"
    )
    assert api.call("DELETE", f"/api/v1/workflows/{workflow.id}").status_code == 204
    assert api.call("GET", f"/api/v1/workflows/{workflow.id}").status_code == 404


def test_every_api_route_keeps_another_users_rows_and_every_secret_to_itself(
    app, client, db_engine, lakehouse, newcomer
):
    """Walk every route of the OpenAPI document: with the other user's ids each answers 404 (or
    a 400 for a body it refuses before looking), and nothing any route answers holds a secret."""
    from tests.factories import make_user, register_warehouse, sign_in_as

    owner_token = token_for(app, newcomer)
    owner_api = Api(client, owner_token)
    body = storage(lakehouse, "api-owned")
    warehouse = reload(
        db_engine, Warehouse, owner_api.call("POST", "/api/v1/warehouses", body).get_json()["id"]
    )
    workflow, cu = workflow_for(db_engine, newcomer), unit_row(db_engine, newcomer)
    execution = execution_row(
        db_engine, newcomer, workflow, warehouse, cu, state="COMPLETED", run_id="r"
    )
    with Session(db_engine, expire_on_commit=False) as db:
        query = Query(
            owner_id=newcomer.id,
            warehouse_id=warehouse.id,
            warehouse_name=warehouse.name,
            compute_unit_id=cu.id,
            sql="SELECT 1 AS n",
            statement="SELECT",
            state=QueryState.COMPLETED,
            row_count=1,
            result=json.dumps({"columns": [{"name": "n", "type": "int"}], "rows": [[1]]}),
        )
        db.add(query)
        db.commit()
    theirs = {
        "query_id": query.id,
        "warehouse_id": warehouse.id,
        "cu_id": cu.id,
        "workflow_id": workflow.id,
        "execution_id": execution.id,
        "name": "results.x",
        "step": "x",
    }
    stranger = make_user(db_engine)
    stranger_client = app.test_client()
    sign_in_as(stranger_client, stranger)
    register_warehouse(stranger_client, lakehouse, "strangers")
    stranger_api = Api(app.test_client(), token_for(app, stranger))
    document = client.get("/api/v1/openapi.json").get_json()
    secrets_ = [
        body["secret_access_key"],
        owner_token,
        app.config["SECRET_KEY"],
        app.config["OIDC_CLIENT_SECRET"],
        app.config["LAKEKEEPER_CLIENT_SECRET"],
    ]
    walked = 0
    for path, operations in document["paths"].items():
        if "{" not in path:
            continue
        concrete = path
        for name, value in theirs.items():
            concrete = concrete.replace("{" + name + "}", str(value))
        assert "{" not in concrete, path
        for method in operations:
            answer = stranger_api.call(method.upper(), concrete, {} if method == "post" else None)
            assert answer.status_code in (404, 400), (method, concrete, answer.status_code)
            walked += 1
            mine = (
                owner_api.call(method.upper(), concrete, {} if method == "post" else None)
                if method == "get"
                else None
            )
            for answer_text in (
                answer.get_data(as_text=True),
                mine.get_data(as_text=True) if mine else "",
            ):
                assert not [secret for secret in secrets_ if secret and secret in answer_text], (
                    method,
                    concrete,
                )
    assert walked >= 14
    listed = owner_api.call("GET", "/api/v1/warehouses").get_data(as_text=True)
    assert not [secret for secret in secrets_ if secret in listed]
