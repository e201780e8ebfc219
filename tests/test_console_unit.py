"""The console's job (compute/run/query.py) on a real compute unit: one two-node local cluster for
the module (tests/conftest.py `host`), alice's warehouse with `datasets.orders` (`warehouses`);
what the warehouse holds afterwards is checked with an independent pyiceberg client."""

from __future__ import annotations

import time

from compute.contract import JobKind, RunState
from tests.catalogs import reader

ORDERS = [(1, 5), (2, 20), (3, 7), (4, 40)]


def run_query(host, lakehouse, warehouse: dict, sql: str, mode: str = "read", **bounds) -> dict:
    run_id = host.submit(JobKind.QUERY, query_args(lakehouse, warehouse, sql, mode, **bounds))[
        "run_id"
    ]
    return host.wait(run_id, timeout_s=180)


def query_args(lakehouse, warehouse: dict, sql: str, mode: str = "read", **bounds) -> dict:
    return {
        "sql": sql,
        "mode": mode,
        "catalog": {
            "uri": f"{lakehouse.catalog_url}/catalog",
            "warehouse": warehouse["lakekeeper_name"],
            "token": lakehouse.service_token(),
            "access_delegation": "vended-credentials",
        },
        "warehouse": {"lakekeeper_id": warehouse["lakekeeper_id"]},
        **bounds,
    }


def test_a_select_answers_typed_columns_rows_and_the_snapshot_read(host, lakehouse, warehouses):
    run = run_query(
        host, lakehouse, warehouses[0], "SELECT id, amount FROM datasets.orders ORDER BY id"
    )
    assert run["state"] == RunState.COMPLETED, run.get("error")
    result = run["result"]
    assert result["columns"] == [
        {"name": "id", "type": "bigint"},
        {"name": "amount", "type": "bigint"},
    ]
    assert [tuple(row) for row in result["rows"]] == ORDERS
    assert (result["row_count"], result["truncated"], result["statement"]) == (4, False, "SELECT")
    current = reader(lakehouse, warehouses[0]).load_table("datasets.orders").current_snapshot()
    assert [(read["table"], read["snapshot_id"]) for read in result["snapshots"]] == [
        ("datasets.orders", current.snapshot_id)
    ]


def test_a_write_in_read_mode_is_refused_by_name_and_changes_nothing(host, lakehouse, warehouses):
    orders = reader(lakehouse, warehouses[0]).load_table("datasets.orders")
    before = orders.current_snapshot().snapshot_id
    for sql, name in (
        ("INSERT INTO datasets.orders VALUES (9, 9)", "INSERT INTO"),
        ("DROP TABLE datasets.orders", "DROP TABLE"),
        ("CREATE TABLE datasets.made AS SELECT 1 AS n", "CREATE TABLE"),
        ("DELETE FROM datasets.orders WHERE id = 1", "DELETE"),
    ):
        run = run_query(host, lakehouse, warehouses[0], sql)
        assert run["state"] == RunState.FAILED, sql
        assert f"{name} writes" in run["error"] and "read-only" in run["error"], run["error"]
    after = reader(lakehouse, warehouses[0])
    table = after.load_table("datasets.orders")
    assert table.current_snapshot().snapshot_id == before
    assert sorted(tuple(row.values()) for row in table.scan().to_arrow().to_pylist()) == ORDERS
    assert ("datasets", "made") not in after.list_tables("datasets")


