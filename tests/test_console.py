"""The SQL console without a unit: the read-only check of a statement (sqlglot), the Query page and
the API through the Flask test client (whose query it is, who may write, cancel, results as the
worker stored them, CSV), the editor's completion (and once on the dev catalog), and what the
worker keeps of a unit's answer. The console on a real unit is tests/test_console_unit.py."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from app.models import (
    AuditEvent,
    Query,
    QueryState,
    WarehouseShare,
    Workflow,
    WorkflowVersion,
    utcnow,
)
from compute.run.query import READ, WRITE, StatementRefused, check_statement
from tests.factories import (
    Api,
    add,
    csrf,
    make_user,
    reload,
    share,
    sign_in_as,
    token_for,
    unit_row,
    update_row,
    warehouse_row,
)

# --------------------------------------------------------------------------- the parser's check


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM tpch.lineitem",
        "select l_returnflag, count(*) from tpch.lineitem group by 1;",
        "WITH big AS (SELECT * FROM datasets.orders WHERE amount > 10) SELECT * FROM big",
        "SELECT 1 UNION ALL SELECT 2",
        "SELECT * FROM tpch.orders VERSION AS OF 42",
        "SHOW TABLES IN tpch",
        "DESCRIBE tpch.orders",
        "VALUES (1, 2)",
        "-- a comment\nSELECT 1 -- and another",
    ],
)
def test_a_read_passes_the_read_only_check(sql):
    statement = check_statement(sql, READ)
    assert not statement.writes and not statement.explain


@pytest.mark.parametrize(
    "sql, name",
    [
        ("INSERT INTO datasets.orders VALUES (1, 2)", "INSERT INTO"),
        ("insert overwrite datasets.orders select * from datasets.orders", "INSERT OVERWRITE"),
        ("CREATE TABLE datasets.copy AS SELECT * FROM datasets.orders", "CREATE TABLE"),
        ("CREATE OR REPLACE TABLE datasets.copy AS SELECT 1", "CREATE OR REPLACE TABLE"),
        ("DROP TABLE datasets.orders", "DROP TABLE"),
        ("ALTER TABLE datasets.orders ADD COLUMN note string", "ALTER TABLE"),
        (
            "MERGE INTO datasets.orders t USING datasets.more s ON t.id = s.id "
            "WHEN MATCHED THEN DELETE",
            "MERGE INTO",
        ),
        ("DELETE FROM datasets.orders WHERE id = 1", "DELETE"),
        ("UPDATE datasets.orders SET amount = 0", "UPDATE"),
        ("CALL system.expire_snapshots(table => 'datasets.orders')", "CALL"),
        ("TRUNCATE TABLE datasets.orders", "TRUNCATE TABLE"),
        ("  /* quiet */ drop table datasets.orders;", "DROP TABLE"),
        ("EXPLAIN INSERT INTO datasets.orders SELECT 1, 2", "INSERT INTO"),
    ],
)
def test_a_write_in_read_mode_is_refused_with_the_statement_named(sql, name):
    with pytest.raises(StatementRefused, match=f"^{name} writes, and this console is read-only"):
        check_statement(sql, READ)
    if not sql.startswith("EXPLAIN"):
        assert check_statement(sql, WRITE).writes


@pytest.mark.parametrize(
    "sql, reason",
    [
        ("SELECT 1; DROP TABLE datasets.orders", "one statement at a time"),
        ("", "no statement"),
        ("SELECT FROM WHERE (", "not Spark SQL"),
        ("SET spark.sql.catalog.other = x", "change the unit's session"),
        ("ADD JAR /tmp/evil.jar", "change the unit's session"),
        ("CACHE TABLE datasets.orders", "change the unit's session"),
        ("USE other_catalog", "change the unit's session"),
        ("CREATE FUNCTION f AS 'com.example.F'", "functions reach past the query"),
    ],
)
def test_what_the_console_never_runs_is_refused_in_either_mode(sql, reason):
    for mode in (READ, WRITE):
        with pytest.raises(StatementRefused, match=reason):
            check_statement(sql, mode)


def test_explain_is_a_read_whose_answer_is_the_plan():
    statement = check_statement("EXPLAIN EXTENDED SELECT * FROM tpch.orders", READ)
    assert (statement.explain, statement.writes, statement.name) == (True, False, "EXPLAIN SELECT")
    assert statement.tables == ("tpch.orders",)


# --------------------------------------------------------------------------- pages and the API


@pytest.fixture
def alice(client, db_engine):
    """A user with a warehouse and a running unit, signed in to `client`."""
    user = make_user(db_engine)
    sign_in_as(client, user)
    return user, warehouse_row(db_engine, user), unit_row(db_engine, user)


def post_query(client, warehouse, cu, sql: str, mode: str = READ, **headers):
    return client.post(
        "/console/queries",
        data={
            "warehouse_id": warehouse.id,
            "compute_unit_id": cu.id,
            "mode": mode,
            "sql-code": sql,
            "csrf_token": csrf(client),
        },
        headers={"HX-Request": "true", **headers},
    )


def queries_of(db_engine, user) -> list[Query]:
    with Session(db_engine) as db:
        return list(db.exec(select(Query).where(Query.owner_id == user.id)))


def test_the_bounds_are_settings_within_what_a_unit_s_answer_carries(app):
    from app.config import Config
    from app.console import service
    from compute.run.query import MAX_BYTES_CARRIED

    with app.app_context():
        assert service.bounds() == (10_000, 12 * 2**20) == (10_000, MAX_BYTES_CARRIED)
        app.config.update(CONSOLE_MAX_ROWS=10**9, CONSOLE_MAX_BYTES=64 * 2**20)
        assert service.bounds() == (100_000, MAX_BYTES_CARRIED)  # what a unit's answer carries
    # The portal refuses to start with a bound it cannot keep, and says which and why.
    base = {"LAKEPORT_SECRET_KEY": "k" * 32, "LAKEPORT_OIDC_CLIENT_SECRET": "s"}
    for setting, value, reason in (
        ("LAKEPORT_CONSOLE_MAX_BYTES", str(64 * 2**20), r"within 1024\.\.12582912 \(12 MiB\)"),
        ("LAKEPORT_CONSOLE_MAX_BYTES", "100", "within 1024"),
        ("LAKEPORT_CONSOLE_MAX_ROWS", "100001", r"within 1\.\.100000"),
        ("LAKEPORT_CONSOLE_MAX_ROWS", "0", r"within 1\.\.100000"),
    ):
        with pytest.raises(ValueError, match=f"{setting}: {reason}"):
            Config.from_env({**base, setting: value}).validate()
    Config.from_env({**base, "LAKEPORT_CONSOLE_MAX_BYTES": str(MAX_BYTES_CARRIED)}).validate()


def test_the_page_states_both_bounds(client, alice):
    page = " ".join(client.get("/console/").get_data(as_text=True).split())
    assert "at most 10,000 rows or 12 MiB of them come back" in page


def test_the_query_page_has_the_editor_form_with_labels_and_a_nav_link(client, alice):
    page = client.get("/console/").get_data(as_text=True)
    assert 'href="/console/"' in page and ">Query</a>" in page
    for label in ('for="query-warehouse"', 'for="query-unit"', "<legend>Mode</legend>"):
        assert label in page
    assert 'class="code"' in page and 'name="sql-code"' in page and "vendor/editor.js" in page
    assert alice[1].name in page and alice[2].name in page
    assert "style=" not in page.replace("data-style-nonce", "")


def test_a_query_is_recorded_queued_and_its_page_polls(client, db_engine, alice):
    user, warehouse, cu = alice
    response = post_query(client, warehouse, cu, "SELECT * FROM tpch.orders")
    assert response.status_code == 200, response.get_data(as_text=True)
    (query,) = queries_of(db_engine, user)
    assert (query.state, query.mode, query.statement) == (QueryState.QUEUED, READ, "SELECT")
    assert response.headers["HX-Redirect"] == f"/console/?query={query.id}"
    # A young query is asked for again at once, on the page and after (its request is held).
    page = client.get(f"/console/?query={query.id}").get_data(as_text=True)
    assert 'hx-trigger="load delay:0s"' in page
    live = client.get(f"/console/queries/{query.id}", headers={"HX-Request": "true"})
    text = live.get_data(as_text=True)
    assert 'hx-trigger="load delay:0s"' in text and 'data-testid="cancel-query"' in text
    again = client.get(
        f"/console/queries/{query.id}",
        headers={"HX-Request": "true", "If-None-Match": live.headers["ETag"]},
    )
    assert again.status_code == 304
    update_row(db_engine, Query, query.id, created_at=query.created_at - timedelta(seconds=60))
    older = client.get(f"/console/queries/{query.id}", headers={"HX-Request": "true"})
    assert 'hx-trigger="load delay:3s"' in older.get_data(as_text=True)  # then as others poll
    completed(db_engine, query.id, [["a", 1]])
    ended = client.get(f"/console/queries/{query.id}", headers={"HX-Request": "true"})
    text = ended.get_data(as_text=True)
    assert 'hx-trigger="load' not in text  # it stops polling
    assert 'id="query-history" data-testid="query-history" hx-swap-oob="true"' in text


def test_the_statement_is_checked_as_it_is_typed_with_line_and_column(client, alice):
    def check(sql: str, mode: str = READ) -> str:
        return client.post(
            "/console/check",
            data={"sql-code": sql, "mode": mode, "csrf_token": csrf(client)},
            headers={"HX-Request": "true"},
        ).get_data(as_text=True)

    assert "line 2, column" in check("SELECT a,\nFROM WHERE (")
    assert "DROP TABLE writes" in check("DROP TABLE a.b")
    assert 'id="error-sql"' in check("DROP TABLE a.b", WRITE)
    assert "Refused" not in check("DROP TABLE a.b", WRITE)
    assert "Refused" not in check("SELECT * FROM a.b")


def test_a_write_in_read_mode_is_refused_at_the_request_and_nothing_is_queued(
    client, db_engine, alice
):
    user, warehouse, cu = alice
    response = post_query(client, warehouse, cu, "DROP TABLE datasets.orders")
    assert response.status_code == 422
    assert "DROP TABLE writes, and this console is read-only" in response.get_data(as_text=True)
    assert queries_of(db_engine, user) == []


def test_a_write_mode_statement_is_queued_and_audited(client, db_engine, alice):
    user, warehouse, cu = alice
    sql = "INSERT INTO datasets.orders VALUES (5, 50)"
    assert post_query(client, warehouse, cu, sql, WRITE).status_code == 200
    (query,) = queries_of(db_engine, user)
    assert (query.mode, query.statement) == (WRITE, "INSERT INTO")
    with Session(db_engine) as db:
        events = db.exec(
            select(AuditEvent).where(
                AuditEvent.action == "query.write", AuditEvent.object_id == str(query.id)
            )
        ).all()
    assert len(events) == 1 and events[0].actor_id == user.id
    detail = json.loads(events[0].detail)
    assert (detail["statement"], detail["warehouse_id"], detail["sql"]) == (
        "INSERT INTO",
        warehouse.id,
        sql,
    )


def test_a_read_sharee_may_query_but_never_write(client, db_engine, alice, app):
    owner, warehouse, _ = alice
    bob = make_user(db_engine)
    add(db_engine, WarehouseShare(warehouse_id=warehouse.id, user_id=bob.id, level="read"))
    bobs_unit = unit_row(db_engine, bob)
    bobs = app.test_client()
    sign_in_as(bobs, bob)
    assert warehouse.name in bobs.get("/console/").get_data(as_text=True)
    refused = post_query(
        bobs, warehouse, bobs_unit, "INSERT INTO datasets.orders VALUES (1, 1)", WRITE
    )
    assert refused.status_code == 422
    assert f"You may not write into warehouse {warehouse.name}" in refused.get_data(as_text=True)
    assert (
        post_query(bobs, warehouse, bobs_unit, "SELECT * FROM datasets.orders").status_code == 200
    )
    (query,) = queries_of(db_engine, bob)
    assert (query.warehouse_id, query.compute_unit_id, query.mode) == (
        warehouse.id,
        bobs_unit.id,
        READ,
    )
    # The owner's unit is not bob's to use.
    assert post_query(bobs, warehouse, alice[2], "SELECT 1").status_code == 422


def test_someone_else_s_warehouse_is_not_there_to_query(client, db_engine, alice, app):
    _, warehouse, _ = alice
    carol = make_user(db_engine)
    carols = app.test_client()
    sign_in_as(carols, carol)
    assert warehouse.name not in carols.get("/console/").get_data(as_text=True)
    response = post_query(carols, warehouse, unit_row(db_engine, carol), "SELECT 1")
    assert response.status_code == 422 and "Choose a warehouse you may read" in response.get_data(
        as_text=True
    )


# --------------------------------------------------------------------------- the editor's completion


@pytest.fixture
def catalog_reads(monkeypatch):
    """The catalog as the portal's reader answers it: tpch.lineitem and tpch.orders, a dataset,
    and an execution's console log; each call counted."""
    from app import iceberg_reader
    from app.console import completions
    from app.iceberg_reader import Column, TableOverview

    tables = {
        "tpch": {"lineitem": ["l_orderkey", "l_returnflag"], "orders": ["o_orderkey"]},
        "datasets": {"orders": ["id", "amount"]},
        "console_logs": {"e1": ["line"]},
    }
    calls = {"namespaces": 0, "tables": 0, "overviews": []}

    def namespaces(catalog):
        calls["namespaces"] += 1
        return list(tables)

    def names(catalog, namespace):
        calls["tables"] += 1
        return [f"{namespace}.{table}" for table in tables[namespace]]

    def overview(catalog, name):
        calls["overviews"].append(name)
        namespace, table = name.split(".")
        columns = [Column(column, "long", True, None) for column in tables[namespace][table]]
        return TableOverview(name, "s3://lake/x", columns, {}, [], None, None, None)

    monkeypatch.setattr(completions, "catalog_for", lambda warehouse: object())
    monkeypatch.setattr(iceberg_reader, "list_namespaces", namespaces)
    monkeypatch.setattr(iceberg_reader, "table_names", names)
    monkeypatch.setattr(iceberg_reader, "table_overview", overview)
    return tables, calls


