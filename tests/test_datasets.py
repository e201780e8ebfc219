"""Data sources end to end: uploads and TPC-H sample data written through the portal into a
warehouse (dev catalog + real SeaweedFS), checked with an independent pyiceberg client."""

from __future__ import annotations

import gzip
import io
import time
from dataclasses import replace
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app import create_app
from app.worker import Worker
from devstack.oidc_provider import TEST_USERS
from tests.factories import AuthActions, independent_catalog, register, warehouse_named

ORDERS_CSV = b"id,customer,amount,ordered_at\n1,ann,12.5,2024-01-02 10:00:00\n2,bob,7,2024-01-03 11:30:00\n3,cy,,\n"
TPCH_ROWS_AT_SF_0_01 = {
    "region": 5,
    "nation": 25,
    "supplier": 100,
    "customer": 1500,
    "part": 2000,
    "partsupp": 8000,
    "orders": 15000,
    "lineitem": 60175,
}


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


@pytest.fixture
def app(portal_config, lakehouse):
    return create_app(replace(portal_config, LAKEKEEPER_URL=lakehouse.catalog_url))


def registered_warehouse(client, auth, lakehouse, db_engine, name: str, user: str = "alice"):
    response = register(client, auth, lakehouse, name, user=user)
    assert response.status_code == 302, response.get_data(as_text=True)
    return warehouse_named(db_engine, name, owner_email=f"{user}@example.test")


def upload(client, auth, warehouse_id, table_name: str, content: bytes, filename: str = "data.csv"):
    return client.post(
        "/workflows/datasets/upload",
        headers={"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"},
        content_type="multipart/form-data",
        data={
            "warehouse_id": str(warehouse_id),
            "table_name": table_name,
            "file": (io.BytesIO(content), filename),
        },
    )


def test_csv_upload_becomes_an_iceberg_table_and_replaces_it_on_upload_again(
    client, auth, lakehouse, db_engine
):
    auth.login("alice")
    warehouse = registered_warehouse(client, auth, lakehouse, db_engine, "uploads")
    # The name says text; the content decides.
    response = upload(client, auth, warehouse.id, "orders", ORDERS_CSV, filename="orders.txt")
    page = response.get_data(as_text=True)
    assert response.status_code == 200, page
    assert "Imported 3 rows" in page and "datasets.orders" in page and "<html" not in page

    table = independent_catalog(lakehouse, warehouse).load_table("datasets.orders")
    rows = table.scan().to_arrow().sort_by("id").to_pylist()
    assert [row["customer"] for row in rows] == ["ann", "bob", "cy"]
    assert [row["amount"] for row in rows] == [12.5, 7.0, None]
    assert rows[0]["ordered_at"] == datetime(2024, 1, 2, 10, 0)
    assert table.properties["lakeport.source"] == "upload (csv)"
    assert table.properties["lakeport.source-file"] == "orders.txt"

    semicolons = b"sku;price\nA-1;3\nB-2;4\n"
    again = upload(client, auth, warehouse.id, "orders", semicolons)
    assert again.status_code == 200 and "Imported 2 rows" in again.get_data(as_text=True)
    replaced = independent_catalog(lakehouse, warehouse).load_table("datasets.orders")
    assert replaced.schema().column_names == ["sku", "price"]
    assert sorted(replaced.scan().to_arrow()["sku"].to_pylist()) == ["A-1", "B-2"]


