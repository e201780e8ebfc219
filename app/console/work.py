"""The console, the worker's side: each live query is run on its unit through the unit's door
(app/compute_units/door.py) as a job of kind `query` (compute/run/query.py), with a catalog
token acting as the query's user for that one warehouse; the worker watches it, passes a cancel
on, and records its end with what the unit sent back, checked and bounded here (users' data and
Spark's messages are untrusted text). A query RUNNING when a worker stopped is watched again;
one that had not reached its unit is submitted again if it reads, failed if it writes (the unit
may have run it). Joins the worker's registry as the source "console" (JOBS + 4).
"""

from __future__ import annotations

import json
import logging

from sqlmodel import Session, select

from app import work_registry
from app.compute_units import door
from app.compute_units.door import SparkHostError, UnitDoor
from app.console import service
from app.db import engine, get_db
from app.models import ComputeUnit, Query, QueryState, User, Warehouse, utcnow
from app.untrusted import Limits, bounded, clean_text
from compute.contract import JobKind, RunState

logger = logging.getLogger(__name__)

WATCH_SECONDS = 2.0
# What a unit reports is kept within these bounds.
MAX_COLUMNS = 1000
CELL_TEXT = 10_000
NESTED_CELL = Limits(string=2000, items=100, depth=4)
PLAN_TEXT = 1 << 20
SNAPSHOTS = Limits(string=500, items=200, depth=3)


def pending_work() -> list[work_registry.Work]:
    """Every live query, under the lease `query:<id>`."""
    with Session(engine()) as db:
        ids = db.exec(select(Query.id).where(Query.state.in_(QueryState.LIVE))).all()
    return [(f"query:{query_id}", run_query, query_id) for query_id in ids]


def run_query(query_id: int) -> None:
    """The worker's part: submit the query to its unit (or find it there again), watch it until
    it ends, pass a cancel on, and record the end."""
    db = get_db()
    query = db.get(Query, query_id)
    if query is None or query.state in QueryState.FINAL:
        return
    if query.state == QueryState.QUEUED:
        cu = db.get(ComputeUnit, query.compute_unit_id) if query.compute_unit_id else None
        if cu is not None and cu.state in service.STARTING:
            return  # made for this query: it waits, QUEUED, until the unit runs
        if not service.transition(
            query_id, (QueryState.QUEUED,), state=QueryState.RUNNING, started_at=utcnow()
        ):
            return
    elif not query.run_id and query.mode == service.WRITE:
        service.finish(
            query_id,
            QueryState.FAILED,
            error="the worker stopped while handing the query to its unit: run it again "
            "once you have checked what it changed",
        )
        return
    try:
        with UnitDoor.running(query.compute_unit_id) as unit:
            run_id = query.run_id or _submit(unit, query)
            if run_id is None:
                return
            _watch(unit, query_id, run_id)
    except door.UnitUnavailable as unavailable:
        service.finish(query_id, QueryState.FAILED, error=clean_text(str(unavailable), 2000))


def _submit(unit: UnitDoor, query: Query) -> str | None:
    """Submit the query; its run's id, or None once its end is recorded (refused, cancelled)."""
    db = get_db()
    warehouse = db.get(Warehouse, query.warehouse_id) if query.warehouse_id else None
    owner = db.get(User, query.owner_id)
    allowed = service.writable if query.mode == service.WRITE else service.readable
    if warehouse is None or owner is None or not allowed(owner, warehouse):
        service.finish(
            query.id, QueryState.FAILED, error="the warehouse is no longer yours to query"
        )
        return None
    if _cancel_requested(query.id):
        service.finish(query.id, QueryState.CANCELLED, error="cancelled before it ran")
        return None
    max_rows, max_bytes = service.bounds()
    try:
        unit.make_ready()
        token = door.run_token(warehouse, owner)
        run_id = unit.submit_job(
            JobKind.QUERY,
            {
                "sql": query.sql,
                "mode": query.mode,
                "max_rows": max_rows,
                "max_bytes": max_bytes,
                "catalog": door.catalog_binding(warehouse, token),
                "warehouse": {"lakekeeper_id": warehouse.lakekeeper_id},
            },
            name=f"query-{query.id}",
        )
    except (door.NoCatalogToken, SparkHostError) as error:
        service.finish(query.id, QueryState.FAILED, error=clean_text(str(error), 2000))
        return None
    service.transition(query.id, (QueryState.RUNNING,), run_id=run_id)
    unit.touch()
    return run_id


def _cancel_requested(query_id: int) -> bool:
    with Session(engine()) as db:
        query = db.get(Query, query_id)
        return query is None or query.cancel_requested_at is not None


def _watch(unit: UnitDoor, query_id: int, run_id: str) -> None:
    cancel_passed = False
    while True:
        if not cancel_passed and _cancel_requested(query_id):
            try:
                unit.cancel(run_id)
                cancel_passed = True
            except SparkHostError:
                logger.warning("passing the cancel of query %s on failed", query_id)
        try:
            run = unit.watch(run_id, wait_s=WATCH_SECONDS)
        except SparkHostError as error:
            reason = unit.failure() or f"the compute unit did not answer: {error}"
            service.finish(query_id, QueryState.FAILED, error=clean_text(reason, 2000))
            return
        if run is None or run.get("state") not in RunState.FINAL:
            unit.touch()
            continue
        _record_end(query_id, run)
        return


def _record_end(query_id: int, run: dict) -> None:
    state = run.get("state")
    if state == RunState.COMPLETED:
        fields = checked_result(run.get("result"), service.bounds()[0])
        service.finish(query_id, QueryState.COMPLETED, **fields)
    elif state == RunState.CANCELLED:
        service.finish(query_id, QueryState.CANCELLED)
    else:
        service.finish(query_id, QueryState.FAILED, error=door.failure_reason(run.get("error")))


def checked_result(result: object, max_rows: int) -> dict:
    """The row's fields from what the unit reported, in the shape the pages read, bounded (at
    most `max_rows` rows)."""
    result = result if isinstance(result, dict) else {}
    columns = [
        {
            "name": clean_text(column.get("name", ""), 200, one_line=True),
            "type": clean_text(column.get("type", ""), 200, one_line=True),
        }
        for column in (result.get("columns") or [])[:MAX_COLUMNS]
        if isinstance(column, dict)
    ]
    rows = [
        [_cell(value) for value in row[: len(columns)]]
        for row in (result.get("rows") or [])[:max_rows]
        if isinstance(row, list)
    ]
    count = result.get("row_count")
    row_count = count if isinstance(count, int) and not isinstance(count, bool) else len(rows)
    snapshots = result.get("snapshots") if isinstance(result.get("snapshots"), list) else []
    return {
        "result": json.dumps(
            {
                "columns": columns,
                "rows": rows,
                "plan": clean_text(result.get("plan") or "", PLAN_TEXT),
            }
        ),
        "row_count": max(row_count, len(rows)),
        "truncated": result.get("truncated") is True or row_count > len(rows),
        "snapshots": json.dumps(
            [bounded(entry, SNAPSHOTS) for entry in snapshots[:200] if isinstance(entry, dict)]
        ),
    }


def _cell(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return clean_text(value, CELL_TEXT)
    return bounded(value, NESTED_CELL)


work_registry.pending_source("console", work_registry.JOBS + 4, pending_work)
