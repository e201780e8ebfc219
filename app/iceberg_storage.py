"""Storage figures of a warehouse's Iceberg tables, from their snapshot summaries: what a table
holds now (`live_storage`) and what was ever written into it (`written_storage`), without
reading any data file. The usage pass (app/usage/work.py) stores them as samples.
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