def test_the_editor_completes_the_warehouse_s_tables_kept_until_refreshed(
    client, alice, catalog_reads
):
    _, warehouse, _ = alice
    tables, calls = catalog_reads
    page = client.get("/console/").get_data(as_text=True)
    url = f"/console/warehouses/{warehouse.id}/completions"
    assert f'data-completions="{url}"' in page and 'data-testid="refresh-completions"' in page
    answer = client.get(url).get_json()
    schema = answer["schema"]
    assert sorted(schema) == ["console_logs", "datasets", "tpch"]
    lineitem = schema["tpch"]["children"]["lineitem"]
    assert lineitem["self"] == {"label": "lineitem", "type": "type", "detail": "table"}
    assert lineitem["children"] == [
        {"label": "l_orderkey", "type": "property", "detail": "long"},
        {"label": "l_returnflag", "type": "property", "detail": "long"},
    ]
    # An execution's own tables are listed by name; their columns are not read.
    assert schema["console_logs"]["children"]["e1"]["children"] == []
    assert sorted(calls["overviews"]) == ["datasets.orders", "tpch.lineitem", "tpch.orders"]
    assert (answer["tables"], answer["complete"], answer["error"]) == (4, True, "")
    assert answer["status"].startswith(f"Completes 4 tables in 3 namespaces of {warehouse.name}")

    # Kept: a new table shows only once the user refreshes.
    tables["tpch"]["nation"] = ["n_name"]
    assert "nation" not in client.get(url).get_json()["schema"]["tpch"]["children"]
    assert calls["namespaces"] == 1
    refreshed = client.get(f"{url}?refresh=1").get_json()
    assert refreshed["schema"]["tpch"]["children"]["nation"]["children"] == [
        {"label": "n_name", "type": "property", "detail": "long"}
    ]
    assert calls["namespaces"] == 2


