"""Result reading through pyiceberg (app/iceberg_reader.py) against the real lakehouse: the dev
catalog in front of SeaweedFS. Tables are written with pyiceberg, in several data files and
several row groups per file, so that pages cross both boundaries."""

from __future__ import annotations

import csv
import io
import secrets
import threading
import time

import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO
from pyiceberg.types import StringType

from app import iceberg_reader
from app.iceberg_catalogs import ResultReadError, WarehouseCatalogs
from app.iceberg_reader import read_page, stream_csv
from app.lakekeeper.client import DEFAULT_PROJECT_ID, LakekeeperClient
from app.lakekeeper.resources import S3AccessKeyCredential, S3StorageProfile
from app.lakekeeper.tokens import ClientCredentialsTokenSource
from compute.run.iceberg_rest import (
    MetadataOnceTransaction,
    SmallWritesFileIO,
    _LengthNotingStream,
    commit_together,
    rest_catalog,
)
from devstack.oidc_provider import SERVICE_CLIENT_ID
from devstack.seaweedfs import TEST_USER_KEYS

# Rows per appended data file; each file is cut into row groups of ROW_GROUP_ROWS.
FILE_ROWS = (23, 17, 31)
ROW_GROUP_ROWS = 5
TOTAL_ROWS = sum(FILE_ROWS)
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("label", pa.string()), ("amount", pa.float64())]
)


@pytest.fixture(scope="module")
def token_source(lakehouse):
    with ClientCredentialsTokenSource(
        client_id=SERVICE_CLIENT_ID,
        client_secret=lakehouse.oidc.service_client_secret,
        issuer=lakehouse.oidc.issuer,
    ) as source:
        yield source


@pytest.fixture(scope="module")
def warehouse(lakehouse, token_source):
    """A warehouse in alice's bucket, registered in the dev catalog: (lakekeeper id, name)."""
    keys = TEST_USER_KEYS["alice"]
    name = f"reader-{secrets.token_hex(3)}"
    with LakekeeperClient(lakehouse.catalog_url, token_source) as client:
        created = client.create_warehouse(
            name,
            S3StorageProfile(
                bucket=keys.bucket,
                region="us-east-1",
                key_prefix=f"tests/{name}",
                endpoint=lakehouse.s3_endpoint,
                path_style_access=True,
                flavor="s3-compat",
            ),
            S3AccessKeyCredential(keys.access_key_id, keys.secret_access_key),
        )
    return created.id, created.name


@pytest.fixture(scope="module")
def catalogs(lakehouse, token_source):
    return WarehouseCatalogs(
        f"{lakehouse.catalog_url}/catalog", token_source, project_id=DEFAULT_PROJECT_ID
    )


@pytest.fixture(scope="module")
def catalog(catalogs, warehouse):
    return catalogs.catalog(*warehouse)


@pytest.fixture(scope="module")
def numbers(catalog) -> str:
    """results.numbers: ids 0..TOTAL_ROWS-1, appended file by file in FILE_ROWS pieces."""
    catalog.create_namespace("results")
    table = catalog.create_table(
        "results.numbers",
        schema=SCHEMA,
        properties={"write.parquet.row-group-limit": str(ROW_GROUP_ROWS)},
    )
    start = 0
    for rows in FILE_ROWS:
        ids = list(range(start, start + rows))
        table.append(
            pa.table(
                {
                    "id": ids,
                    "label": [f'row {i}, "quoted"' for i in ids],
                    "amount": [i / 4 for i in ids],
                },
                schema=SCHEMA,
            )
        )
        start += rows
    return "results.numbers"


def all_ids(catalog, table: str, size: int) -> list[int]:
    first = read_page(catalog, table, 1, size)
    ids = [row[0] for row in first.rows]
    for number in range(2, first.pages + 1):
        ids += [row[0] for row in read_page(catalog, table, number, size).rows]
    return ids


def test_the_table_really_has_several_files_and_row_groups(catalog, numbers):
    table = catalog.load_table(numbers)
    tasks = list(table.scan().plan_files())
    assert sorted(task.file.record_count for task in tasks) == sorted(FILE_ROWS)
    footer = iceberg_reader.pq.ParquetFile(
        table.io.new_input(tasks[0].file.file_path).open()
    ).metadata
    assert footer.num_row_groups > 1