def test_spark_s_own_plan_refuses_writes_sqlglot_might_miss(host):
    """The second check alone: Spark's parse of each statement, walked as the job walks it."""
    code = """
from compute.run.query import plan_refusal
parse = spark._jsparkSession.sessionState().sqlParser().parsePlan
result = {sql: plan_refusal(parse(sql), "read", "it") for sql in args["statements"]}
"""
    statements = [
        "SELECT * FROM datasets.orders",
        "WITH a AS (SELECT 1 AS n) SELECT * FROM a",
        "SHOW TABLES IN datasets",
        "EXPLAIN SELECT 1",
        "INSERT INTO datasets.orders SELECT 1, 2",
        "WITH a AS (SELECT 1) INSERT INTO datasets.orders SELECT 1, 2",
        "MERGE INTO datasets.orders t USING datasets.orders s ON t.id = s.id "
        "WHEN MATCHED THEN DELETE",
        "CALL system.expire_snapshots(table => 'datasets.orders')",
        "ALTER TABLE datasets.orders ADD COLUMN x int",
        "EXPLAIN INSERT INTO datasets.orders SELECT 1, 2",
        "SET spark.sql.shuffle.partitions = 1",
    ]
    run = host.wait(host.probe(code, {"statements": statements})["run_id"], timeout_s=60)
    assert run["state"] == RunState.COMPLETED, run.get("error")
    refusals = run["result"]
    assert [sql for sql in statements if refusals[sql] is None] == statements[:4]
    assert "InsertIntoStatement" in refusals[statements[5]]
    assert "session" in refusals[statements[-1]]


def test_past_the_row_bound_the_answer_says_how_many_rows_there_were(host, lakehouse, warehouses):
    run = run_query(
        host, lakehouse, warehouses[0], "SELECT id FROM range(250) ORDER BY id", max_rows=100
    )
    assert run["state"] == RunState.COMPLETED, run.get("error")
    result = run["result"]
    assert [row[0] for row in result["rows"]] == list(range(100))
    assert (result["truncated"], result["row_count"]) == (True, 250)


def test_past_the_byte_bound_too_and_never_past_what_an_answer_carries(host, lakehouse, warehouses):
    small = run_query(
        host,
        lakehouse,
        warehouses[0],
        "SELECT repeat('x', 1000) AS t FROM range(50)",
        max_bytes=10_000,
    )
    assert small["state"] == RunState.COMPLETED, small.get("error")
    assert len(small["result"]["rows"]) == 9  # 9 rows of ~1 KB fit in 10,000 bytes of JSON
    assert (small["result"]["truncated"], small["result"]["row_count"]) == (True, 50)
    # 14 rows of 1 MiB each, asked with a 64 MiB bound: the unit keeps to 12 MiB, and the answer
    # reaches the portal (which reads a host's answer to 16 MiB).
    large = run_query(
        host,
        lakehouse,
        warehouses[0],
        "SELECT repeat('x', 1048576) AS t FROM range(14)",
        max_bytes=64 * 2**20,
    )
    assert large["state"] == RunState.COMPLETED, large.get("error")
    assert len(large["result"]["rows"]) == 11
    assert (large["result"]["truncated"], large["result"]["row_count"]) == (True, 14)


def test_explain_answers_the_plan_and_write_mode_writes(host, lakehouse, warehouses):
    explained = run_query(host, lakehouse, warehouses[1], "EXPLAIN SELECT 1 AS n")
    assert explained["state"] == RunState.COMPLETED, explained.get("error")
    assert "Physical Plan" in explained["result"]["plan"]
    catalog = reader(lakehouse, warehouses[1])
    catalog.create_namespace("scratch")
    made = run_query(
        host, lakehouse, warehouses[1], "CREATE TABLE scratch.made AS SELECT 7 AS n", "write"
    )
    assert made["state"] == RunState.COMPLETED, made.get("error")
    assert catalog.load_table("scratch.made").scan().to_arrow().to_pylist() == [{"n": 7}]


def test_a_long_query_is_cancelled_within_seconds(host, lakehouse, warehouses):
    sql = "SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b"
    run_id = host.submit(JobKind.QUERY, query_args(lakehouse, warehouses[0], sql))["run_id"]
    deadline = time.monotonic() + 60
    while host.run(run_id)["state"] != RunState.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(3)
    host.cancel(run_id)
    cancelled_at = time.monotonic()
    run = host.wait(run_id, timeout_s=60)
    assert run["state"] == RunState.CANCELLED, run
    assert time.monotonic() - cancelled_at < 30
