"""The API's console queries: run one statement, follow it with its result page by page, cancel
it. The same service as the Query page (app/console/); another user's query answers 404."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from flask_login import current_user
from pydantic import BaseModel, Field
from spectree import Response

from app.api import bp, schemas
from app.api.openapi import spec
from app.api.paging import ERRORS, rows_page
from app.api.problems import ApiProblem
from app.console import queries as console_queries
from app.console import service as console_service
from app.db import get_db, get_owned_or_404
from app.models import ComputeUnit, Query, Warehouse


class QueryStart(schemas.Input):
    sql: str = Field(min_length=1, max_length=console_service.MAX_SQL_LENGTH)
    warehouse_id: int
    compute_unit_id: int | Literal["pool", "new"] = Field(
        description="one of your running units, or a unit made for the query: `pool` claims a "
        "warm unit of the pool (refused when none is ready), `new` starts one (from the pool "
        "when one is ready); the query waits, queued, until it runs"
    )
    mode: Literal["read", "write"] = "read"


class QueryOut(BaseModel):
    """A query; `rows` is one page of its result once it completed (`result_page`)."""

    id: int
    sql: str
    mode: str
    statement: str
    state: str = Field(description="queued, running, completed, failed or cancelled")
    error: str
    warehouse_id: int | None
    warehouse_name: str
    compute_unit_id: int | None
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    row_count: int | None = Field(description="rows the statement answered, past the bound too")
    truncated: bool = Field(description="only the first rows came back")
    plan: str = Field(description="EXPLAIN's plan, else ''")
    snapshots: list[dict] = Field(description="the tables and snapshots it read")
    result_page: schemas.RowsPage | None = None


def query_out(query: Query, page: int = 1, size: int = 50) -> QueryOut:
    fields = {name: getattr(query, name) for name in QueryOut.model_fields if hasattr(query, name)}
    completed = query.completed
    return QueryOut(
        **{
            **fields,
            "plan": console_queries.stored_result(query)["plan"] if completed else "",
            "snapshots": console_queries.snapshots_read(query),
            "result_page": rows_page(console_queries.result_page(query, page, size))
            if completed
            else None,
        }
    )


@bp.post("/queries")
@spec.validate(json=QueryStart, resp=Response(HTTP_201=QueryOut, **ERRORS), tags=["queries"])
def start_query(json: QueryStart):
    """Run one statement on one of your running units (or a unit made for it) against a
    warehouse you may read (`mode` write: one you may write). Answers at once: follow it with
    GET until its state is final."""
    db = get_db()
    own_unit = isinstance(json.compute_unit_id, int)
    try:
        query = console_service.start(
            current_user,
            db.get(Warehouse, json.warehouse_id),
            db.get(ComputeUnit, json.compute_unit_id) if own_unit else None,
            json.sql,
            json.mode,
            new_unit=None if own_unit else json.compute_unit_id,
        )
    except console_service.QueryRefused as refusal:
        raise ApiProblem(400, refusal.message, refusal.field) from None
    return query_out(query), 201


@bp.get("/queries/<int:query_id>")
@spec.validate(
    query=schemas.RowsQuery, resp=Response(HTTP_200=QueryOut, **ERRORS), tags=["queries"]
)
def get_query(query_id: int, query: schemas.RowsQuery):
    """One of your queries, with a page of its rows once it completed."""
    return query_out(get_owned_or_404(Query, query_id), query.page, query.size)


@bp.post("/queries/<int:query_id>/cancel")
@spec.validate(
    resp=Response(HTTP_202=QueryOut, HTTP_409=schemas.Problem, **ERRORS), tags=["queries"]
)
def cancel_query(query_id: int):
    """Cancel a query: at once if it has not reached its unit, else as soon as the unit stopped it."""
    query = get_owned_or_404(Query, query_id)
    try:
        console_service.cancel(query)
    except console_service.QueryRefused as refusal:
        raise ApiProblem(409, refusal.message) from None
    return query_out(query), 202
