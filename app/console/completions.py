"""What the console's editor completes: a warehouse's namespaces, tables and columns, read from the
catalog through the portal's one Iceberg reader (app/iceberg_reader.py), metadata only (no data
file is opened), and kept per warehouse for CACHE_SECONDS or until the user asks for a refresh.

Who may see a warehouse's outline is the request's business (the console's route answers 404 to
anyone who may not read it); the outline itself is the same for everyone who may. It is bounded:
at most MAX_TABLES tables are listed and the columns of at most MAX_COLUMN_TABLES are read; the
tables Lakeport writes beside every execution (`runtime_stats`, `console_logs`) are listed by
name only. Top-level namespaces only, as the table explorer's reader lists them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

from flask import current_app

from app import iceberg_reader
from app.iceberg_catalogs import ResultReadError, catalog_for
from app.models import Warehouse
from app.warehouses.queries import is_internal

CACHE_SECONDS = 300
CACHED_WAREHOUSES = 64
MAX_TABLES = 500
MAX_COLUMN_TABLES = 200
# Tables whose metadata is read at once (one catalog call each).
READERS = 4


@dataclass(frozen=True)
class Outline:
    """A warehouse's tables as the editor completes them: namespace → table → [(column, type)]
    (an empty list: columns not read). `complete` is False when a bound cut the listing."""

    tables: dict[str, dict[str, list[tuple[str, str]]]]
    read_at: float
    complete: bool = True
    error: str = ""
    skipped: list[str] = field(default_factory=list)  # tables that could not be read

    @property
    def table_count(self) -> int:
        return sum(len(tables) for tables in self.tables.values())

    def status(self, warehouse_name: str) -> str:
        """What the page says of the completion, for people and screen readers."""
        if self.error:
            return f"No completion of {warehouse_name}'s tables: {self.error}"
        read_at = datetime.fromtimestamp(self.read_at, timezone.utc).strftime("%H:%M:%S")
        tables = f"{self.table_count:,} table{'s' if self.table_count != 1 else ''}"
        namespaces = len(self.tables)
        text = (
            f"Completes {tables} in {namespaces:,} namespace{'s' if namespaces != 1 else ''} of "
            f"{warehouse_name}, as the catalog listed them at {read_at} UTC"
        )
        if not self.complete:
            text += " (the first ones only: the warehouse has more)"
        return text + "."

    def editor_schema(self) -> dict:
        """CodeMirror's SQL schema (@codemirror/lang-sql `SQLNamespace`): namespaces hold tables,
        tables their columns, each with its type as the option's detail."""
        return {
            namespace: {
                "self": {"label": namespace, "type": "namespace", "detail": "namespace"},
                "children": {
                    table: {
                        "self": {"label": table, "type": "type", "detail": "table"},
                        "children": [
                            {"label": column, "type": "property", "detail": kind}
                            for column, kind in columns
                        ],
                    }
                    for table, columns in tables.items()
                },
            }
            for namespace, tables in self.tables.items()
        }


class _Outlines:
    """The app's outlines by warehouse (its row id and catalog id), least recently used dropped."""

    def __init__(self) -> None:
        self._items: OrderedDict[tuple, Outline] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> Outline | None:
        with self._lock:
            outline = self._items.get(key)
            if outline is None or time.time() - outline.read_at > CACHE_SECONDS:
                return None
            self._items.move_to_end(key)
            return outline

    def put(self, key: tuple, outline: Outline) -> None:
        with self._lock:
            self._items[key] = outline
            self._items.move_to_end(key)
            while len(self._items) > CACHED_WAREHOUSES:
                self._items.popitem(last=False)


def _cache() -> _Outlines:
    return current_app.extensions.setdefault("console_outlines", _Outlines())


def outline(warehouse: Warehouse, refresh: bool = False) -> Outline:
    """The warehouse's outline, from the cache unless it is older than CACHE_SECONDS or `refresh`.
    A catalog that cannot be read gives an outline with `error` set (not kept)."""
    key = (warehouse.id, warehouse.lakekeeper_id, warehouse.lakekeeper_name)
    if not refresh and (kept := _cache().get(key)) is not None:
        return kept
    try:
        fresh = read_outline(warehouse)
    except ResultReadError as failure:
        return Outline({}, time.time(), complete=False, error=failure.args[0])
    _cache().put(key, fresh)
    return fresh


def read_outline(warehouse: Warehouse) -> Outline:
    """Read the outline from the catalog (raises ResultReadError when it cannot be listed)."""
    catalog = catalog_for(warehouse)
    names: dict[str, list[str]] = {}
    listed, complete = 0, True
    for namespace in sorted(iceberg_reader.list_namespaces(catalog)):
        if listed >= MAX_TABLES:
            complete = False
            break
        tables = sorted(
            name.removeprefix(namespace + ".")
            for name in iceberg_reader.table_names(catalog, namespace)
        )
        if listed + len(tables) > MAX_TABLES:
            tables, complete = tables[: MAX_TABLES - listed], False
        names[namespace] = tables
        listed += len(tables)
    wanted = [
        f"{namespace}.{table}"
        for namespace, tables in names.items()
        if not is_internal(namespace)
        for table in tables
    ]
    if len(wanted) > MAX_COLUMN_TABLES:
        wanted, complete = wanted[:MAX_COLUMN_TABLES], False

    def columns_of(name: str) -> list[tuple[str, str]] | None:
        try:
            overview = iceberg_reader.table_overview(catalog, name)
        except ResultReadError:  # dropped since it was listed, or unreadable: its name stays
            return None
        return [(column.name, column.type) for column in overview.columns]

    with ThreadPoolExecutor(max_workers=READERS) as readers:
        read = dict(zip(wanted, readers.map(columns_of, wanted)))
    return Outline(
        {
            namespace: {table: read.get(f"{namespace}.{table}") or [] for table in tables}
            for namespace, tables in names.items()
        },
        time.time(),
        complete=complete,
        skipped=[name for name, columns in read.items() if columns is None],
    )
