"""Pipelines on a compute unit: real Ray + RayDP + Spark on a two-node local cluster, writing
through the dev catalog into real SeaweedFS; results checked with an independent pyiceberg client."""

from __future__ import annotations

import re
import secrets
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from app.ray_clusters.local import cluster_pids
from compute.contract import ExecutionSpec, InvalidSpec
from compute.host.catalog_cache import CatalogAccess, CatalogCache, token_expiry
from compute.host.spark_session import S3Keys
from devstack.seaweedfs import TEST_USER_KEYS
from tests.catalogs import execution_ids, reader, spec_for, step, submit
from tests.processes import process_command_line


# ------------------------------------------------------------------ without Spark
def _jwt(exp: float) -> str:
    import base64
    import json

    def part(document: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'exp': exp})}.signature"


def _access(token: str, keys_expire_at: float | None = None) -> CatalogAccess:
    return CatalogAccess(
        uri="http://catalog/catalog",
        warehouse="u1-sales",
        token=token,
        keys=S3Keys(endpoint="http://s3", access_key="AK", secret_key="SK", session_token="ST"),
        keys_expire_at=keys_expire_at,
    )


def test_a_warehouse_binding_is_reused_until_its_time_runs_short():
    now = [1_000_000.0]
    cache = CatalogCache(min_remaining_s=600, clock=lambda: now[0])
    assert cache.current("3f2a-11") is None
    first = cache.binding("3f2a-11", _access(_jwt(now[0] + 3600), keys_expire_at=now[0] + 1800))
    assert cache.current("3f2a-11") is first  # a run that finds it needs no fresh keys

    assert first.catalog_name == "wh_3f2a11_v1"
    assert first.conf["spark.sql.catalog.wh_3f2a11_v1.type"] == "rest"
    assert (
        first.conf["spark.sql.catalog.wh_3f2a11_v1.header.X-Iceberg-Access-Delegation"]
        == "vended-credentials"
    )
    assert first.conf["spark.sql.catalog.wh_3f2a11_v1.hadoop.fs.s3a.session.token"] == "ST"
    assert first.expires_at == now[0] + 1800  # the keys expire before the token
    assert cache.binding("3f2a-11", _access(_jwt(now[0] + 7200))) is first
    assert cache.binding("other", _access(_jwt(now[0] + 3600))).catalog_name == "wh_other_v1"

    now[0] += 1300  # 500 s left: a new execution gets a new version; the old binding is unchanged
    assert cache.current("3f2a-11") is None
    second = cache.binding("3f2a-11", _access(_jwt(now[0] + 3600)))
    assert second.catalog_name == "wh_3f2a11_v2"
    assert (
        first.conf["spark.sql.catalog.wh_3f2a11_v1.token"]
        != second.conf["spark.sql.catalog.wh_3f2a11_v2.token"]
    )


