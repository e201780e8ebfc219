"""Storage figures of a warehouse's Iceberg tables, from their snapshot summaries: what a table
holds now (`live_storage`) and what was ever written into it (`written_storage`), without
reading any data file. The usage pass (app/usage/work.py) stores them as samples.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table

from app.iceberg_catalogs import ResultReadError, guarded
from app.iceberg_reader import table_names


@dataclass(frozen=True)
class StorageFigure:
    """Bytes and files, as Iceberg's snapshot summaries count them (data and delete files)."""

    bytes: int = 0
    files: int = 0
    tables: int = 0

    def __add__(self, other: "StorageFigure") -> "StorageFigure":
        return StorageFigure(
            self.bytes + other.bytes, self.files + other.files, self.tables + other.tables
        )


def _figure(summary, kind: str, tables: int = 0) -> StorageFigure:
    """A snapshot summary's `<kind>-files-size` bytes and `<kind>-data-files` + `<kind>-delete-files`
    files (`kind`: "total" or "added"); a figure the summary lacks counts 0."""

    def number(key: str) -> int:
        value = summary.get(key) if summary is not None else None
        return int(value) if value is not None else 0

    return StorageFigure(
        number(f"{kind}-files-size"),
        number(f"{kind}-data-files") + number(f"{kind}-delete-files"),
        tables,
    )


def live_storage(table: Table) -> StorageFigure:
    """What the table's current snapshot references: `total-files-size`, data + delete files."""
    snapshot = table.current_snapshot()
    return _figure(snapshot.summary if snapshot else None, "total", tables=1)


def written_storage(table: Table) -> StorageFigure:
    """What was ever written into the table: `added-files-size` over all its snapshots (files a
    later snapshot replaced count too: they were written)."""
    return sum(
        (_figure(snapshot.summary, "added") for snapshot in table.snapshots()),
        StorageFigure(tables=1),
    )


def _load(catalog: RestCatalog, name: str, missing: tuple[type[Exception], ...]) -> Table | None:
    """The table, or None when the catalog's failure is one of `missing` (it is gone)."""
    try:
        return guarded(lambda: catalog.load_table(name))
    except ResultReadError as error:
        if isinstance(error.__cause__, missing):
            return None
        raise


def namespace_storage(catalog: RestCatalog, namespace: str, workers: int = 4) -> StorageFigure:
    """The live storage of every table in `namespace` (one catalog call per table, a few at once)."""

    def measure(name: str) -> StorageFigure:
        table = _load(catalog, name, (NoSuchTableError,))
        return (
            live_storage(table) if table is not None else StorageFigure()
        )  # None: dropped since it was listed

    with ThreadPoolExecutor(workers, thread_name_prefix="measure") as pool:
        return sum(pool.map(measure, table_names(catalog, namespace)), StorageFigure())


def tables_written(catalog: RestCatalog, table_names: list[str]) -> StorageFigure:
    """What was written into these tables; a table that no longer exists counts nothing."""
    tables = (
        _load(catalog, name, (NoSuchTableError, NoSuchNamespaceError)) for name in table_names
    )
    return sum((written_storage(table) for table in tables if table is not None), StorageFigure())


@dataclass(frozen=True)
class TableHealth:
    """A table's current files as its manifests list them, and its snapshots' history:
    `small_files` are data files below `small_file_bytes`; `last_compaction_ms` is the commit
    time of the newest `replace` snapshot that rewrote data files (None: never compacted);
    `snapshot_commits` every snapshot's (id, commit time in ms), oldest first."""

    data_files: int
    data_bytes: int
    small_files: int
    small_file_bytes: int
    delete_files: int
    records: int
    snapshots: int
    snapshot_commits: tuple[tuple[int, int], ...]
    current_snapshot_id: int | None
    last_compaction_ms: int | None

    @property
    def average_file_bytes(self) -> int | None:
        return self.data_bytes // self.data_files if self.data_files else None


def table_health(catalog: RestCatalog, table_name: str, small_file_bytes: int) -> TableHealth:
    def read() -> TableHealth:
        table = catalog.load_table(table_name)
        current = table.current_snapshot()
        sizes, deletes, records = [], 0, 0
        for manifest in current.manifests(table.io) if current else []:
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.data_file.content == DataFileContent.DATA:
                    sizes.append(entry.data_file.file_size_in_bytes)
                    records += entry.data_file.record_count
                else:
                    deletes += 1
        snapshots = sorted(table.snapshots(), key=lambda snapshot: snapshot.timestamp_ms)
        compactions = [
            snapshot.timestamp_ms
            for snapshot in snapshots
            if snapshot.summary is not None
            and snapshot.summary.operation.value == "replace"
            and int(snapshot.summary.get("deleted-data-files") or 0) > 0
        ]
        return TableHealth(
            data_files=len(sizes),
            data_bytes=sum(sizes),
            small_files=sum(1 for size in sizes if size < small_file_bytes),
            small_file_bytes=small_file_bytes,
            delete_files=deletes,
            records=records,
            snapshots=len(snapshots),
            snapshot_commits=tuple((s.snapshot_id, s.timestamp_ms) for s in snapshots),
            current_snapshot_id=current.snapshot_id if current else None,
            last_compaction_ms=compactions[-1] if compactions else None,
        )

    return guarded(read)
