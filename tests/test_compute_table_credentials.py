"""Executions with storage credentials scoped to one table, as Lakekeeper vends them: a unit
reaches each table with the credentials vended for it (VendedCredentialsFileIO,
compute/java/), renews them through the table's loadCredentials before they expire, and a
sharee's read-only credentials still cannot write. Real Ray + RayDP + Spark on a local unit,
through the dev catalog (scope "table") into real SeaweedFS."""

from __future__ import annotations

import secrets

import pyarrow as pa

from app.lakekeeper.resources import S3AccessKeyCredential, S3StorageProfile, WarehouseAssignment
from app.lakekeeper.tokens import lakekeeper_user_id
from compute.contract import JobKind
from compute.run.iceberg_rest import credentials_expire_soon
from devstack.seaweedfs import TEST_USER_KEYS
from tests.catalogs import BOB_USER, reader, spec_for, step

ORDERS = pa.table({"id": [1, 2, 3, 4], "amount": [5, 20, 7, 40]})

# On the host: the driver JVM's count of credential renewals and of S3A file systems made.
COUNTERS_CODE = """
jvm = spark.sparkContext._jvm
result = {"renewals": jvm.io.lakeport.s3.VendedCredentialsFileIO.renewals(),
          "file_systems": jvm.io.lakeport.s3.CredentialKeyedS3AFileSystem.createdFileSystems()}
"""


def _warehouse(catalog_admin, lakehouse, name: str, lifetime_s: int | None = None) -> dict:
    """A warehouse of alice's holding `datasets.orders`."""
    keys = TEST_USER_KEYS["alice"]
    info = catalog_admin.create_warehouse(
        f"u1-{name}-{secrets.token_hex(3)}",
        S3StorageProfile(
            bucket=keys.bucket,
            region="us-east-1",
            key_prefix=f"scoped/{name}-{secrets.token_hex(3)}",
            endpoint=lakehouse.s3_endpoint,
            path_style_access=True,
            flavor="s3-compat",
            sts_enabled=True,
            sts_token_validity_seconds=lifetime_s,
        ),
        S3AccessKeyCredential(keys.access_key_id, keys.secret_access_key),
    )
    warehouse = {"id": 1, "name": name, "lakekeeper_name": info.name, "lakekeeper_id": info.id}
    orders = reader(lakehouse, warehouse)
    orders.create_namespace("datasets")
    orders.create_table("datasets.orders", schema=ORDERS.schema).append(ORDERS)
    return warehouse


def _run(host, lakehouse, warehouse: dict, steps: list[dict], token: str | None = None):
    spec = spec_for(
        warehouse, token or lakehouse.service_token(), steps, f"{lakehouse.catalog_url}/catalog"
    )
    run_id = host.submit(JobKind.EXECUTION, spec, name=f"execution-{spec['execution_id']}")[
        "run_id"
    ]
    return host.wait(run_id, timeout_s=240), spec["execution_id"]


def _counters(host) -> dict:
    run = host.wait(host.probe(COUNTERS_CODE, {})["run_id"])
    assert run["state"] == "COMPLETED", run["error"]
    return run["result"]


def _rows(lakehouse, warehouse: dict, table: str) -> list[dict]:
    return sorted(
        reader(lakehouse, warehouse).load_table(table).scan().to_arrow().to_pylist(),
        key=lambda r: r["id"],
    )


def test_a_run_reads_one_table_and_writes_two_with_table_scoped_credentials(
    host,
    lakehouse,
    catalog_admin,
):
    assert (
        lakehouse.catalog.vended_credentials_scope == "table"
    )  # Lakekeeper's rule, the local stack's default
    warehouse = _warehouse(catalog_admin, lakehouse, "scoped")
    run, execution = _run(
        host,
        lakehouse,
        warehouse,
        [
            step("orders", "SELECT * FROM datasets.orders"),
            step(
                "big",
                "def run(spark, orders):\n    return orders.where('amount > 10')",
                kind="python",
                output=True,
            ),
            step(
                "small",
                "def run(spark, orders):\n    return orders.where('amount <= 10')",
                kind="python",
                output=True,
            ),
        ],
    )
    assert run["state"] == "COMPLETED", run["error"]
    assert _rows(lakehouse, warehouse, f"results.e{execution}_big") == [
        {"id": 2, "amount": 20},
        {"id": 4, "amount": 40},
    ]
    assert _rows(lakehouse, warehouse, f"results.e{execution}_small") == [
        {"id": 1, "amount": 5},
        {"id": 3, "amount": 7},
    ]