def test_completion_is_bounded_and_an_unreadable_catalog_says_why(
    client, alice, catalog_reads, monkeypatch
):
    from app import iceberg_reader
    from app.console import completions
    from app.iceberg_catalogs import ResultReadError

    _, warehouse, _ = alice
    monkeypatch.setattr(completions, "MAX_TABLES", 3)
    monkeypatch.setattr(completions, "MAX_COLUMN_TABLES", 1)
    url = f"/console/warehouses/{warehouse.id}/completions"
    answer = client.get(url).get_json()
    assert answer["tables"] == 3 and answer["complete"] is False
    assert "the first ones only" in answer["status"]
    read = [
        table
        for namespace in answer["schema"].values()
        for table in namespace["children"].values()
        if table["children"]
    ]
    assert len(read) == 1

    def unreachable(catalog):
        raise ResultReadError("The catalog (Lakekeeper) is unreachable. Try again in a moment.")

    monkeypatch.setattr(iceberg_reader, "list_namespaces", unreachable)
    failed = client.get(f"{url}?refresh=1").get_json()
    assert failed["schema"] == {} and "unreachable" in failed["error"]
    assert failed["status"].startswith(f"No completion of {warehouse.name}'s tables")


def test_completion_follows_the_warehouse_s_sharing(client, db_engine, alice, app, catalog_reads):
    owner, warehouse, _ = alice
    url = f"/console/warehouses/{warehouse.id}/completions"
    bob, carol = make_user(db_engine), make_user(db_engine)
    add(db_engine, WarehouseShare(warehouse_id=warehouse.id, user_id=bob.id, level="read"))
    bobs, carols = app.test_client(), app.test_client()
    sign_in_as(bobs, bob)
    sign_in_as(carols, carol)
    assert "lineitem" in bobs.get(url).get_json()["schema"]["tpch"]["children"]
    assert carols.get(url).status_code == 404
    assert carols.get("/console/warehouses/999999/completions").status_code == 404
    update_row(db_engine, type(warehouse), warehouse.id, status="purged")
    assert client.get(url).status_code == 404