def test_concurrent_executions_for_one_warehouse_share_one_binding():
    cache = CatalogCache()
    token = _jwt(time.time() + 3600)
    bindings, start = [], threading.Barrier(8)

    def bind():
        start.wait()
        bindings.append(cache.binding("wh", _access(token)))

    threads = [threading.Thread(target=bind) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {binding.catalog_name for binding in bindings} == {"wh_wh_v1"}


def test_an_opaque_token_gets_a_binding_of_its_own():
    cache = CatalogCache()
    assert token_expiry("not-a-jwt") is None
    assert cache.binding("wh", _access("opaque")) is not cache.binding("wh", _access("opaque"))


def test_catalog_access_takes_the_keys_a_catalog_vended_with_a_table():
    vended = {
        "s3.access-key-id": "AK",
        "s3.secret-access-key": "SK",
        "s3.session-token": "ST",
        "s3.endpoint": "http://s3",
        "s3.path-style-access": "false",
        "s3.session-token-expires-at-ms": "1700000000500",
    }
    access = CatalogAccess.vended("http://catalog/catalog", "u1-sales", "tok", vended)

    assert access.keys == S3Keys(
        endpoint="http://s3", access_key="AK", secret_key="SK", session_token="ST", path_style=False
    )
    assert access.keys_expire_at == 1_700_000_000.5
    assert (access.uri, access.warehouse, access.token) == (
        "http://catalog/catalog",
        "u1-sales",
        "tok",
    )
    assert (
        CatalogAccess.vended("u", "w", "t", {"s3.access-key-id": "AK"}) is None
    )  # no secret: nothing vended
    assert (
        CatalogAccess.vended(
            "u", "w", "t", {k: vended[k] for k in ("s3.access-key-id", "s3.secret-access-key")}
        ).keys_expire_at
        is None
    )


def test_a_spec_with_bad_steps_is_refused_with_the_reason():
    base = spec_for(
        {"lakekeeper_name": "w", "lakekeeper_id": "id"}, "tok", [step("a", "SELECT 1")], "http://c"
    )
    assert ExecutionSpec.from_json(base).steps[0].name == "a"
    for steps, reason in (
        ([], "no steps"),
        ([step("a b", "SELECT 1")], "not a step name"),
        ([step("A", "SELECT 1")], "not a step name"),
        ([step("class", "SELECT 1")], "not a step name"),
        ([step("a", "SELECT 1"), step("a", "SELECT 2")], "used twice"),
        ([{**step("a", "x"), "kind": "scala"}], "kind must be"),
    ):
        with pytest.raises(InvalidSpec, match=reason):
            ExecutionSpec.from_json({**base, "steps": steps})
    with pytest.raises(InvalidSpec, match="catalog.token"):
        ExecutionSpec.from_json({**base, "catalog": {**base["catalog"], "token": ""}})


# ------------------------------------------------------------------ on a compute unit


def table_names(catalog, namespace: str) -> set[str]:
    try:
        return {name[-1] for name in catalog.list_tables(namespace)}
    except Exception:  # no such namespace
        return set()


TWO_STEPS = [
    step("orders", "SELECT * FROM datasets.orders"),
    step(
        "big",
        "def run(spark, orders):\n    print('keeping big orders')\n    return orders.where('amount > 10')",
        kind="python",
        output=True,
    ),
]


def test_a_two_step_pipeline_writes_results_stats_and_logs(host, lakehouse, warehouses):
    warehouse = warehouses[0]
    run_id, spec = submit(host, lakehouse, warehouse, TWO_STEPS)
    run = host.wait(run_id, timeout_s=180)
    execution = spec["execution_id"]

    assert run["state"] == "COMPLETED", run["error"]
    assert run["result"]["outputs"] == {"big": f"results.e{execution}_big"}
    assert run["result"]["rows"] == {"big": 2}
    assert [(s["name"], s["state"], s["rows_out"]) for s in run["progress"]["steps"]] == [
        ("orders", "done", None),
        ("big", "done", 2),
    ]
    assert any(
        line["message"] == "keeping big orders" and line["step"] == "big"
        for line in run["progress"]["logs"]
    )

    catalog = reader(lakehouse, warehouse)
    expected = {
        "lakeport.execution-id": str(execution),
        "lakeport.workflow-id": "7",
        "lakeport.workflow-name": "sales",
        "lakeport.workflow-version": "3",
        "lakeport.user": "alice@example.test",
        "lakeport.compute-unit": "cu-a",
        "lakeport.status": "complete",
    }
    result = catalog.load_table(f"results.e{execution}_big")
    assert sorted(result.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 2, "amount": 20},
        {"id": 4, "amount": 40},
    ]
    stats = catalog.load_table(f"runtime_stats.e{execution}")
    logs = catalog.load_table(f"console_logs.e{execution}")
    for table in (result, stats, logs):
        assert expected.items() <= table.properties.items(), table.name()

    by_step = {row["step"]: row for row in stats.scan().to_arrow().to_pylist()}
    assert by_step["orders"]["status"] == by_step["big"]["status"] == "done"
    assert by_step["big"]["rows_out"] == 2 and by_step["big"]["bytes_out"] > 0
    assert by_step["big"]["rows_in"] == 4  # read from datasets.orders
    assert by_step["big"]["spark_jobs"] >= 1 and by_step["big"]["duration_ms"] > 0
    assert '"stage_id"' in by_step["big"]["spark_stages"]
    messages = logs.scan().to_arrow().to_pylist()
    assert {"level": "INFO", "step": "big", "message": "keeping big orders"} in [
        {key: line[key] for key in ("level", "step", "message")} for line in messages
    ]


def test_what_a_run_leaves_in_its_session_never_reaches_the_next_run(host, lakehouse, warehouses):
    """Each run gets a session of its own (one made ahead after the run before): a temporary
    view, a setting and the current namespace a run leaves behind are not the next run's."""
    leaving = [
        step(
            "left",
            "def run(spark):\n    spark.sql('CREATE TEMPORARY VIEW leftover AS SELECT 1 AS x')\n"
            "    spark.conf.set('spark.sql.shuffle.partitions', '3')\n"
            "    spark.sql('USE datasets')\n    return spark.range(1)",
            kind="python",
            output=True,
        )
    ]
    looking = [
        step(
            "seen",
            "def run(spark):\n"
            "    return spark.createDataFrame([(str(spark.catalog.tableExists('leftover')), "
            "spark.conf.get('spark.sql.shuffle.partitions'), spark.catalog.currentDatabase())], "
            "'leftover string, partitions string, database string')",
            kind="python",
            output=True,
        )
    ]
    for steps in (
        leaving,
        looking,
        looking,
    ):  # the third takes a spare made after a run like itself
        run_id, spec = submit(host, lakehouse, warehouses[0], steps)
        run = host.wait(run_id, timeout_s=180)
        assert run["state"] == "COMPLETED", run["error"]
    seen = (
        reader(lakehouse, warehouses[0])
        .load_table(f"results.e{spec['execution_id']}_seen")
        .scan()
        .to_arrow()
    )
    assert seen.to_pylist() == [
        {
            "leftover": "False",
            "partitions": host_partitions(host),
            "database": seen["database"][0].as_py(),
        }
    ]
    assert seen["database"][0].as_py() != "datasets"