@pytest.fixture(scope="module")
def row_order(catalog, numbers) -> list[int]:
    """The ids in page order, read as one page (which reads the files one after the other)."""
    return [row[0] for row in read_page(catalog, numbers, 1, 100).rows]


def test_one_page_holds_every_row_with_each_file_in_its_own_order(row_order):
    assert sorted(row_order) == list(range(TOTAL_ROWS))
    start = 0
    for rows in FILE_ROWS:
        position = row_order.index(start)
        assert row_order[position : position + rows] == list(range(start, start + rows))
        start += rows


@pytest.mark.parametrize("size", [3, 5, 7, 23])
def test_pages_of_any_size_read_the_same_rows_in_the_same_order(catalog, numbers, row_order, size):
    assert all_ids(catalog, numbers, size) == row_order


def test_a_page_across_a_file_boundary(catalog, numbers, row_order):
    starts = [sum(FILE_ROWS[:index]) for index in range(len(FILE_ROWS))]
    first_file_rows = FILE_ROWS[starts.index(row_order[0])]
    number = first_file_rows // 10 + 1  # none of FILE_ROWS is a multiple of 10
    page = read_page(catalog, numbers, number, 10)
    assert page.columns == ["id", "label", "amount"]
    assert [row[0] for row in page.rows] == row_order[(number - 1) * 10 : number * 10]
    first = page.rows[0][0]
    assert page.rows[0] == (first, f'row {first}, "quoted"', first / 4)


def test_total_count_and_the_last_partial_page(catalog, numbers):
    page = read_page(catalog, numbers, 8, 10)
    assert page.total_rows == TOTAL_ROWS == 71
    assert page.pages == 8
    assert len(page.rows) == 1
    assert page.first_row == 71


def test_a_page_past_the_end_reads_as_the_last_page(catalog, numbers):
    page = read_page(catalog, numbers, 999, 25)
    assert page.page == 3 and len(page.rows) == TOTAL_ROWS - 50


def test_renamed_and_added_columns_read_by_field_id(catalog):
    table = catalog.create_table("results.evolving", schema=pa.schema([("n", pa.int64())]))
    table.append(pa.table({"n": [1, 2, 3]}))
    with table.update_schema() as update:
        update.rename_column("n", "number")
        update.add_column("note", StringType())
    page = read_page(catalog, "results.evolving", 1, 10)
    assert page.columns == ["number", "note"]
    assert sorted(page.rows) == [(1, None), (2, None), (3, None)]


class ChosenByTheTable(PyArrowFileIO):
    """A FileIO a table's own properties name: no reader must ever make one."""

    made: list[dict] = []

    def __init__(self, properties=None) -> None:
        ChosenByTheTable.made.append(dict(properties or {}))
        super().__init__(properties or {})


def test_a_tables_own_properties_never_choose_how_its_files_are_reached(
    catalog, warehouse, lakehouse, token_source, closed_port
):
    """Whoever may alter a table (a user's code; the owner of a warehouse shared with others) sets
    properties that pyiceberg would merge over the reader's: the class it imports and makes to
    read the files, and a proxy for its storage requests. The portal's catalogs and an
    execution's catalog on a unit ignore them."""
    catalog.create_namespace_if_not_exists("results")
    table = catalog.create_table("results.chooser", schema=pa.schema([("n", pa.int64())]))
    table.append(pa.table({"n": [1, 2, 3]}))
    with table.transaction() as transaction:
        transaction.set_properties(
            {
                "py-io-impl": f"{__name__}.{ChosenByTheTable.__qualname__}",
                "s3.proxy-uri": f"http://127.0.0.1:{closed_port}",
            }
        )
    ChosenByTheTable.made.clear()

    page = read_page(catalog, "results.chooser", 1, 10)  # the portal's catalog
    assert sorted(page.rows) == [(1,), (2,), (3,)]
    execution_catalog = rest_catalog(
        "execution-test", f"{lakehouse.catalog_url}/catalog", warehouse[1], token_source.token()
    )
    loaded = execution_catalog.load_table("results.chooser")
    assert sorted(loaded.scan().to_arrow()["n"].to_pylist()) == [1, 2, 3]
    assert ChosenByTheTable.made == []
    assert (
        type(loaded.io) is SmallWritesFileIO
        and type(catalog.load_table("results.chooser").io) is not ChosenByTheTable
    )
    assert (
        loaded.properties["s3.proxy-uri"] == f"http://127.0.0.1:{closed_port}"
    )  # the table keeps its properties