def test_completion_reads_a_real_catalog_for_the_owner_and_a_read_sharee(team):
    """On the dev catalog: the owner's tables complete, for her and for a member of a group she
    shared the warehouse with to read; carol, in no group, gets 404."""
    import pyarrow as pa

    from app.iceberg_catalogs import catalog_for

    app, group, people, warehouse = team
    (_, owner_client), (_, member_client), (_, carol_client) = (
        people[name] for name in ("owner", "member", "carol")
    )
    with app.app_context():
        catalog = catalog_for(warehouse)
        catalog.create_namespace("tpch")
        catalog.create_table(
            ("tpch", "lineitem"),
            schema=pa.schema([("l_orderkey", pa.int64()), ("l_returnflag", pa.string())]),
        )
    url = f"/console/warehouses/{warehouse.id}/completions"
    lineitem = owner_client.get(url).get_json()["schema"]["tpch"]["children"]["lineitem"]
    assert [(column["label"], column["detail"]) for column in lineitem["children"]] == [
        ("l_orderkey", "long"),
        ("l_returnflag", "string"),
    ]
    assert member_client.get(url).status_code == 404
    assert (
        share(owner_client, warehouse, kind="group", group=group, level="read").status_code == 200
    )
    assert "lineitem" in member_client.get(url).get_json()["schema"]["tpch"]["children"]
    assert carol_client.get(url).status_code == 404


def completed(db_engine, query_id: int, rows: list[list], **fields) -> None:
    update_row(
        db_engine,
        Query,
        query_id,
        state=QueryState.COMPLETED,
        row_count=len(rows),
        result=json.dumps(
            {
                "columns": [{"name": "name", "type": "string"}, {"name": "n", "type": "bigint"}],
                "rows": rows,
                "plan": "",
            }
        ),
        **fields,
    )


def test_bob_reads_alice_s_shared_warehouse_never_writes_and_carol_finds_neither(
    client, db_engine, alice, app, catalog_reads
):
    """bob, with a read share of alice's warehouse, queries it from his own unit and cannot write
    to it in either mode, on the page or through the API; carol, with no share, gets 404 for the
    warehouse and for alice's history."""
    owner, warehouse, alices_unit = alice
    post_query(client, warehouse, alices_unit, "SELECT * FROM tpch.lineitem")
    (alices_query,) = queries_of(db_engine, owner)
    completed(db_engine, alices_query.id, [["a", 1]])
    bob, carol = make_user(db_engine), make_user(db_engine)
    add(db_engine, WarehouseShare(warehouse_id=warehouse.id, user_id=bob.id, level="read"))
    bobs_unit = unit_row(db_engine, bob)
    bobs, carols = app.test_client(), app.test_client()
    sign_in_as(bobs, bob)
    sign_in_as(carols, carol)

    page = bobs.get("/console/").get_data(as_text=True)
    assert f"{warehouse.name} ({owner.display_name}'s, read) · read only" in page
    assert "SELECT * FROM tpch.lineitem" not in page  # alice's history is hers
    completion = bobs.get(f"/console/warehouses/{warehouse.id}/completions")
    assert "lineitem" in completion.get_json()["schema"]["tpch"]["children"]
    insert = "INSERT INTO tpch.lineitem SELECT * FROM tpch.lineitem"
    in_read = post_query(bobs, warehouse, bobs_unit, insert, READ)
    assert in_read.status_code == 422
    assert "INSERT INTO writes, and this console is read-only" in in_read.get_data(as_text=True)
    in_write = post_query(bobs, warehouse, bobs_unit, insert, WRITE)
    assert in_write.status_code == 422
    assert f"You may not write into warehouse {warehouse.name}" in in_write.get_data(as_text=True)
    api = Api(app.test_client(), token_for(app, bob))
    for mode in (READ, WRITE):
        refused = api.call(
            "POST",
            "/api/v1/queries",
            {
                "sql": insert,
                "warehouse_id": warehouse.id,
                "compute_unit_id": bobs_unit.id,
                "mode": mode,
            },
        )
        assert refused.status_code == 400, mode
    assert post_query(bobs, warehouse, bobs_unit, "SELECT * FROM tpch.lineitem").status_code == 200
    (bobs_query,) = queries_of(db_engine, bob)
    assert (bobs_query.mode, bobs_query.compute_unit_id) == (READ, bobs_unit.id)
    with Session(db_engine) as db:
        assert not db.exec(
            select(AuditEvent).where(
                AuditEvent.action == "query.write", AuditEvent.actor_id == bob.id
            )
        ).all()
    # bob's query is his: alice does not see it either.
    assert client.get(f"/console/?query={alices_query.id}").status_code == 200
    assert client.get(f"/console/?query={bobs_query.id}").status_code == 404

    assert carols.get(f"/warehouses/{warehouse.id}").status_code == 404
    assert carols.get(f"/console/warehouses/{warehouse.id}/completions").status_code == 404
    assert warehouse.name not in carols.get("/console/").get_data(as_text=True)
    for path in ("/console/?query={}", "/console/queries/{}/rows", "/console/queries/{}/csv"):
        assert carols.get(path.format(alices_query.id)).status_code == 404, path
    assert "tpch.lineitem" not in carols.get("/console/history").get_data(as_text=True)
    carol_api = Api(app.test_client(), token_for(app, carol))
    assert carol_api.call("GET", f"/api/v1/queries/{alices_query.id}").status_code == 404