def host_partitions(host) -> str:
    run_id = host.probe(
        "result = spark.conf.get('spark.sql.shuffle.partitions')", {}, name="partitions"
    )["run_id"]
    return host.wait(run_id, timeout_s=60)["result"]


def test_two_executions_at_once_land_each_in_its_own_warehouse(host, lakehouse, warehouses):
    runs = []
    for warehouse in warehouses:
        steps = [
            step(
                "tagged",
                f"SELECT '{warehouse['name']}' AS warehouse, id FROM range(3)",
                output=True,
            )
        ]
        runs.append(submit(host, lakehouse, warehouse, steps))
    finished = [host.wait(run_id, timeout_s=180) for run_id, _ in runs]

    assert [run["state"] for run in finished] == ["COMPLETED", "COMPLETED"], [
        run["error"] for run in finished
    ]
    for (run_id, spec), warehouse, other in zip(runs, warehouses, reversed(warehouses)):
        table = f"e{spec['execution_id']}_tagged"
        rows = (
            reader(lakehouse, warehouse)
            .load_table(f"results.{table}")
            .scan()
            .to_arrow()
            .to_pylist()
        )
        assert sorted(rows, key=lambda r: r["id"]) == [
            {"warehouse": warehouse["name"], "id": i} for i in range(3)
        ]
        assert table not in table_names(reader(lakehouse, other), "results")
        assert f"e{spec['execution_id']}" not in table_names(
            reader(lakehouse, other), "console_logs"
        )


def tasks_asleep(host) -> int:
    """How many of the unit's PySpark worker processes sleep in `time.sleep` now, as the kernel
    says where each process waits."""
    asleep = 0
    for pid in cluster_pids(host.handle):
        try:
            waits_in = Path(f"/proc/{pid}/wchan").read_text().strip()
        except OSError:  # gone meanwhile
            continue
        asleep += waits_in == "hrtimer_nanosleep" and "pyspark" in process_command_line(pid)
    return asleep


def test_cancel_mid_run_drops_results_and_records_what_happened(host, lakehouse, warehouses):
    warehouse = warehouses[0]
    steps = [
        step("first", "SELECT id FROM range(5)", output=True),
        step(
            "slow",
            "import time\n\ndef run(spark, first):\n"
            "    spark.sparkContext.parallelize(range(2), 2).map(lambda x: time.sleep(120)).count()\n"
            "    return first",
            kind="python",
            output=True,
        ),
        step("never", "SELECT * FROM slow"),
    ]
    run_id, spec = submit(host, lakehouse, warehouse, steps)
    deadline = time.monotonic() + 120
    while [s["state"] for s in host.run(run_id)["progress"]["steps"]][1:2] != ["running"]:
        assert time.monotonic() < deadline, host.run(run_id)
        time.sleep(0.2)
    # Cancel once the slow step's two tasks run (asleep in its executors' Python workers): a
    # cancel that came before its Spark job would not try stopping a running one.
    deadline = time.monotonic() + 60
    while tasks_asleep(host) < 2:
        assert time.monotonic() < deadline, (tasks_asleep(host), host.run(run_id)["progress"])
        time.sleep(0.2)

    cancelled_at = time.monotonic()
    host.cancel(run_id)
    run = host.wait(run_id, timeout_s=90)

    assert run["state"] == "CANCELLED"
    assert time.monotonic() - cancelled_at < 30
    assert [s["state"] for s in run["progress"]["steps"]] == ["done", "cancelled", "cancelled"]
    catalog = reader(lakehouse, warehouse)
    execution = spec["execution_id"]
    assert f"e{execution}_first" not in table_names(catalog, "results")
    stats = catalog.load_table(f"runtime_stats.e{execution}")
    assert stats.properties["lakeport.status"] == "cancelled"
    assert {row["step"]: row["status"] for row in stats.scan().to_arrow().to_pylist()} == {
        "first": "done",
        "slow": "cancelled",
        "never": "cancelled",
    }
    assert (
        catalog.load_table(f"console_logs.e{execution}").properties["lakeport.status"]
        == "cancelled"
    )


