"""Reading tables from a warehouse through pyiceberg, for the portal's result and table pages
(the catalogs are app/iceberg_catalogs.py's).

Paging without scanning: a page is located from metadata only. The count is the snapshot's
`total-records`; the data files (in a fixed order: by path, which keeps a Spark write's task
order) carry their record counts in the manifests, and each Parquet footer carries its row
groups' counts. So page 50,000 opens one file, decodes one row group up to the page and
stops: no other file is read. The file plan per snapshot and the footers per file are cached
(both are immutable). Tables with row-level deletes have no exact counts in metadata; they
are read through pyiceberg's own scan, which applies the deletes.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table

from app.iceberg_catalogs import guarded

logger = logging.getLogger(__name__)

# Rows decoded per step while skipping to a page inside a row group.
SKIP_BATCH_ROWS = 65_536
# Rows per chunk of a CSV download.
CSV_BATCH_ROWS = 10_000
# Rows of a table read whole to be filtered (console logs are far smaller).
WHOLE_TABLE_MAX_ROWS = 200_000
_PARQUET_FIELD_ID = b"PARQUET:field_id"
_NUMERIC_TYPES = ("int", "long", "float", "double", "decimal")


# --- Pages and downloads -----------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One page of a table: `rows` as tuples of Python values, in `columns` order."""

    rows: list[tuple]
    columns: list[str]
    total_rows: int
    page: int
    size: int
    types: tuple[str, ...] = ()  # Iceberg type of each column, e.g. "long", "decimal(10, 2)"

    @property
    def numeric_columns(self) -> set[int]:
        """Indexes of the columns that hold numbers (shown right-aligned)."""
        return {index for index, type_ in enumerate(self.types) if type_.startswith(_NUMERIC_TYPES)}

    @property
    def pages(self) -> int:
        return _pages(self.total_rows, self.size)

    @property
    def first_row(self) -> int:
        """1-based number of the page's first row (0 when the page is empty)."""
        return (self.page - 1) * self.size + 1 if self.rows else 0


def read_page(catalog: RestCatalog, table_name: str, page: int, size: int) -> Page:
    """Rows `(page - 1) * size` up to `page * size` of the table (0-based, in page order), with
    its total row count. A page past the last one reads as the last one."""
    if page < 1 or size < 1:
        raise ValueError("page and size start at 1")

    def read() -> Page:
        table = catalog.load_table(table_name)
        fields = table.schema().fields
        columns = [field.name for field in fields]
        total = _total_rows(table, _ordered_tasks(table))
        # A page past the end (a stale link, a typed number) shows the last page.
        page_number = min(page, _pages(total, size))
        rows = [
            row for batch in _take(table, (page_number - 1) * size, size) for row in _rows(batch)
        ]
        return Page(
            rows=rows,
            columns=columns,
            total_rows=total,
            page=page_number,
            size=size,
            types=tuple(str(field.field_type) for field in fields),
        )

    return guarded(read)


@dataclass(frozen=True)
class WholeTable:
    """A small table read whole (an execution's console logs), to filter before paging."""

    rows: pa.Table
    types: tuple[str, ...]

    def page(self, page: int, size: int) -> Page:
        """Page `page` of `rows` (a page past the end reads as the last one)."""
        total = self.rows.num_rows
        page_number = min(max(1, page), _pages(total, size))
        return Page(
            rows=_rows(self.rows.slice((page_number - 1) * size, size)),
            columns=list(self.rows.column_names),
            total_rows=total,
            page=page_number,
            size=size,
            types=self.types,
        )


def read_whole(
    catalog: RestCatalog, table_name: str, max_rows: int = WHOLE_TABLE_MAX_ROWS
) -> WholeTable:
    """The table's current snapshot in page order, up to `max_rows` rows; cached per snapshot
    (snapshots are immutable)."""

    def read() -> WholeTable:
        table = catalog.load_table(table_name)
        types = tuple(str(field.field_type) for field in table.schema().fields)
        snapshot = table.current_snapshot()
        key = (str(table.metadata.table_uuid), snapshot.snapshot_id if snapshot else None)
        rows = _whole_tables.get(key)
        if rows is None:
            batches = _take(table, 0, max_rows)
            # Files written at different times may differ in string widths: promote to one schema.
            rows = (
                pa.concat_tables(
                    [pa.Table.from_batches([batch]) for batch in batches],
                    promote_options="permissive",
                )
                if batches
                else schema_to_pyarrow(table.schema(), include_field_ids=False).empty_table()
            )
            _whole_tables.put(key, rows)
        return WholeTable(rows=rows, types=types)

    return guarded(read)