def test_another_user_s_query_answers_404_everywhere(client, db_engine, alice, app):
    user, warehouse, cu = alice
    post_query(client, warehouse, cu, "SELECT 1")
    (query,) = queries_of(db_engine, user)
    completed(db_engine, query.id, [["a", 1]])
    carol = make_user(db_engine)
    carols = app.test_client()
    sign_in_as(carols, carol)
    htmx = {"HX-Request": "true"}
    for path in ("/console/?query={}", "/console/queries/{}/rows", "/console/queries/{}/csv"):
        assert carols.get(path.format(query.id)).status_code == 404, path
    assert carols.get(f"/console/queries/{query.id}", headers=htmx).status_code == 404
    for path in ("/console/queries/{}/cancel", "/console/queries/{}/again"):
        assert (
            carols.post(path.format(query.id), data={"csrf_token": csrf(carols)}).status_code == 404
        )
    assert "SELECT 1" not in carols.get("/console/").get_data(as_text=True)
    api = Api(app.test_client(), token_for(app, carol))
    assert api.call("GET", f"/api/v1/queries/{query.id}").status_code == 404
    assert api.call("POST", f"/api/v1/queries/{query.id}/cancel").status_code == 404


def test_a_completed_query_shows_rows_sorted_on_request_and_exports_csv(client, db_engine, alice):
    user, warehouse, cu = alice
    post_query(client, warehouse, cu, "SELECT name, n FROM t.t")
    (query,) = queries_of(db_engine, user)
    completed(db_engine, query.id, [["b", 2], ["=cmd()", 3], ["a", 1]])
    page = client.get(f"/console/?query={query.id}").get_data(as_text=True)
    assert (
        'data-testid="result-table"' in page and "hx-get" not in page.split("query-result")[1][:300]
    )
    assert page.index(">b<") < page.index(">a<")  # as returned
    ordered = client.get(f"/console/queries/{query.id}/rows?sort=1&desc=1").get_data(as_text=True)
    assert ordered.index(">=cmd()<") < ordered.index(">b<") < ordered.index(">a<")
    assert 'data-testid="column-type">string' in ordered
    csv = client.get(f"/console/queries/{query.id}/csv")
    assert csv.mimetype == "text/csv"
    assert csv.get_data(as_text=True) == "name,n\nb,2\n'=cmd(),3\na,1\n"
    history = client.get("/console/").get_data(as_text=True)
    assert 'data-testid="history-row"' in history and "Run again" in history


def test_a_truncated_result_says_how_many_rows_there_were_and_offers_a_workflow(
    client, db_engine, alice
):
    user, warehouse, cu = alice
    post_query(client, warehouse, cu, "SELECT name, n FROM t.t")
    (query,) = queries_of(db_engine, user)
    completed(db_engine, query.id, [["a", 1], ["b", 2]], truncated=True)
    update_row(db_engine, Query, query.id, row_count=12345)
    page = client.get(f"/console/?query={query.id}").get_data(as_text=True)
    assert (
        "Only the first 2 of\n      12,345 rows came back (the console's bound is 10,000 rows\n      or 12 MiB)"
        in page
    )
    made = client.post(
        f"/console/queries/{query.id}/workflow",
        data={"csrf_token": csrf(client)},
        headers={"HX-Request": "true"},
    )
    workflow_id = int(made.headers["HX-Redirect"].rsplit("/", 1)[1])
    with Session(db_engine) as db:
        workflow = db.get(Workflow, workflow_id)
        version = db.exec(
            select(WorkflowVersion).where(WorkflowVersion.workflow_id == workflow_id)
        ).one()
    assert (workflow.owner_id, workflow.name) == (user.id, f"query {query.id}")
    assert json.loads(version.steps) == [
        {"name": "result", "kind": "sql", "code": "SELECT name, n FROM t.t", "output": True}
    ]


def test_cancel_ends_a_queued_query_at_once_and_asks_the_worker_for_a_running_one(
    client, db_engine, alice
):
    user, warehouse, cu = alice
    post_query(client, warehouse, cu, "SELECT 1")
    post_query(client, warehouse, cu, "SELECT 2")
    first, second = sorted(queries_of(db_engine, user), key=lambda query: query.id)
    client.post(f"/console/queries/{first.id}/cancel", data={"csrf_token": csrf(client)})
    assert reload(db_engine, Query, first.id).state == QueryState.CANCELLED
    update_row(db_engine, Query, second.id, state=QueryState.RUNNING, run_id="r1")
    client.post(f"/console/queries/{second.id}/cancel", data={"csrf_token": csrf(client)})
    running = reload(db_engine, Query, second.id)
    assert running.state == QueryState.RUNNING and running.cancel_requested_at is not None


def test_run_again_queues_the_same_statement(client, db_engine, alice):
    user, warehouse, cu = alice
    post_query(client, warehouse, cu, "SELECT 7")
    (query,) = queries_of(db_engine, user)
    client.post(f"/console/queries/{query.id}/again", data={"csrf_token": csrf(client)})
    again = max(queries_of(db_engine, user), key=lambda row: row.id)
    assert again.id != query.id and (again.sql, again.warehouse_id) == ("SELECT 7", warehouse.id)