def wait_for_step(host, run_id: str, position: int, timeout_s: float = 120.0) -> None:
    """Until the run's step at `position` is running (or the run has ended)."""
    deadline = time.monotonic() + timeout_s
    while True:
        run = host.run(run_id)
        states = [s["state"] for s in run["progress"]["steps"]]
        if states[position : position + 1] == ["running"] or run["state"] in (
            "COMPLETED",
            "FAILED",
            "CANCELLED",
        ):
            return
        assert time.monotonic() < deadline, run
        time.sleep(0.02)


def statuses(catalog, execution: int) -> dict[str, str]:
    """`lakeport.status` of every table the execution left, by table."""
    found = {}
    for namespace in ("results", "runtime_stats", "console_logs"):
        for name in table_names(catalog, namespace):
            if name == f"e{execution}" or name.startswith(f"e{execution}_"):
                found[f"{namespace}.{name}"] = catalog.load_table(f"{namespace}.{name}").properties[
                    "lakeport.status"
                ]
    return found


LAST_STEP_WRITES = [
    step("first", "SELECT id FROM range(3)", output=True),
    step(
        "last",
        "def run(spark, first):\n    return first.selectExpr('id * 2 AS twice')",
        kind="python",
        output=True,
    ),
]


def test_a_cancel_during_the_last_step_never_leaves_a_table_marked_complete(
    host, lakehouse, warehouses
):
    """Cancels land at ten moments of the last step (its write, its end, the marking): whichever
    wins, the run's final state and its tables agree, every time."""
    warehouse, ends = warehouses[1], []
    catalog = reader(lakehouse, warehouse)
    for attempt in range(10):
        run_id, spec = submit(host, lakehouse, warehouse, LAST_STEP_WRITES)
        execution = spec["execution_id"]
        wait_for_step(host, run_id, 1)
        time.sleep(attempt * 0.12)
        host.cancel(run_id)
        run = host.wait(run_id, timeout_s=60)
        ends.append(run["state"])
        left = statuses(catalog, execution)
        if run["state"] == "COMPLETED":
            assert left == {
                f"results.e{execution}_first": "complete",
                f"results.e{execution}_last": "complete",
                f"runtime_stats.e{execution}": "complete",
                f"console_logs.e{execution}": "complete",
            }
        else:
            assert run["state"] == "CANCELLED", (attempt, run["error"])
            assert left == {
                f"runtime_stats.e{execution}": "cancelled",
                f"console_logs.e{execution}": "cancelled",
            }, attempt
    print(f"\ncancel during the last step on the unit, 10 runs: {ends}")
    assert "CANCELLED" in ends, ends  # the cancels did land during the run