def test_a_units_writes_know_their_files_lengths_without_asking_the_storage(
    catalog, warehouse, lakehouse, token_source, monkeypatch
):
    """pyiceberg asks for the length of every data file and manifest it writes, which a plain
    PyArrowFile answers with a HEAD request; a unit's FileIO answers from the bytes it wrote,
    and the lengths it records are the stored files' own."""
    execution_catalog = rest_catalog(
        "length-test", f"{lakehouse.catalog_url}/catalog", warehouse[1], token_source.token()
    )
    execution_catalog.create_namespace_if_not_exists("results")
    table = execution_catalog.create_table("results.lengths", schema=SCHEMA)
    asked, ask = [], PyArrowFile._file_info
    monkeypatch.setattr(
        PyArrowFile, "_file_info", lambda file: asked.append(file.location) or ask(file)
    )
    table.append(
        pa.table(
            {"id": [1, 2, 3], "label": ["a", "b", None], "amount": [0.5, 1.5, 2.5]}, schema=SCHEMA
        )
    )
    monkeypatch.undo()

    assert asked == []
    storage = PyArrowFileIO(properties=table.io.properties)  # asks the storage for each length
    manifests = table.current_snapshot().manifests(table.io)
    data_files = [
        entry.data_file
        for manifest in manifests
        for entry in manifest.fetch_manifest_entry(table.io)
    ]
    assert manifests and data_files
    assert [manifest.manifest_length for manifest in manifests] == [
        len(storage.new_input(manifest.manifest_path)) for manifest in manifests
    ]
    assert [data.file_size_in_bytes for data in data_files] == [
        len(storage.new_input(data.file_path)) for data in data_files
    ]
    assert sorted(
        execution_catalog.load_table("results.lengths").scan().to_arrow()["id"].to_pylist()
    ) == [1, 2, 3]

    # A write that did not reach the storage has no length of its own: the storage is asked.
    unstored = table.io.new_output(f"s3://no-such-bucket-{secrets.token_hex(4)}/lost.bin")
    with unstored.create(overwrite=True) as stream:
        stream.write(b"never stored")
    with pytest.raises(OSError):
        table.io.wait_for_uploads()
    with pytest.raises(OSError):
        len(unstored)


def test_a_records_files_are_stored_side_by_side_and_committed_once_all_are_stored(
    warehouse, lakehouse, token_source, monkeypatch
):
    """A unit's FileIO stores each closed file on an upload thread: an append's data file,
    manifest and manifest list are in flight together, and its commit is sent only once all
    three are stored."""
    execution_catalog = rest_catalog(
        "upload-test", f"{lakehouse.catalog_url}/catalog", warehouse[1], token_source.token()
    )
    execution_catalog.create_namespace_if_not_exists("results")
    table = execution_catalog.create_table("results.side_by_side", schema=SCHEMA)
    events, in_flight, lock = [], [0], threading.Lock()
    store = _LengthNotingStream._store

    def slow_store(stream):
        with lock:
            in_flight[0] += 1
            events.append(("storing", in_flight[0]))
        time.sleep(0.3)  # a slow storage: what is closed meanwhile is stored beside it
        try:
            store(stream)
        finally:
            with lock:
                in_flight[0] -= 1
                events.append(("stored", stream._file.location))

    post = execution_catalog._session.post

    def recording_post(url, *args, **kwargs):
        events.append(("commit", url))
        return post(url, *args, **kwargs)

    monkeypatch.setattr(_LengthNotingStream, "_store", slow_store)
    monkeypatch.setattr(execution_catalog._session, "post", recording_post)
    transaction = MetadataOnceTransaction(table)
    transaction.append(pa.table({"id": [1], "label": ["a"], "amount": [0.5]}, schema=SCHEMA))
    commit_together(execution_catalog, [transaction])
    monkeypatch.undo()

    stored = [event for event in events if event[0] == "stored"]
    assert len(stored) == 3  # data file, manifest, manifest list
    assert max(count for kind, count in events if kind == "storing") == 3  # all three at once
    assert [kind for kind, _ in events].index("commit") > max(
        events.index(event) for event in stored
    )
    assert sorted(
        execution_catalog.load_table("results.side_by_side").scan().to_arrow()["id"].to_pylist()
    ) == [1]