def test_the_api_runs_follows_and_cancels_a_query(app, db_engine, alice):
    user, warehouse, cu = alice
    api = Api(app.test_client(), token_for(app, user))
    refused = api.call(
        "POST",
        "/api/v1/queries",
        {"sql": "DROP TABLE a.b", "warehouse_id": warehouse.id, "compute_unit_id": cu.id},
    )
    assert refused.status_code == 400 and "DROP TABLE writes" in refused.get_json()["detail"]
    started = api.call(
        "POST",
        "/api/v1/queries",
        {"sql": "SELECT 1", "warehouse_id": warehouse.id, "compute_unit_id": cu.id},
    )
    assert started.status_code == 201, started.get_data(as_text=True)
    query_id = started.get_json()["id"]
    assert started.get_json()["state"] == QueryState.QUEUED
    completed(db_engine, query_id, [["x", 1], ["y", 2]])
    got = api.call("GET", f"/api/v1/queries/{query_id}?size=1&page=2").get_json()
    assert got["state"] == QueryState.COMPLETED
    assert got["result_page"]["rows"] == [["y", 2]] and got["result_page"]["total_rows"] == 2
    other = api.call(
        "POST",
        "/api/v1/queries",
        {"sql": "SELECT 2", "warehouse_id": warehouse.id, "compute_unit_id": cu.id},
    ).get_json()
    cancelled = api.call("POST", f"/api/v1/queries/{other['id']}/cancel")
    assert cancelled.status_code == 202 and cancelled.get_json()["state"] == QueryState.CANCELLED
    assert api.call("POST", f"/api/v1/queries/{query_id}/cancel").status_code == 409


# --------------------------------------------------------------------------- the worker's keeping


def test_what_a_unit_reports_is_kept_in_shape_and_bounded():
    from app.console.work import checked_result

    fields = checked_result(
        {
            "columns": [{"name": "a\x00b", "type": "string"}, "junk"],
            "rows": [["x" * 20_000, 1, 2], "junk", [{"k": ["v"] * 500}]],
            "row_count": "many",
            "truncated": "yes",
            "plan": None,
            "snapshots": [{"table": "t.t", "snapshot_id": 1}, 5],
        },
        max_rows=10,
    )
    result = json.loads(fields["result"])
    assert [column["type"] for column in result["columns"]] == ["string"]
    assert len(result["rows"]) == 2 and len(result["rows"][0]) == 1
    assert len(result["rows"][0][0]) <= 10_010
    assert fields["row_count"] == 2 and fields["truncated"] is False
    assert json.loads(fields["snapshots"]) == [{"table": "t.t", "snapshot_id": 1}]
    assert checked_result(None, 10)["row_count"] == 0


def _timed_live_part(client, query_id: int, **headers):
    started = time.monotonic()
    response = client.get(f"/console/queries/{query_id}", headers={"HX-Request": "true", **headers})
    return response, time.monotonic() - started


def test_a_young_query_s_live_part_answers_as_soon_as_the_query_ends(
    client, db_engine, alice, monkeypatch
):
    from app.console import routes

    monkeypatch.setattr(routes, "HOLD_S", 5.0)
    user, warehouse, cu = alice
    post_query(client, warehouse, cu, "SELECT * FROM tpch.orders")
    (query,) = queries_of(db_engine, user)
    worker = threading.Timer(0.4, completed, (db_engine, query.id, [["a", 1]]))
    worker.start()
    response, seconds = _timed_live_part(client, query.id)
    worker.join()
    text = response.get_data(as_text=True)
    assert 'data-testid="result-table"' in text and 'data-state="completed"' in text
    assert 'hx-trigger="load' not in text and 'hx-swap-oob="true"' in text
    assert 0.4 <= seconds < 0.4 + 0.5  # held, and answered within a look of the end, not at 5 s


def test_a_young_query_s_live_part_is_held_at_most_its_bound_then_304(
    client, db_engine, alice, monkeypatch
):
    from app.console import routes

    monkeypatch.setattr(routes, "HOLD_S", 0.5)
    user, warehouse, cu = alice
    post_query(client, warehouse, cu, "SELECT * FROM tpch.orders")
    (query,) = queries_of(db_engine, user)
    live, seconds = _timed_live_part(client, query.id)
    assert 0.5 <= seconds < 1.5 and 'hx-trigger="load delay:0s"' in live.get_data(as_text=True)
    again, seconds = _timed_live_part(client, query.id, **{"If-None-Match": live.headers["ETag"]})
    assert again.status_code == 304 and 0.5 <= seconds < 1.5
    # A change of the row that is not its end (a cancel asked for) is shown at once too.
    monkeypatch.setattr(routes, "HOLD_S", 5.0)
    asked = threading.Timer(
        0.3, lambda: update_row(db_engine, Query, query.id, cancel_requested_at=utcnow())
    )
    asked.start()
    changed, seconds = _timed_live_part(client, query.id)
    asked.join()
    assert changed.status_code == 200 and "cancelling" in changed.get_data(as_text=True)
    assert seconds < 1.5


def test_a_live_part_is_not_held_when_no_hold_is_free_or_the_query_is_not_young(
    client, db_engine, alice, monkeypatch
):
    from app.console import routes

    monkeypatch.setattr(routes, "HOLD_S", 5.0)
    monkeypatch.setattr(routes, "_holds", threading.BoundedSemaphore(1))
    user, warehouse, cu = alice
    post_query(client, warehouse, cu, "SELECT * FROM tpch.orders")
    (query,) = queries_of(db_engine, user)
    routes._holds.acquire()  # another request of this process holds it
    busy, seconds = _timed_live_part(client, query.id)
    assert seconds < 1 and 'hx-trigger="load delay:0.2s"' in busy.get_data(as_text=True)
    routes._holds.release()
    update_row(db_engine, Query, query.id, created_at=query.created_at - timedelta(seconds=60))
    older, seconds = _timed_live_part(client, query.id)
    assert seconds < 1 and 'hx-trigger="load delay:3s"' in older.get_data(as_text=True)


# --------------------------------------------------------------------------- the command line