def test_tables_committed_together_change_all_or_none(lakehouse, warehouses):
    """The end of a run is one multi-table commit (compute/iceberg_rest.commit_together): when
    one table's requirement fails, no table changes."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update import AssertRefSnapshotId

    from compute.run.iceberg_rest import commit_together, rest_catalog

    catalog = rest_catalog(
        "together",
        f"{lakehouse.catalog_url}/catalog",
        warehouses[1]["lakekeeper_name"],
        lakehouse.service_token(),
    )
    catalog.create_namespace_if_not_exists("together")
    schema = pa.schema([("n", pa.int64())])
    first, second = (
        catalog.create_table(
            f"together.t{secrets.token_hex(3)}",
            schema=schema,
            properties={"lakeport.status": "running"},
        )
        for _ in range(2)
    )

    def staged(table, broken: bool = False):
        transaction = table.transaction()
        transaction.append(pa.table({"n": [1, 2]}, schema=schema))
        transaction.set_properties({"lakeport.status": "complete"})
        if broken:  # as if another writer had committed to it meanwhile
            transaction._requirements += (AssertRefSnapshotId(ref="main", snapshot_id=12345),)
        return transaction

    with pytest.raises(CommitFailedException):
        commit_together(catalog, [staged(first), staged(second, broken=True)])
    for table in (first, second):
        left = catalog.load_table(table.name())
        assert (left.properties["lakeport.status"], left.current_snapshot()) == ("running", None)

    commit_together(catalog, [staged(first), staged(second)])
    for table in (first, second):
        done = catalog.load_table(table.name())
        assert done.properties["lakeport.status"] == "complete"
        assert sorted(done.scan().to_arrow()["n"].to_pylist()) == [1, 2]


def test_a_transaction_that_works_out_its_metadata_once_stages_and_commits_the_same(
    lakehouse, warehouses
):
    """MetadataOnceTransaction (a run's records and marks) computes the staged metadata once per
    change, not on every read, and still sees each change it stages."""
    from compute.run.iceberg_rest import MetadataOnceTransaction, commit_together, rest_catalog

    catalog = rest_catalog(
        "once",
        f"{lakehouse.catalog_url}/catalog",
        warehouses[1]["lakekeeper_name"],
        lakehouse.service_token(),
    )
    catalog.create_namespace_if_not_exists("together")
    schema = pa.schema([("n", pa.int64())])
    table = catalog.create_table(
        f"together.once{secrets.token_hex(3)}",
        schema=schema,
        properties={"lakeport.status": "running"},
    )
    transaction = MetadataOnceTransaction(table)
    assert transaction.table_metadata is transaction.table_metadata
    transaction.append(pa.table({"n": [4, 5, 6]}, schema=schema))
    appended = transaction.table_metadata
    assert (
        appended.current_snapshot() is not None
        and appended.properties["lakeport.status"] == "running"
    )
    transaction.set_properties({"lakeport.status": "complete"})
    assert transaction.table_metadata.properties["lakeport.status"] == "complete"
    commit_together(catalog, [transaction])
    done = catalog.load_table(table.name())
    assert done.properties["lakeport.status"] == "complete"
    assert sorted(done.scan().to_arrow()["n"].to_pylist()) == [4, 5, 6]


def test_a_run_whose_records_cannot_be_written_never_marks_its_result_complete(
    host, lakehouse, warehouses
):
    """Marking the results complete and writing the records are one commit: user code that
    drops its own runtime_stats table leaves a FAILED run that says why, with no table saying
    complete."""
    warehouse, execution = warehouses[1], next(execution_ids)
    records = f"runtime_stats.e{execution}"
    dropping = [
        step(
            "out",
            "import time\n\ndef run(spark):\n"
            f"    while not spark.catalog.tableExists('{records}'):\n        time.sleep(0.05)\n"
            f"    spark.sql('DROP TABLE {records}')\n    return spark.range(3)",
            kind="python",
            output=True,
        )
    ]
    run_id, _ = submit(host, lakehouse, warehouse, dropping, execution_id=execution)
    run = host.wait(run_id, timeout_s=120)

    assert run["state"] == "FAILED"
    assert (
        "could not be marked complete together with its runtime stats and console logs"
        in run["error"]
    )
    catalog = reader(lakehouse, warehouse)
    assert f"e{execution}_out" not in table_names(catalog, "results")
    assert "complete" not in statuses(catalog, execution).values()


@pytest.mark.parametrize(
    "code",
    [
        "import time\n\ndef run(spark):\n    time.sleep(60)\n    return spark.range(1)",
        # Pure Python that swallows every Exception: only an interruption it cannot catch stops it.
        "def run(spark):\n    n = 0\n    while True:\n        try:\n            n += 1\n"
        "        except Exception:\n            pass",
    ],
    ids=["sleep", "loop"],
)
def test_cancel_interrupts_a_python_step_within_seconds(host, lakehouse, warehouses, code):
    warehouse = warehouses[1]
    run_id, spec = submit(
        host,
        lakehouse,
        warehouse,
        [
            step("first", "SELECT 1 AS n", output=True),
            step("busy", code, kind="python", output=True),
        ],
    )
    wait_for_step(host, run_id, 1)
    time.sleep(1)
    cancelled_at = time.monotonic()
    host.cancel(run_id)
    run = host.wait(run_id, timeout_s=60)

    assert run["state"] == "CANCELLED", run["error"]
    assert time.monotonic() - cancelled_at < 5
    assert [s["state"] for s in run["progress"]["steps"]] == ["done", "cancelled"]
    # The clean-up ran: no result kept, the record says cancelled.
    assert statuses(reader(lakehouse, warehouse), spec["execution_id"]) == {
        f"runtime_stats.e{spec['execution_id']}": "cancelled",
        f"console_logs.e{spec['execution_id']}": "cancelled",
    }
    # The host's Spark session still serves the next run.
    after, _ = submit(host, lakehouse, warehouse, [step("after", "SELECT 2 AS n", output=True)])
    assert host.wait(after, timeout_s=60)["state"] == "COMPLETED"


def test_a_step_that_raises_fails_the_execution_with_its_reason(host, lakehouse, warehouses):
    warehouse = warehouses[1]
    steps = [
        step("first", "SELECT 1 AS n", output=True),
        step(
            "broken",
            "def run(spark, first):\n    raise ValueError('the numbers do not add up')",
            kind="python",
        ),
    ]
    run_id, spec = submit(host, lakehouse, warehouse, steps)
    run = host.wait(run_id, timeout_s=120)

    assert run["state"] == "FAILED"
    assert run["error"] == "step 'broken' failed: ValueError: the numbers do not add up"
    catalog = reader(lakehouse, warehouse)
    execution = spec["execution_id"]
    assert f"e{execution}_first" not in table_names(catalog, "results")
    logs = catalog.load_table(f"console_logs.e{execution}")
    assert logs.properties["lakeport.status"] == "failed"
    errors = [line for line in logs.scan().to_arrow().to_pylist() if line["level"] == "ERROR"]
    assert errors and errors[0]["step"] == "broken"
    assert 'File "<step broken>", line 2, in run' in errors[0]["message"]
    assert "raise ValueError('the numbers do not add up')" in errors[0]["message"]


def test_syntax_errors_are_reported_per_step_before_anything_runs(host, lakehouse, warehouses):
    warehouse = warehouses[1]
    steps = [
        step("fine", "SELECT 1 AS n"),
        step("typo", "SELEC 1"),
        step("py", "def run(spark:\n    return spark.range(1)", kind="python"),
    ]
    run_id, spec = submit(host, lakehouse, warehouse, steps)
    run = host.wait(run_id, timeout_s=60)

    assert run["state"] == "FAILED"
    assert "step 'typo'" in run["error"] and "PARSE_SYNTAX_ERROR" in run["error"]
    assert "step 'py': syntax error at line 1" in run["error"]
    assert [s["state"] for s in run["progress"]["steps"]] == ["pending", "failed", "failed"]
    assert f"e{spec['execution_id']}" not in table_names(
        reader(lakehouse, warehouse), "console_logs"
    )


def test_a_missing_warehouse_or_an_unreachable_catalog_fails_with_the_reason(
    host, lakehouse, warehouses, closed_port
):
    steps = [step("one", "SELECT 1 AS n", output=True)]
    missing = {**warehouses[0], "lakekeeper_name": "u1-no-such-warehouse"}
    run_id, _ = submit(host, lakehouse, missing, steps)
    unreachable_id, _ = submit(
        host,
        lakehouse,
        warehouses[0],
        steps,
        catalog={
            "uri": f"http://127.0.0.1:{closed_port}/catalog",
            "warehouse": warehouses[0]["lakekeeper_name"],
            "token": lakehouse.service_token(),
            "access_delegation": "vended-credentials",
        },
    )

    run, unreachable = host.wait(run_id, timeout_s=60), host.wait(unreachable_id, timeout_s=60)

    assert run["state"] == "FAILED" and run["error"].startswith(
        "warehouse not found: u1-no-such-warehouse"
    )
    assert unreachable["state"] == "FAILED"
    assert unreachable["error"].startswith(
        "the catalog (Lakekeeper) is unreachable at http://127.0.0.1:"
    )


def test_no_step_runs_before_the_catalog_has_accepted_the_runs_own_token(
    host, lakehouse, warehouses
):
    """The catalog is bound in the background while the run's session opens, and that session may
    carry the warehouse's binding an earlier run made, with the earlier run's token. A run whose
    own token the catalog refuses must fail before its code runs: else it would act through
    the binding it was never granted."""
    warehouse = warehouses[0]
    earlier, _ = submit(host, lakehouse, warehouse, [step("one", "SELECT 1 AS n", output=True)])
    assert host.wait(earlier, timeout_s=120)["state"] == "COMPLETED"  # the unit now holds a binding
    evidence = f"evidence_{secrets.token_hex(3)}"
    acting = step(
        "act",
        f"def run(spark):\n    spark.sql('CREATE TABLE results.{evidence} (n INT)')\n"
        "    return spark.range(1)",
        kind="python",
    )

    run_id, _ = submit(
        host,
        lakehouse,
        warehouse,
        [acting],
        catalog={
            "uri": f"{lakehouse.catalog_url}/catalog",
            "warehouse": warehouse["lakekeeper_name"],
            "token": "not-a-token-the-catalog-issued",
            "access_delegation": "vended-credentials",
        },
    )
    run = host.wait(run_id, timeout_s=60)

    assert run["state"] == "FAILED"
    assert run["error"].startswith(
        f"the catalog refused the execution's access to warehouse "
        f"{warehouse['lakekeeper_name']}: HTTP 401"
    ), run["error"]
    assert [s["state"] for s in run["progress"]["steps"]] == ["pending"]
    assert evidence not in table_names(reader(lakehouse, warehouse), "results")


# Spark code run on the host: writes and reads a bucket with keys given per request, as each
# catalog binding gives its own; which of them S3A really used shows in what the store allows.
KEYED_S3A_CODE = """
def attempt(action, secret, name):
    options = {"fs.s3a.endpoint": args["endpoint"], "fs.s3a.path.style.access": "true",
               "fs.s3a.connection.ssl.enabled": "false",
               "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
               "fs.s3a.access.key": args["access_key"], "fs.s3a.secret.key": secret}
    location = args["base"] + "/" + name
    try:
        if action == "write":
            spark.range(5).write.mode("overwrite").options(**options).parquet(location)
        else:
            assert spark.read.options(**options).parquet(location).count() == 5
        return "ok"
    except Exception as error:
        return "refused: " + str(error)[:400]

result = {
    "write": attempt("write", args["secret"], "first"),
    "write_with_a_wrong_secret": attempt("write", "wrong" + args["secret"], "second"),
    "read": attempt("read", args["secret"], "first"),
    "open": spark.sparkContext._jvm.io.lakeport.s3.CredentialKeyedS3AFileSystem.openFileSystems(),
}
"""


def test_each_set_of_storage_credentials_is_the_one_its_reads_and_writes_use(host, lakehouse):
    """Hadoop alone caches one S3A file system per bucket, made with the first caller's keys,
    which would keep vended credentials that expired, or lend one warehouse's credentials to
    another in the same bucket. Here a wrong secret after a right one is refused (with Hadoop's
    cache it would have written with the right one), and the right one still works."""
    keys = TEST_USER_KEYS["alice"]
    run = host.probe(
        KEYED_S3A_CODE,
        {
            "endpoint": lakehouse.s3_endpoint,
            "access_key": keys.access_key_id,
            "secret": keys.secret_access_key,
            "base": f"s3://{keys.bucket}/tests/keyed-s3a-{secrets.token_hex(3)}",
        },
    )
    result = host.wait(run["run_id"], timeout_s=120)
    assert result["state"] == "COMPLETED", result["error"]
    outcome = result["result"]
    assert outcome["write"] == outcome["read"] == "ok"
    refused = outcome["write_with_a_wrong_secret"]
    assert refused.startswith("refused: ") and re.search(r"403|Forbidden|AccessDenied", refused), (
        refused
    )
    assert keys.secret_access_key not in str(outcome)
    assert outcome["open"] >= 2  # the right keys' file system and the wrong ones'


# On the host: renew every binding at once (as when its credentials near their end), or undo that;
# report the warehouse's binding version and how many S3A file systems the driver has made.
RENEWAL_CODE = """
import gc
from compute.run.forked_runs import ForkedRuns
from compute.run.pipeline import CATALOGS
if args.get("min_remaining_s") is not None:
    CATALOGS.min_remaining_s = args["min_remaining_s"]
    # The next run's child was forked with the setting as it was: fork it again.
    for forks in [thing for thing in gc.get_objects() if isinstance(thing, ForkedRuns)]:
        forks.renew_spare()
result = {"version": CATALOGS._versions.get(args["warehouse_id"], 0),
          "file_systems": spark.sparkContext._jvm.io.lakeport.s3.CredentialKeyedS3AFileSystem.createdFileSystems()}
"""


def test_renewed_storage_credentials_are_the_ones_the_next_execution_uses(
    host, lakehouse, warehouses
):
    """Each execution here finds its warehouse's binding too close to its end, so it binds anew
    with the credentials the catalog just vended; Spark then writes with those (a file system of
    their own), not with the first ones."""
    warehouse = warehouses[1]

    def on_host(**args):
        run = host.wait(
            host.probe(RENEWAL_CODE, {"warehouse_id": warehouse["lakekeeper_id"], **args})["run_id"]
        )
        assert run["state"] == "COMPLETED", run["error"]
        return run["result"]

    usual = CatalogCache().min_remaining_s
    before = on_host(min_remaining_s=10**9)
    try:
        for number in (1, 2):
            run_id, spec = submit(
                host, lakehouse, warehouse, [step("again", f"SELECT {number} AS n", output=True)]
            )
            run = host.wait(run_id, timeout_s=180)
            assert run["state"] == "COMPLETED", run["error"]
            rows = (
                reader(lakehouse, warehouse)
                .load_table(f"results.e{spec['execution_id']}_again")
                .scan()
                .to_arrow()
            )
            assert rows.to_pylist() == [{"n": number}]
    finally:
        after = on_host(min_remaining_s=usual)
    assert after["version"] == before["version"] + 2
    # The driver made one S3A file system for each of the two new sets of credentials.
    assert after["file_systems"] == before["file_systems"] + 2


def test_the_units_pyiceberg_catalogs_write_a_small_file_in_one_request():
    """pyarrow sends a file under one part as a single PutObject only with delayed open; the
    rest of the S3 settings are pyiceberg's own mapping of the vended properties."""
    from pyiceberg.io import load_file_io

    from compute.run.iceberg_rest import FILE_IO_PROPERTY, SmallWritesFileIO

    vended = {
        "s3.endpoint": "http://127.0.0.1:9",
        "s3.access-key-id": "AK",
        "s3.secret-access-key": "SK",
        "s3.session-token": "ST",
        "s3.region": "eu-west-1",
        FILE_IO_PROPERTY: "compute.run.iceberg_rest.SmallWritesFileIO",
    }
    io = load_file_io(vended, "s3://bucket/ns/table")
    assert isinstance(io, SmallWritesFileIO)
    _, (options,) = io.fs_by_scheme("s3", "bucket").__reduce__()
    assert options["allow_delayed_open"] is True
    assert (
        options["endpoint_override"],
        options["access_key"],
        options["session_token"],
        options["region"],
    ) == ("http://127.0.0.1:9", "AK", "ST", "eu-west-1")


def test_a_run_childs_record_warm_up_writes_both_records_locally_and_leaves_nothing(
    tmp_path, monkeypatch
):
    """A run's child, forked ahead, writes the two records once before its run comes
    (record_tables.warm_the_record_path): data files and manifests through the run's own FileIO,
    in a directory of its own that is gone afterwards, with no catalog and no storage request."""
    import tempfile
    from contextlib import contextmanager

    from compute.run.record_tables import warm_the_record_path

    made, listed = [], {}

    @contextmanager
    def directory(prefix: str = ""):
        made.append(tmp_path / f"{prefix}x")
        made[-1].mkdir()
        yield str(made[-1])
        for path in made[-1].rglob("*"):
            if path.is_file():
                listed.setdefault(path.relative_to(made[-1]).parts[0], []).append(path.suffix)
        for path in sorted(made[-1].rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        made[-1].rmdir()

    monkeypatch.setattr(tempfile, "TemporaryDirectory", directory)
    warm_the_record_path()

    assert len(made) == 1 and not made[0].exists()
    assert set(listed) == {"runtime_stats", "console_logs"}
    for suffixes in listed.values():
        assert ".parquet" in suffixes and ".avro" in suffixes  # a data file and its manifests


def test_an_append_with_its_schemas_worked_out_before_writes_what_pyiceberg_writes(tmp_path):
    """MetadataOnceTransaction.append works out a pair of schemas once per process: a later
    append of the same pair writes the same data file (columns, field ids, statistics) as
    pyiceberg's own append, and a pair that does not fit is refused every time, however alike
    it looks to one that fitted (field ids in the Arrow schema's metadata change the answer)."""
    import pyarrow.parquet as pq
    from pyiceberg.table import Transaction

    from compute.run.iceberg_rest import (
        MetadataOnceTransaction,
        SmallWritesFileIO,
        wait_for_uploads,
    )
    from compute.run.record_tables import local_table

    schema = pa.schema([("n", pa.int64()), ("word", pa.string())])
    rows = pa.Table.from_pylist([{"n": 1, "word": "a"}, {"n": None, "word": "b"}], schema=schema)

    def written(transaction_class, name: str):
        table = local_table(str(tmp_path), name, schema, SmallWritesFileIO())
        transaction = transaction_class(table)
        transaction.append(rows)
        wait_for_uploads(table)
        (manifest,) = transaction.table_metadata.current_snapshot().manifests(table.io)
        (entry,) = manifest.fetch_manifest_entry(table.io)
        return entry.data_file

    ours = [written(MetadataOnceTransaction, f"ours{number}") for number in range(2)]
    theirs = written(Transaction, "theirs")
    for data_file in ours:
        assert data_file.record_count == theirs.record_count == 2
        assert data_file.null_value_counts == theirs.null_value_counts
        assert data_file.lower_bounds == theirs.lower_bounds
        assert data_file.upper_bounds == theirs.upper_bounds
        file_schema = pq.read_schema(data_file.file_path.removeprefix("file://"))
        their_schema = pq.read_schema(theirs.file_path.removeprefix("file://"))
        assert file_schema.equals(their_schema, check_metadata=True)
        assert [field.metadata[b"PARQUET:field_id"] for field in file_schema] == [b"1", b"2"]

    table = local_table(str(tmp_path), "refused", schema, SmallWritesFileIO())
    wider = rows.append_column("extra", pa.array([1, 2]))
    swapped_ids = rows.cast(
        pa.schema(
            [
                pa.field("n", pa.int64(), metadata={"PARQUET:field_id": "2"}),
                pa.field("word", pa.string(), metadata={"PARQUET:field_id": "1"}),
            ]
        )
    )
    for refused in (wider, wider, swapped_ids, swapped_ids):
        with pytest.raises(ValueError):
            MetadataOnceTransaction(table).append(refused)