@dataclass(frozen=True)
class TableShape:
    """A table's columns (name → type) and row count, from its metadata alone."""

    columns: dict[str, str]
    total_rows: int


def table_shape(catalog: RestCatalog, table_name: str) -> TableShape:
    def read() -> TableShape:
        table = catalog.load_table(table_name)
        return TableShape(
            columns={field.name: str(field.field_type) for field in table.schema().fields},
            total_rows=_total_rows(table, _ordered_tasks(table)),
        )

    return guarded(read)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    required: bool
    doc: str | None


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    committed_at_ms: int
    operation: str
    added_records: int | None
    added_bytes: int | None


@dataclass(frozen=True)
class TableOverview:
    """What a table page shows: schema, properties, snapshots (newest first) and current size."""

    name: str
    location: str
    columns: list[Column]
    properties: dict[str, str]
    snapshots: list[SnapshotInfo]
    total_records: int | None
    total_bytes: int | None
    total_data_files: int | None


def table_overview(catalog: RestCatalog, table_name: str) -> TableOverview:
    def read() -> TableOverview:
        table = catalog.load_table(table_name)
        metadata = table.metadata

        def count(summary, key: str) -> int | None:
            value = summary.get(key) if summary is not None else None
            return int(value) if value not in (None, "") else None

        snapshots = [
            SnapshotInfo(
                snapshot.snapshot_id,
                snapshot.timestamp_ms,
                snapshot.summary.operation.value if snapshot.summary else "",
                count(snapshot.summary, "added-records"),
                count(snapshot.summary, "added-files-size"),
            )
            for snapshot in sorted(metadata.snapshots, key=lambda s: s.timestamp_ms, reverse=True)
        ]
        current = table.current_snapshot()
        summary = current.summary if current else None
        return TableOverview(
            name=table_name,
            location=metadata.location,
            columns=[
                Column(field.name, str(field.field_type), field.required, field.doc)
                for field in table.schema().fields
            ],
            properties=dict(metadata.properties),
            snapshots=snapshots,
            total_records=count(summary, "total-records"),
            total_bytes=count(summary, "total-files-size"),
            total_data_files=count(summary, "total-data-files"),
        )

    return guarded(read)


def stream_csv(catalog: RestCatalog, table_name: str) -> Iterator[bytes]:
    """The whole table as CSV, in page order, in chunks: a header, then CSV_BATCH_ROWS rows at a time.

    The table is loaded before the first chunk, so a missing table fails before any byte is sent.
    """
    table = guarded(lambda: catalog.load_table(table_name))
    schema = table.schema()

    def chunks() -> Iterator[bytes]:
        yield _csv_header([field.name for field in schema.fields])
        with closing(_batches_from(table, 0, batch_rows=CSV_BATCH_ROWS)) as batches:
            while True:
                batch = guarded(lambda: next(batches, None))
                if batch is None:
                    return
                if batch.num_rows:
                    yield _csv_rows(batch)

    return chunks()