def test_lakeport_sql_waits_for_the_rows_and_prints_them_as_csv(app, db_engine, monkeypatch, alice):
    import httpx
    from click.testing import CliRunner

    from lakeport_client import cli
    from lakeport_client.client import Client

    user, warehouse, cu = alice
    token = token_for(app, user)
    transport = httpx.WSGITransport(app=app)
    monkeypatch.setattr(
        cli, "make_client", lambda: Client("http://portal.test", token, transport=transport)
    )
    polls = []

    def the_worker_meanwhile(seconds: float) -> None:  # the worker ends the query between polls
        (query,) = queries_of(db_engine, user)
        if polls.append(seconds) or len(polls) == 2:
            completed(db_engine, query.id, [[f"r{n}", n] for n in range(600)], truncated=True)
            update_row(db_engine, Query, query.id, row_count=900)

    monkeypatch.setattr(cli.time, "sleep", the_worker_meanwhile)
    result = CliRunner().invoke(
        cli.main, ["sql", "SELECT name, n FROM t.t", "--warehouse", warehouse.name, "--csv"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:3] == ["name,n", "r0,0", "r1,1"] and len(lines) == 601  # two pages of rows
    assert "only the first 600 of 900 rows came back" in result.stderr
    refused = CliRunner().invoke(cli.main, ["sql", "DROP TABLE t.t", "--warehouse", warehouse.name])
    assert refused.exit_code == 1 and "DROP TABLE writes" in refused.output


class FakeUnit:
    """The unit's door as the worker sees it, with a run that ends as `ends` says."""

    def __init__(self, ends: list[dict]) -> None:
        self.ends, self.submitted, self.cancelled = ends, [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def make_ready(self) -> None:
        pass

    def submit_job(self, kind, args: dict, name: str) -> str:
        self.submitted.append((kind, args))
        return "run-1"

    def watch(self, run_id: str, wait_s: float) -> dict:
        return self.ends.pop(0)

    def cancel(self, run_id: str) -> dict:
        self.cancelled.append(run_id)
        return {}

    def touch(self) -> None:
        pass

    def failure(self) -> None:
        return None


def test_the_worker_runs_a_query_through_the_door_and_records_its_end(
    app, client, db_engine, monkeypatch, alice
):
    from app.console import work
    from compute.contract import JobKind

    user, warehouse, cu = alice
    post_query(client, warehouse, cu, "SELECT id FROM t.t")
    (query,) = queries_of(db_engine, user)
    unit = FakeUnit(
        [
            {"state": "RUNNING"},
            {
                "state": "COMPLETED",
                "result": {
                    "columns": [{"name": "id", "type": "bigint"}],
                    "rows": [[1], [2]],
                    "row_count": 2,
                    "truncated": False,
                    "plan": "",
                    "snapshots": [{"table": "t.t", "snapshot_id": 9}],
                },
            },
        ]
    )
    monkeypatch.setattr(work.UnitDoor, "running", lambda cu_id: unit)
    monkeypatch.setattr(work.door, "run_token", lambda warehouse, owner: f"token-of-{owner.id}")
    with app.app_context():
        work.run_query(query.id)
    kind, args = unit.submitted[0]
    assert kind == JobKind.QUERY and (args["sql"], args["mode"]) == ("SELECT id FROM t.t", READ)
    assert args["catalog"]["token"] == f"token-of-{user.id}"
    assert args["warehouse"]["lakekeeper_id"] == warehouse.lakekeeper_id
    done = reload(db_engine, Query, query.id)
    assert (done.state, done.row_count, done.run_id) == (QueryState.COMPLETED, 2, "run-1")
    assert json.loads(done.result)["rows"] == [[1], [2]]
    assert json.loads(done.snapshots) == [{"table": "t.t", "snapshot_id": 9}]


def test_the_worker_passes_a_cancel_on_and_a_lost_share_stops_a_query(
    app, client, db_engine, monkeypatch, alice
):
    from app.console import work

    user, warehouse, cu = alice
    post_query(client, warehouse, cu, "SELECT 1")
    (query,) = queries_of(db_engine, user)
    update_row(db_engine, Query, query.id, state=QueryState.RUNNING, run_id="run-1")
    client.post(f"/console/queries/{query.id}/cancel", data={"csrf_token": csrf(client)})
    unit = FakeUnit([{"state": "RUNNING"}, {"state": "CANCELLED"}])
    monkeypatch.setattr(work.UnitDoor, "running", lambda cu_id: unit)
    with app.app_context():
        work.run_query(query.id)
    assert unit.cancelled == ["run-1"]
    assert reload(db_engine, Query, query.id).state == QueryState.CANCELLED

    bob = make_user(db_engine)
    share = add(db_engine, WarehouseShare(warehouse_id=warehouse.id, user_id=bob.id, level="read"))
    bobs = app.test_client()
    sign_in_as(bobs, bob)
    post_query(bobs, warehouse, unit_row(db_engine, bob), "SELECT 1")
    (queued,) = queries_of(db_engine, bob)
    with Session(db_engine) as db:
        db.delete(db.get(WarehouseShare, share.id))
        db.commit()
    unit = FakeUnit([])
    monkeypatch.setattr(work.UnitDoor, "running", lambda cu_id: unit)
    with app.app_context():
        work.run_query(queued.id)
    stopped = reload(db_engine, Query, queued.id)
    assert stopped.state == QueryState.FAILED and "no longer yours" in stopped.error
    assert unit.submitted == []


@pytest.fixture
def units_made(db_engine):
    """Afterwards, every unit row the test made that is still live is ended: none has a cluster,
    and no later test's worker may start one or claim it from the pool."""
    from app.models import ComputeUnit, utcnow

    with Session(db_engine) as db:
        before = db.exec(select(ComputeUnit.id).order_by(ComputeUnit.id.desc())).first() or 0
    yield
    with Session(db_engine) as db:
        for row in db.exec(
            select(ComputeUnit).where(
                ComputeUnit.id > before, ComputeUnit.state.in_(("PENDING", "STARTING", "RUNNING"))
            )
        ):
            row.state, row.ended_at = "TERMINATED", utcnow()
            db.add(row)
        db.commit()


def choose_unit(client, warehouse, unit: str):
    return client.post(
        "/console/queries",
        data={
            "warehouse_id": warehouse.id,
            "compute_unit_id": unit,
            "mode": READ,
            "sql-code": "SELECT 1",
            "csrf_token": csrf(client),
        },
        headers={"HX-Request": "true"},
    )


@pytest.fixture
def pooled(app, db_engine, units_made):
    """A pool of one warm unit's size (2 CPUs, 3 GiB); calling it adds a ready pooled row."""
    from app.models import ComputeUnit, utcnow

    app.config.update(CU_POOL_SIZE=1, CU_POOL_CPUS=2, CU_POOL_MEMORY_GB=3.0)

    def ready_unit() -> ComputeUnit:
        return add(
            db_engine,
            ComputeUnit(
                owner_id=None,
                name="pool-standby",
                kind="local",
                cpus=2,
                memory_gb=3.0,
                state="RUNNING",
                pooled_at=utcnow(),
                started_at=utcnow(),
                spark_ready_at=utcnow(),
            ),
        )

    return ready_unit


def test_a_warm_unit_from_the_pool_is_claimed_for_the_query(client, db_engine, alice, pooled):
    from app.models import ComputeUnit

    user, warehouse, _ = alice
    update_row(db_engine, ComputeUnit, alice[2].id, state="TERMINATED")
    pooled()
    page = client.get("/console/").get_data(as_text=True)
    offered = page.split('data-testid="unit-from-pool"')[1].split("</option>")[0]
    assert "selected" in offered and "disabled" not in offered
    assert "A warm unit from the pool (" in offered and " ready)" in offered
    assert choose_unit(client, warehouse, "pool").status_code == 200
    (query,) = queries_of(db_engine, user)
    unit = reload(db_engine, ComputeUnit, query.compute_unit_id)
    assert unit.owner_id == user.id and unit.claimed_at is not None
    assert (unit.cpus, unit.memory_gb, unit.worker_nodes) == (2, 3.0, 0)
    assert query.state == QueryState.QUEUED


def test_the_pool_is_refused_when_no_warm_unit_is_ready_and_a_bad_choice_too(
    client, db_engine, alice, pooled
):
    user, warehouse, _ = alice
    page = client.get("/console/").get_data(as_text=True)
    offered = page.split('data-testid="unit-from-pool"')[1].split("</option>")[0]
    assert "none ready now" in offered and "disabled" in offered
    refused = choose_unit(client, warehouse, "pool")
    assert refused.status_code == 422
    assert "No warm unit is ready in the pool right now" in refused.get_data(as_text=True)
    for bad in ("", "pools", "-1", "0"):
        refused = choose_unit(client, warehouse, bad)
        assert refused.status_code == 422, bad
        assert "Choose one of your running compute units, a warm one from the pool" in (
            refused.get_data(as_text=True)
        )
    assert queries_of(db_engine, user) == []


def test_the_api_takes_a_unit_made_for_the_query(app, db_engine, alice, pooled):
    from app.models import ComputeUnit

    user, warehouse, own = alice
    update_row(
        db_engine, ComputeUnit, own.id, state="TERMINATED"
    )  # two at most: one claimed, one new
    api = Api(app.test_client(), token_for(app, user))

    def start(unit):
        return api.call(
            "POST",
            "/api/v1/queries",
            {"sql": "SELECT 1", "warehouse_id": warehouse.id, "compute_unit_id": unit},
        )

    refused = start("pool")
    assert refused.status_code == 400 and "No warm unit is ready" in refused.get_data(as_text=True)
    assert start("elsewhere").status_code in (400, 422)
    pooled()
    claimed = start("pool")
    assert claimed.status_code == 201, claimed.get_data(as_text=True)
    unit = reload(db_engine, ComputeUnit, claimed.get_json()["compute_unit_id"])
    assert unit.owner_id == user.id and unit.claimed_at is not None
    started = start("new")
    assert started.status_code == 201, started.get_data(as_text=True)
    fresh = reload(db_engine, ComputeUnit, started.get_json()["compute_unit_id"])
    assert (fresh.owner_id, fresh.state, fresh.claimed_at) == (user.id, "PENDING", None)


def test_start_one_for_me_makes_a_unit_and_the_query_waits_for_it(
    app, client, db_engine, alice, units_made
):
    from app.console import work
    from app.models import ComputeUnit

    user, warehouse, _ = alice
    response = client.post(
        "/console/queries",
        data={
            "warehouse_id": warehouse.id,
            "compute_unit_id": "new",
            "mode": READ,
            "sql-code": "SELECT 1",
            "csrf_token": csrf(client),
        },
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    (query,) = queries_of(db_engine, user)
    unit = reload(db_engine, ComputeUnit, query.compute_unit_id)
    assert (unit.owner_id, unit.state) == (user.id, "PENDING")
    with app.app_context():
        work.run_query(query.id)  # the unit is not running yet: nothing is claimed
    assert reload(db_engine, Query, query.id).state == QueryState.QUEUED
    page = client.get(f"/console/queries/{query.id}", headers={"HX-Request": "true"})
    assert f"waiting for compute unit {unit.name} to start" in page.get_data(as_text=True)


def test_a_decimal_column_sorts_by_its_value_not_its_text():
    """Decimals come back as text (to keep their digits); sorted, 8971.00 is the smallest."""
    from app.console.queries import sorted_rows

    rows = [["A", "8971.00"], ["N", "742802.00"], ["R", None], ["Z", "380456.00"]]
    largest_first = sorted_rows(rows, 1, descending=True, spark_type="decimal(25,2)")
    assert [row[1] for row in largest_first] == ["742802.00", "380456.00", "8971.00", None]
    as_text = sorted_rows(rows, 1, descending=True, spark_type="string")
    assert [row[1] for row in as_text][0] == "8971.00"