def test_a_run_outliving_its_credentials_renews_them_and_goes_on(
    host,
    lakehouse,
    catalog_admin,
    run_dir,
):
    """The warehouse's profile asks for 20-second credentials: the dev catalog states that expiry
    (STS grants 900 s at least: `vending.stated_expiry`), so the unit must renew them through
    each table's loadCredentials, and a step that waits past the expiry still reads and writes."""
    warehouse = _warehouse(catalog_admin, lakehouse, "renewing", lifetime_s=20)
    before = _counters(host)
    run, execution = _run(
        host,
        lakehouse,
        warehouse,
        [
            step("orders", "SELECT * FROM datasets.orders"),
            step(
                "later",
                "import time\n\ndef run(spark, orders):\n    orders.count()\n    time.sleep(25)\n"
                "    return orders.where('amount > 10')",
                kind="python",
                output=True,
            ),
        ],
    )
    assert run["state"] == "COMPLETED", run["error"]
    assert _rows(lakehouse, warehouse, f"results.e{execution}_later") == [
        {"id": 2, "amount": 20},
        {"id": 4, "amount": 40},
    ]
    after = _counters(host)
    assert after["renewals"] > before["renewals"]
    # The renewed keys are used: each set got an S3A file system of its own.
    assert after["file_systems"] - before["file_systems"] > 2
    access_log = (run_dir / "logs" / "devcatalog.log").read_text(errors="replace").splitlines()
    renewals = [
        line
        for line in access_log
        if f"/catalog/v1/{warehouse['lakekeeper_id']}/namespaces/" in line
        and "/credentials " in line
    ]
    assert any("/tables/orders/credentials" in line and '" 200 ' in line for line in renewals), (
        renewals[-5:]
    )
    assert any(
        f"/tables/e{execution}_later/credentials" in line and '" 200 ' in line for line in renewals
    ), renewals[-5:]


def test_a_read_only_sharees_run_cannot_write_the_shared_table(host, lakehouse, catalog_admin):
    """Bob may read alice's orders and create tables of his own (select, create), not modify hers:
    his run's results are written, and an INSERT into her table is refused by storage, with the
    read-only credentials the catalog vended for it."""
    warehouse = _warehouse(catalog_admin, lakehouse, "shared")
    bob = lakekeeper_user_id(BOB_USER.sub)
    catalog_admin.set_warehouse_assignments(
        warehouse["lakekeeper_id"],
        [WarehouseAssignment(relation, user=bob) for relation in ("describe", "select", "create")],
    )
    token = catalog_admin.user_token(BOB_USER.sub, warehouse["lakekeeper_id"]).access_token
    run, execution = _run(
        host,
        lakehouse,
        warehouse,
        [
            step("copy", "SELECT * FROM datasets.orders WHERE amount > 10", output=True),
            step("tamper", "INSERT INTO datasets.orders VALUES (9, 99)"),
        ],
        token=token,
    )
    assert run["state"] == "FAILED"
    # Refused by storage as the data file is written (S3's 403 under Spark's writer), before any commit
    # the catalog would refuse.
    assert run["error"].startswith("step 'tamper' failed"), run["error"]
    assert any(
        word in run["error"]
        for word in ("403", "Forbidden", "AccessDenied", "Failed to close current writer")
    ), run["error"]
    assert "CommitFailed" not in run["error"] and "ForbiddenException" not in run["error"], run[
        "error"
    ]
    assert _rows(lakehouse, warehouse, "datasets.orders") == sorted(
        ORDERS.to_pylist(), key=lambda r: r["id"]
    )


def test_a_tables_credentials_close_to_their_expiry_are_renewed_before_the_records_are_written():
    """pipeline._staged_record loads runtime_stats and console_logs again before writing them at a
    long run's end when their credentials expire within 5 minutes (it loaded them as the run began)."""
    now = 1_000_000.0
    assert credentials_expire_soon(
        {"s3.session-token-expires-at-ms": str(int((now + 299) * 1000))}, now
    )
    assert credentials_expire_soon(
        {"s3.session-token-expires-at-ms": str(int((now - 5) * 1000))}, now
    )
    assert not credentials_expire_soon(
        {"s3.session-token-expires-at-ms": str(int((now + 301) * 1000))}, now
    )
    assert not credentials_expire_soon({}, now)  # keys that state no expiry
    assert not credentials_expire_soon({"s3.session-token-expires-at-ms": "soon"}, now)