def _pages(total_rows: int, size: int) -> int:
    return max(1, -(-total_rows // size))


def _rows(rows: pa.RecordBatch | pa.Table) -> list[tuple]:
    return list(zip(*(column.to_pylist() for column in rows.columns)))


def _take(table: Table, start: int, count: int) -> list[pa.RecordBatch]:
    """Up to `count` rows from row `start` on (0-based, page order), as the batches they come in."""
    taken, rows = [], 0
    with closing(_batches_from(table, start)) as batches:
        for batch in batches:
            taken.append(batch.slice(0, count - rows))
            rows += taken[-1].num_rows
            if rows >= count:
                break
    return taken


def _csv_header(columns: list[str]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(columns)
    return buffer.getvalue().encode()


def _csv_rows(batch: pa.RecordBatch) -> bytes:
    sink = io.BytesIO()
    pa_csv.write_csv(_csv_writable(batch), sink, pa_csv.WriteOptions(include_header=False))
    return sink.getvalue()


def _csv_writable(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Arrow's CSV writer takes flat types only: nested and binary values become JSON / hex text."""
    arrays = []
    for column in batch.columns:
        kind = column.type
        if pa.types.is_nested(kind):
            column = pa.array(
                [
                    None if value is None else json.dumps(value, default=str)
                    for value in column.to_pylist()
                ],
                pa.string(),
            )
        elif (
            pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind)
            or pa.types.is_fixed_size_binary(kind)
        ):
            column = pa.array(
                [None if value is None else value.hex() for value in column.to_pylist()],
                pa.string(),
            )
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


# --- Locating rows from metadata -----------------------------------------------------------


class _LruCache:
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


# (table uuid, snapshot id) → the snapshot's scan tasks in page order; file path → Parquet footer.
_file_plans = _LruCache(64)
_footers = _LruCache(1024)
# (table uuid, snapshot id) → the snapshot read whole (read_whole).
_whole_tables = _LruCache(16)


def _ordered_tasks(table: Table) -> list[FileScanTask]:
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    key = (str(table.metadata.table_uuid), snapshot.snapshot_id)
    tasks = _file_plans.get(key)
    if tasks is None:
        tasks = sorted(table.scan().plan_files(), key=lambda task: task.file.file_path)
        _file_plans.put(key, tasks)
    return tasks


def _total_rows(table: Table, tasks: list[FileScanTask]) -> int:
    if any(task.delete_files for task in tasks):
        return table.scan().count()
    snapshot = table.current_snapshot()
    recorded = snapshot.summary.get("total-records") if snapshot else None
    return int(recorded) if recorded is not None else sum(task.file.record_count for task in tasks)


def _batches_from(
    table: Table, start: int, batch_rows: int = SKIP_BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """The table's rows from row `start` on (0-based, page order), in the table's current schema."""
    tasks = _ordered_tasks(table)
    schema = table.schema()
    if any(task.delete_files for task in tasks):
        yield from _batches_applying_deletes(table, tasks, start)
        return
    skip = start
    for task in tasks:
        if skip >= task.file.record_count:
            skip -= task.file.record_count
            continue
        yield from _file_batches(table, task.file.file_path, schema, skip, batch_rows)
        skip = 0


def _file_batches(
    table: Table, path: str, schema: Schema, skip: int, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    footer = _footers.get(path)
    with table.io.new_input(path).open() as stream:
        parquet = pq.ParquetFile(stream, metadata=footer)
        if footer is None:
            footer = parquet.metadata
            _footers.put(path, footer)
        for row_group in range(footer.num_row_groups):
            group_rows = footer.row_group(row_group).num_rows
            if skip >= group_rows:
                skip -= group_rows
                continue
            for batch in _skipping(
                parquet.iter_batches(batch_size=batch_rows, row_groups=[row_group]), skip
            ):
                yield _in_table_schema(batch, schema)
            skip = 0


def _in_table_schema(batch: pa.RecordBatch, schema: Schema) -> pa.RecordBatch:
    """A file's batch with the table's current column names and order: columns are matched by
    Iceberg field id (so renamed columns read right); columns added later read as nulls."""
    by_id: dict[int, int] = {}
    by_name = {name: index for index, name in enumerate(batch.schema.names)}
    for index, field in enumerate(batch.schema):
        if field.metadata and _PARQUET_FIELD_ID in field.metadata:
            by_id[int(field.metadata[_PARQUET_FIELD_ID])] = index
    arrays = []
    for field in schema.fields:
        index = by_id.get(field.field_id) if by_id else by_name.get(field.name)
        arrays.append(batch.column(index) if index is not None else pa.nulls(batch.num_rows))
    return pa.RecordBatch.from_arrays(arrays, names=[field.name for field in schema.fields])


def _batches_applying_deletes(
    table: Table, tasks: list[FileScanTask], start: int
) -> Iterator[pa.RecordBatch]:
    """Row-level deletes make record counts inexact: read file by file through pyiceberg, which
    applies them, and skip rows by counting."""
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    yield from _skipping(
        (batch for task in tasks for batch in scan.to_record_batches([task])), start
    )


def _skipping(batches: Iterable[pa.RecordBatch], skip: int) -> Iterator[pa.RecordBatch]:
    """`batches` but their first `skip` rows."""
    for batch in batches:
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        yield batch.slice(skip)
        skip = 0


def table_names(catalog: RestCatalog, namespace: str) -> list[str]:
    """The tables of a namespace, as `namespace.table`."""
    return [".".join(identifier) for identifier in guarded(lambda: catalog.list_tables(namespace))]


def list_namespaces(catalog: RestCatalog) -> list[str]:
    """The warehouse's top-level namespaces, dotted."""
    return [".".join(namespace) for namespace in guarded(catalog.list_namespaces)]
