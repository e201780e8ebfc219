"""What the console's pages read: the warehouses and units a user may pick, their history of
queries, and a query's stored result page by page, sorted on request, or as CSV."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from sqlmodel import select

from app.db import get_db
from app.executions import queries as execution_queries
from app.iceberg_reader import Page
from app.models import ComputeUnit, Query, User, Warehouse, WarehouseStatus
from app.warehouses import queries as warehouse_queries
from app.warehouses import sharing

HISTORY_LENGTH = 100


@dataclass(frozen=True)
class WarehouseChoice:
    warehouse: Warehouse
    access: str  # sharing.OWNER, WRITE or READ
    owner: User | None  # another user's, for a shared one

    @property
    def writable(self) -> bool:
        return (
            self.access in (sharing.OWNER, sharing.WRITE)
            and self.warehouse.status == WarehouseStatus.ACTIVE
        )


def warehouse_choices(user: User) -> list[WarehouseChoice]:
    """The warehouses `user` may query: their own, then those shared with them (not purged)."""
    live = (WarehouseStatus.ACTIVE, WarehouseStatus.ARCHIVED)
    own = [
        WarehouseChoice(warehouse, sharing.OWNER, None)
        for warehouse in warehouse_queries.user_warehouses(user)
        if warehouse.status in live
    ]
    shared = [
        WarehouseChoice(warehouse, level, owner)
        for warehouse, level, owner in sharing.shared_with(user)
        if warehouse.status in live
    ]
    return own + sorted(shared, key=lambda choice: choice.warehouse.name)


def unit_choices(user: User) -> list[ComputeUnit]:
    """The user's running units."""
    return execution_queries.running_compute_units(user)


def history(user: User, limit: int = HISTORY_LENGTH) -> list[Query]:
    """The user's latest queries, newest first."""
    statement = (
        select(Query).where(Query.owner_id == user.id).order_by(Query.id.desc()).limit(limit)
    )
    return list(get_db().exec(statement))


def duration_s(query: Query) -> float | None:
    if query.started_at is None:
        return None
    end = query.ended_at.timestamp() if query.ended_at else time.time()
    return max(0.0, end - query.started_at.timestamp())


def stored_result(query: Query) -> dict:
    """{"columns": [{"name", "type"}], "rows": [[...]], "plan": text} as the worker stored it."""
    try:
        result = json.loads(query.result or "{}")
    except ValueError:
        result = {}
    return {
        "columns": result.get("columns") or [],
        "rows": result.get("rows") or [],
        "plan": result.get("plan") or "",
    }


def snapshots_read(query: Query) -> list[dict]:
    try:
        return [entry for entry in json.loads(query.snapshots or "[]") if isinstance(entry, dict)]
    except ValueError:
        return []


def sorted_rows(
    rows: list[list], column: int | None, descending: bool, spark_type: str = ""
) -> list[list]:
    """The rows by one column (None first, then by value; values of mixed kinds by their text).
    A decimal column (`spark_type` decimal(p,s)) comes as text, to keep its digits: it sorts by
    its value."""
    if column is None:
        return rows
    as_decimal = spark_type.startswith("decimal")

    def key(row: list):
        value = row[column] if column < len(row) else None
        if value is None:
            return (0, 0, "")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return (1, value, "")
        if as_decimal and isinstance(value, str):
            try:
                return (1, Decimal(value), "")
            except InvalidOperation:
                pass
        return (2, 0, str(value))

    return sorted(rows, key=key, reverse=descending)


def result_page(
    query: Query, page: int, size: int, sort: int | None = None, descending: bool = False
) -> Page:
    """One page of the stored rows (sorted by column `sort` first, if given)."""
    result = stored_result(query)
    columns = result["columns"]
    sort_type = columns[sort]["type"] if sort is not None and 0 <= sort < len(columns) else ""
    rows = sorted_rows(result["rows"], sort, descending, sort_type)
    pages = max(1, -(-len(rows) // size))
    page = min(max(page, 1), pages)
    start = (page - 1) * size
    return Page(
        rows=[tuple(row) for row in rows[start : start + size]],
        columns=[column["name"] for column in result["columns"]],
        total_rows=len(rows),
        page=page,
        size=size,
        types=tuple(_iceberg_kind(column["type"]) for column in result["columns"]),
    )


# Spark's names of number types as the table viewer knows them (numbers are right-aligned).
_SPARK_NUMBERS = {"bigint": "long", "smallint": "int", "tinyint": "int", "integer": "int"}


def _iceberg_kind(spark_type: str) -> str:
    return _SPARK_NUMBERS.get(spark_type, spark_type)


def csv_lines(query: Query) -> Iterator[str]:
    """The stored rows as CSV, a header first; text a spreadsheet would run as a formula is quoted."""
    result = stored_result(query)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([_csv_cell(column["name"]) for column in result["columns"]])
    for row in result["rows"]:
        writer.writerow([_csv_cell(value) for value in row])
        if buffer.tell() > 1 << 16:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def _csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        value = json.dumps(value)
    text = str(value)
    if isinstance(value, str) and text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + text
    return text
