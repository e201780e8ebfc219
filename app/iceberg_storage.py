"""Storage figures of a warehouse's Iceberg tables, from their snapshot summaries: what a table
holds now (`live_storage`) and what was ever written into it (`written_storage`), without
reading any data file. The usage pass (app/usage/accounting.py) stores them as samples.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
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
        return StorageFigure(self.bytes + other.bytes, self.files + other.files, self.tables + other.tables)


def _summary_int(summary, key: str) -> int:
    value = summary.get(key) if summary is not None else None
    return int(value) if value is not None else 0


def live_storage(table: Table) -> StorageFigure:
    """What the table's current snapshot references: `total-files-size`, data + delete files."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return StorageFigure(tables=1)
    summary = snapshot.summary
    return StorageFigure(_summary_int(summary, "total-files-size"),
                         _summary_int(summary, "total-data-files") + _summary_int(summary, "total-delete-files"), 1)


def written_storage(table: Table) -> StorageFigure:
    """What was ever written into the table: `added-files-size` over all its snapshots (files a
    later snapshot replaced count too: they were written)."""
    added = StorageFigure(tables=1)
    for snapshot in table.snapshots():
        summary = snapshot.summary
        added += StorageFigure(_summary_int(summary, "added-files-size"),
                               _summary_int(summary, "added-data-files") + _summary_int(summary, "added-delete-files"))
    return added


def namespace_storage(catalog: RestCatalog, namespace: str, workers: int = 4) -> StorageFigure:
    """The live storage of every table in `namespace` (one catalog call per table, a few at once)."""
    def measure(name: str) -> StorageFigure:
        try:
            return live_storage(guarded(lambda: catalog.load_table(name)))
        except ResultReadError as error:
            if isinstance(error.__cause__, NoSuchTableError):
                return StorageFigure()  # dropped since it was listed
            raise

    total = StorageFigure()
    with ThreadPoolExecutor(workers, thread_name_prefix="measure") as pool:
        for figure in pool.map(measure, table_names(catalog, namespace)):
            total += figure
    return total






def tables_written(catalog: RestCatalog, table_names: list[str]) -> StorageFigure:
    """What was written into these tables; a table that no longer exists counts nothing."""
    total = StorageFigure()
    for name in table_names:
        try:
            total += written_storage(guarded(lambda: catalog.load_table(name)))
        except ResultReadError as error:
            if not isinstance(error.__cause__, (NoSuchTableError, NoSuchNamespaceError)):
                raise
    return total