def test_an_upload_with_the_same_columns_replaces_rows_in_place_and_keeps_the_history(
    client, auth, lakehouse, db_engine
):
    """Same schema: one new snapshot of the same table, so runs pinned to the first upload's
    snapshot can still read it. Other columns: a new table, without that history."""
    auth.login("alice")
    warehouse = registered_warehouse(client, auth, lakehouse, db_engine, "reuploads")
    assert (
        upload(client, auth, warehouse.id, "prices", b"sku,price\nA-1,3\nB-2,4\n").status_code
        == 200
    )
    catalog = independent_catalog(lakehouse, warehouse)
    first = catalog.load_table("datasets.prices")
    first_snapshot = first.current_snapshot().snapshot_id

    response = upload(
        client, auth, warehouse.id, "prices", b"sku,price\nC-3,5\n", filename="new.csv"
    )
    assert response.status_code == 200 and "Imported 1 rows" in response.get_data(as_text=True)
    again = catalog.load_table("datasets.prices")
    assert again.metadata.table_uuid == first.metadata.table_uuid  # the same table
    assert again.current_snapshot().snapshot_id != first_snapshot
    assert again.scan().to_arrow()["sku"].to_pylist() == ["C-3"]
    assert sorted(again.scan(snapshot_id=first_snapshot).to_arrow()["sku"].to_pylist()) == [
        "A-1",
        "B-2",
    ]
    assert again.properties["lakeport.source-file"] == "new.csv"

    assert (
        upload(client, auth, warehouse.id, "prices", b"sku,price,currency\nD-4,6,EUR\n").status_code
        == 200
    )
    changed = catalog.load_table("datasets.prices")
    assert changed.metadata.table_uuid != first.metadata.table_uuid
    assert changed.schema().column_names == ["sku", "price", "currency"]
    assert changed.scan().to_arrow()["sku"].to_pylist() == ["D-4"]


def test_parquet_upload_with_types_iceberg_needs_converted(client, auth, lakehouse, db_engine):
    auth.login("alice")
    warehouse = registered_warehouse(client, auth, lakehouse, db_engine, "parquet-uploads")
    source = pa.table(
        {
            "id": pa.array([1, 2], pa.int32()),
            "at": pa.array(
                [datetime(2024, 5, 1, 12), datetime(2024, 5, 2, 13)], pa.timestamp("ns")
            ),
            "zoned": pa.array(
                [datetime(2024, 5, 1, 12)] * 2, pa.timestamp("ms", tz="Europe/Berlin")
            ),
            "label": pa.array(["x", "y"]).dictionary_encode(),
            "nothing": pa.nulls(2),
        }
    )
    response = upload(
        client, auth, warehouse.id, "events", parquet_bytes(source), filename="events.csv"
    )
    page = response.get_data(as_text=True)
    assert response.status_code == 200, page
    assert "Imported 2 rows" in page and "PARQUET" in page

    table = independent_catalog(lakehouse, warehouse).load_table("datasets.events")
    result = table.scan().to_arrow().sort_by("id")
    assert result["label"].to_pylist() == ["x", "y"] and result["nothing"].to_pylist() == [
        None,
        None,
    ]
    assert result["at"].to_pylist() == [datetime(2024, 5, 1, 12), datetime(2024, 5, 2, 13)]
    assert (
        result["zoned"].to_pylist()
        == source["zoned"].cast(pa.timestamp("us", tz="UTC")).to_pylist()
    )
    assert table.properties["lakeport.source"] == "upload (parquet)"


@pytest.mark.parametrize(
    "content, message",
    [
        (
            b"a,b\n1,2\n3,4,5\n",
            "The CSV file could not be read: CSV parse error: Expected 2 columns, got 3",
        ),
        (b"", "The file is empty."),
        (gzip.compress(ORDERS_CSV), "gzip-compressed file"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "neither CSV nor Parquet"),
        ("name\nJos\xe9\n".encode("latin-1"), "not UTF-8 text"),
        (b"PAR1 then nothing that ends like Parquet", "no Parquet footer"),
        (b"a,a\n1,2\n", "appears twice"),
        (
            parquet_bytes(pa.table({"n": pa.array([1], pa.duration("s"))})),
            "Iceberg cannot hold this data",
        ),
    ],
)
def test_bad_files_are_rejected_clearly_and_the_old_table_stays(
    client, auth, lakehouse, db_engine, content, message
):
    auth.login("alice")
    warehouse = warehouse_named(db_engine, "rejects") or registered_warehouse(
        client, auth, lakehouse, db_engine, "rejects"
    )
    assert upload(client, auth, warehouse.id, "kept", b"n\n1\n2\n").status_code == 200
    response = upload(client, auth, warehouse.id, "kept", content)
    assert response.status_code == 422
    assert message in response.get_data(as_text=True)
    kept = independent_catalog(lakehouse, warehouse).load_table("datasets.kept")
    assert sorted(kept.scan().to_arrow()["n"].to_pylist()) == [1, 2]