def test_a_commit_whose_files_were_not_stored_is_not_sent(
    warehouse, lakehouse, token_source, closed_port
):
    """An upload that fails fails the commit that would name its file, before the commit is
    sent, through the multi-table commit and through pyiceberg's own: the table is unchanged."""
    execution_catalog = rest_catalog(
        "unstored-test", f"{lakehouse.catalog_url}/catalog", warehouse[1], token_source.token()
    )
    execution_catalog.create_namespace_if_not_exists("results")
    table = execution_catalog.create_table("results.unstored", schema=SCHEMA)
    # The same table, its files sent to a storage that refuses connections.
    table.io = SmallWritesFileIO(
        {
            **table.io.properties,
            "s3.endpoint": f"http://127.0.0.1:{closed_port}",
            "s3.connect-timeout": "1",
            "s3.request-timeout": "1",
        }
    )
    rows = pa.table({"id": [1], "label": ["a"], "amount": [0.5]}, schema=SCHEMA)
    for commit in (
        lambda transaction: commit_together(execution_catalog, [transaction]),
        lambda transaction: transaction.commit_transaction(),
    ):
        transaction = MetadataOnceTransaction(table)
        transaction.append(rows)  # its files are closed; their uploads fail behind it
        with pytest.raises(OSError):
            commit(transaction)
        assert execution_catalog.load_table("results.unstored").current_snapshot() is None


def test_an_empty_table_has_no_rows(catalog):
    catalog.create_table("results.empty", schema=SCHEMA)
    page = read_page(catalog, "results.empty", 1, 50)
    assert (page.rows, page.columns, page.total_rows, page.pages) == (
        [],
        ["id", "label", "amount"],
        0,
        1,
    )


def test_csv_streams_the_whole_table_in_chunks_in_page_order(
    catalog, numbers, row_order, monkeypatch
):
    monkeypatch.setattr(iceberg_reader, "CSV_BATCH_ROWS", 8)
    chunks = list(stream_csv(catalog, numbers))
    assert len(chunks) > TOTAL_ROWS // 8
    rows = list(csv.reader(io.StringIO(b"".join(chunks).decode())))
    assert rows[0] == ["id", "label", "amount"]
    assert [int(row[0]) for row in rows[1:]] == row_order
    assert rows[1][1] == f'row {rows[1][0]}, "quoted"'


def test_a_missing_table_is_a_clear_error_before_any_csv_byte(catalog, numbers):
    with pytest.raises(ResultReadError, match="does not exist"):
        read_page(catalog, "results.nothing_here", 1, 10)
    with pytest.raises(ResultReadError, match="does not exist"):
        stream_csv(catalog, "results.nothing_here")


def test_one_catalog_per_warehouse_created_once_and_renewed_on_rename(
    catalogs, warehouse, token_source
):
    lakekeeper_id, name = warehouse
    created = []
    threads = [
        threading.Thread(target=lambda: created.append(catalogs.catalog(lakekeeper_id, name)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(catalog) for catalog in created}) == 1
    # Tokens come from the token source per request; none is kept in the catalog's properties.
    assert token_source.token() not in str(created[0].properties)
    catalogs.forget(lakekeeper_id)
    assert catalogs.catalog(lakekeeper_id, name) is not created[0]


def test_an_unreachable_catalog_fails_fast_with_a_clear_message(token_source, closed_port):
    dead = WarehouseCatalogs(
        f"http://127.0.0.1:{closed_port}/catalog",
        token_source,
        project_id=DEFAULT_PROJECT_ID,
        timeout=2,
    )
    with pytest.raises(ResultReadError, match="unreachable"):
        dead.catalog("00000000-0000-0000-0000-00000000abcd", "nowhere")


def test_a_table_read_whole_pages_like_any_other():
    whole = iceberg_reader.WholeTable(
        pa.table({"n": list(range(1, 8)), "s": list("abcdefg")}), ("long", "string")
    )
    second = whole.page(2, 3)
    assert (second.rows, second.columns, second.total_rows, second.pages) == (
        [(4, "d"), (5, "e"), (6, "f")],
        ["n", "s"],
        7,
        3,
    )
    assert second.first_row == 4 and second.numeric_columns == {0}
    past_the_end = whole.page(9, 3)  # a stale link reads as the last page
    assert past_the_end.page == 3 and past_the_end.rows == [(7, "g")]
    empty = iceberg_reader.WholeTable(pa.table({"n": pa.array([], pa.int64())}), ("long",)).page(
        1, 50
    )
    assert (empty.rows, empty.total_rows, empty.page, empty.first_row) == ([], 0, 1, 0)
