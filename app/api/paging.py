"""What every API route shares: the errors it may answer, paging by cursor, reading tables, and
JSON for values read from them."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Callable, Sequence

from app.api import schemas
from app.api.problems import ApiProblem
from app.iceberg_catalogs import ResultReadError, TableMissing

ERRORS = {f"HTTP_{status}": schemas.Problem for status in (400, 401, 403, 404, 413, 429)}


def page_of(rows: Sequence, query: schemas.ListQuery, convert: Callable, page_model):
    """One page of `rows` (the caller's, any order), newest id first, after the query's cursor."""
    before = None
    if query.cursor is not None and (before := schemas.cursor_id(query.cursor)) is None:
        raise ApiProblem(400, "cursor: not one this API gave", "cursor")
    ordered = sorted(
        (row for row in rows if before is None or row.id < before), key=lambda row: -row.id
    )
    items = ordered[: query.limit]
    more = len(ordered) > query.limit
    return page_model(
        items=[convert(row) for row in items],
        next_cursor=schemas.cursor_after(items[-1].id) if more else None,
    )


def jsonable(value):
    """A table cell as JSON: times as ISO 8601, decimals as strings (no precision lost), bytes
    as base64, nested values kept."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return str(value)


def table_read(read: Callable, missing: str = "That table is not in the warehouse (any more)."):
    """`read()` of a table: a table that is not there answers 404 (`missing`), another failure 409."""
    try:
        return read()
    except TableMissing:
        raise ApiProblem(404, missing) from None
    except ResultReadError as error:
        raise ApiProblem(409, error.args[0]) from None


def rows_page(page) -> schemas.RowsPage:
    return schemas.RowsPage(
        columns=page.columns,
        types=list(page.types),
        total_rows=page.total_rows,
        page=page.page,
        size=page.size,
        pages=page.pages,
        rows=[[jsonable(cell) for cell in row] for row in page.rows],
    )