def test_upload_form_checks_its_fields_and_the_warehouse(client, auth, lakehouse, db_engine):
    auth.login("alice")
    warehouse = registered_warehouse(client, auth, lakehouse, db_engine, "form-checks")
    bad_name = upload(client, auth, warehouse.id, "Bad Name", ORDERS_CSV)
    assert bad_name.status_code == 422 and "lowercase letters" in bad_name.get_data(as_text=True)
    no_file = client.post(
        "/workflows/datasets/upload",
        headers={"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"},
        data={"warehouse_id": str(warehouse.id), "table_name": "t"},
    )
    assert no_file.status_code == 422 and "Choose a CSV or Parquet file" in no_file.get_data(
        as_text=True
    )

    client.post(
        f"/warehouses/{warehouse.id}/deactivate", headers={"X-CSRFToken": auth.csrf_token()}
    )
    inactive = upload(client, auth, warehouse.id, "t", ORDERS_CSV)
    assert (
        inactive.status_code == 422
        and "is inactive: choose an active warehouse" in inactive.get_data(as_text=True)
    )
    page = client.get("/workflows/datasets").get_data(as_text=True)
    assert f'<option value="{warehouse.id}"' not in page  # only active warehouses are offered


def test_upload_limit(app, client, auth, lakehouse, db_engine):
    app.config["UPLOAD_MAX_MB"] = 0.01  # 10 KiB
    auth.login("alice")
    warehouse = registered_warehouse(client, auth, lakehouse, db_engine, "small-uploads")
    just_over = upload(client, auth, warehouse.id, "big", b"n\n" + b"1\n" * 6000)
    assert (
        just_over.status_code == 422
        and "larger than the upload limit of 0.01 MB" in just_over.get_data(as_text=True)
    )
    # Far over: refused from the request's length, before the body is read.
    far_over = upload(client, auth, warehouse.id, "big", b"n\n" + b"1\n" * 100_000)
    assert (
        far_over.status_code == 413
        and "larger than the upload limit of 0.01 MB" in far_over.get_data(as_text=True)
    )
    assert not independent_catalog(lakehouse, warehouse).table_exists("datasets.big")


def test_an_unreachable_catalog_is_named_and_nothing_is_started(
    portal_config, client, auth, lakehouse, db_engine, closed_port
):
    auth.login("alice")
    warehouse = registered_warehouse(client, auth, lakehouse, db_engine, "catalog-down")
    down = create_app(replace(portal_config, LAKEKEEPER_URL=f"http://127.0.0.1:{closed_port}"))
    down_client = down.test_client()
    down_auth = AuthActions(down_client, {name: user.password for name, user in TEST_USERS.items()})
    down_auth.login("alice")
    uploaded = upload(down_client, down_auth, warehouse.id, "orders", ORDERS_CSV)
    assert uploaded.status_code == 422 and "unreachable" in uploaded.get_data(as_text=True)
    sample = down_client.post(
        "/workflows/datasets/sample",
        data={"warehouse_id": warehouse.id, "scale_factor": "0.01"},
        headers={"X-CSRFToken": down_auth.csrf_token(), "HX-Request": "true"},
    )
    assert sample.status_code == 422 and "unreachable" in sample.get_data(as_text=True)
    assert 'data-testid="sample-status"' not in sample.get_data(as_text=True)


def wait_for_sample_data(client, warehouse_id: int, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = client.get(
            f"/workflows/datasets/sample/{warehouse_id}", headers={"HX-Request": "true"}
        )
        text = page.get_data(as_text=True)
        if "hx-get" not in text:  # a finished job stops polling
            return text
        time.sleep(0.5)
    raise AssertionError(f"sample data still running after {timeout} s: {text}")


def test_tpch_sample_data_writes_the_eight_tables(
    app, client, auth, lakehouse, db_engine, portal_config
):
    auth.login("alice")
    warehouse = registered_warehouse(client, auth, lakehouse, db_engine, "tpch")
    headers = {"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"}
    for bad in ("3.5", "0.001", "abc", "nan"):
        refused = client.post(
            "/workflows/datasets/sample",
            headers=headers,
            data={"warehouse_id": warehouse.id, "scale_factor": bad},
        )
        assert refused.status_code == 422 and "A number from 0.01 to 3" in refused.get_data(
            as_text=True
        )

    started = client.post(
        "/workflows/datasets/sample",
        headers=headers,
        data={"warehouse_id": warehouse.id, "scale_factor": "0.01"},
    )
    assert started.status_code == 200
    assert f'hx-get="/workflows/datasets/sample/{warehouse.id}"' in started.get_data(as_text=True)
    twice = client.post(
        "/workflows/datasets/sample",
        headers=headers,
        data={"warehouse_id": warehouse.id, "scale_factor": "0.01"},
    )
    assert twice.status_code == 422 and "already being written" in twice.get_data(as_text=True)

    # The job is a row: another web process (another app, as another gunicorn worker is) follows
    # it while the worker generates it.
    other_client = create_app(
        replace(portal_config, LAKEKEEPER_URL=lakehouse.catalog_url)
    ).test_client()
    AuthActions(other_client, {name: user.password for name, user in TEST_USERS.items()}).login(
        "alice"
    )
    waiting = other_client.get(
        f"/workflows/datasets/sample/{warehouse.id}", headers={"HX-Request": "true"}
    )
    assert waiting.status_code == 200 and "waiting for the worker" in waiting.get_data(as_text=True)
    background = Worker(app).start()
    try:
        final = wait_for_sample_data(other_client, warehouse.id)
    finally:
        background.stop()
    assert "done" in final and "tpch.lineitem" in final and "60,175" in final

    catalog = independent_catalog(lakehouse, warehouse)
    assert sorted(name for _, name in catalog.list_tables("tpch")) == sorted(TPCH_ROWS_AT_SF_0_01)
    for name, expected in TPCH_ROWS_AT_SF_0_01.items():
        table = catalog.load_table(f"tpch.{name}")
        assert int(table.current_snapshot().summary["total-records"]) == expected, name
        assert table.properties["lakeport.tpch-scale-factor"] == "0.01"
    nations = catalog.load_table("tpch.nation").scan().to_arrow()
    assert nations.num_rows == 25 and "GERMANY" in nations["n_name"].to_pylist()
    # The data-sources page shows the finished job.
    assert "tpch.region" in client.get("/workflows/datasets").get_data(as_text=True)


def test_bob_gets_404_for_alices_warehouse_on_every_data_source_route(
    client, auth, lakehouse, db_engine
):
    auth.login("alice")
    warehouse = registered_warehouse(client, auth, lakehouse, db_engine, "alices-data")
    auth.logout()
    auth.login("bob")
    token = {"X-CSRFToken": auth.csrf_token()}
    for headers in (token, {**token, "HX-Request": "true"}):
        uploaded = upload(client, auth, warehouse.id, "stolen", ORDERS_CSV)
        assert uploaded.status_code == 404
        sample = client.post(
            "/workflows/datasets/sample",
            headers=headers,
            data={"warehouse_id": warehouse.id, "scale_factor": "0.01"},
        )
        assert sample.status_code == 404
        assert (
            client.get(f"/workflows/datasets/sample/{warehouse.id}", headers=headers).status_code
            == 404
        )
    assert "alices-data" not in client.get("/workflows/datasets").get_data(as_text=True)
    catalog = independent_catalog(lakehouse, warehouse)
    assert not catalog.namespace_exists("datasets") and not catalog.namespace_exists("tpch")
