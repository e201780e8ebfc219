"""The Query page: pick a warehouse and a unit, write one statement, run it; its result polls
itself until the query ends, then shows page by page, sortable, with CSV; the history of the
user's queries with "run again". Another user's query answers 404 on every route."""

from __future__ import annotations

import threading
import time

from flask import Response, abort, current_app, flash, jsonify, render_template, request, url_for
from flask_login import current_user
from sqlmodel import select

from app import live_partials
from app.console import bp, completions, forms, queries, service
from app.db import get_db, get_owned_or_404
from app.models import ComputeUnit, Query, QueryState, Warehouse
from app.table_pages import positive_int, table_page_context
from app.web import redirect_to
from compute.run.query import StatementRefused, check_statement


def _form_context(values: dict, errors: dict[str, str]) -> dict:
    units = queries.unit_choices(current_user)
    pool_ready = service.pool_ready()
    return {
        "values": values,
        "errors": errors,
        "warehouses": queries.warehouse_choices(current_user),
        "units": units,
        "has_pool": current_app.config["CU_POOL_SIZE"] > 0,
        "pool_ready": pool_ready,
        "unit_chosen": _unit_chosen(values, units, pool_ready),
        "modes": service.MODES,
        "sql_field": forms.SQL_FIELD,
        "from_pool": service.FROM_POOL,
        "start_one": service.START_ONE,
        "max_rows": service.bounds()[0],
        "max_mib": _mib(service.bounds()[1]),
    }


def _mib(size: int) -> str:
    return f"{size / 2**20:g} MiB" if size >= 2**20 else f"{size / 2**10:g} KiB"


def _unit_chosen(values: dict, units: list[ComputeUnit], pool_ready: int) -> str:
    """The unit option to select: the one asked for (or the last query's) while it runs, else
    the user's first running unit, else a warm one of the pool, else "Start one for me"."""
    if values.get("new_unit"):
        return values["new_unit"]
    running = [str(cu.id) for cu in units]
    if str(values.get("compute_unit_id")) in running:
        return str(values["compute_unit_id"])
    if running:
        return running[0]
    return service.FROM_POOL if pool_ready else service.START_ONE


@bp.get("/")
def index():
    """The console: the form, the query asked for (`?query=`) or none, and the history."""
    shown = positive_int(request.args.get("query"))
    query = get_owned_or_404(Query, shown) if shown else None
    values = (
        {
            "warehouse_id": query.warehouse_id,
            "compute_unit_id": query.compute_unit_id,
            "mode": query.mode,
            "sql": query.sql,
        }
        if query
        else {}
    )
    if not query and (last := queries.history(current_user, 1)):
        values = {
            "warehouse_id": last[0].warehouse_id,
            "compute_unit_id": last[0].compute_unit_id,
            "mode": last[0].mode,
            "sql": "",
        }
    return render_template(
        "console/index.html",
        query=query,
        history=queries.history(current_user),
        poll_delay=_poll_delay(query, time.time()) if query and query.live else None,
        **_form_context(values, {}),
        **(_result_context(query) if query else {}),
    )


# A young query is asked for again quickly: most console queries end within seconds, and a
# first poll 1 s after the click was most of what a short query's answer waited for (bench
# console: recorded COMPLETED at 0.80 s, on the page at 1.05 s).
EARLY_POLL_S = 0.2
EARLY_FOR_S = 3.0
# Better still, a young query's live part is asked for again at once and its request waits here
# for the row to change (looked at every HOLD_CHECK_S, a primary-key read on a pooled connection
# that goes back between two looks), at most HOLD_S: the end is shown as soon as it is recorded
# instead of up to a poll's delay later (bench console: 0.1 s on average at EARLY_POLL_S).
# A held request keeps one of its process's request threads: gunicorn's threaded worker runs
# each request on a thread of a pool of `threads` (gunicorn/workers/gthread.py, ThreadWorker's
# `futures.ThreadPoolExecutor(max_workers=self.cfg.threads)`; kept-alive connections between two
# requests wait in its poller, not on a thread), four per process in gunicorn.conf.py. So at
# most HOLDS of them hold at once per process, each for HOLD_S at most and only in a query's
# first EARLY_FOR_S: the others are always free for every other request. A request that finds
# no hold free answers at once, and its page asks again after EARLY_POLL_S, as before holds.
HOLD_S = 1.0
HOLD_CHECK_S = 0.025
HOLDS = 2
_holds = threading.BoundedSemaphore(HOLDS)


def _poll_delay(query: Query, now: float, held: bool = True) -> float:
    """Seconds before the page asks for a live query's part again: at once for a young query
    whose request may be held, EARLY_POLL_S for one that could not be, then as any live part."""
    if now - query.created_at.timestamp() < EARLY_FOR_S:
        return 0 if held and HOLD_S > 0 else EARLY_POLL_S
    return live_partials.poll_delay((query.started_at or query.created_at).timestamp(), now)


def _shown(query_id: int) -> tuple:
    """What of a query's row its live part shows, read in a statement of its own."""
    with current_app.extensions["db_reading_engine"].connect() as connection:
        return tuple(
            connection.execute(
                select(Query.state, Query.run_id, Query.cancel_requested_at).where(
                    Query.id == query_id
                )
            ).one()
        )


def _held(query: Query) -> bool:
    """Wait, for a young live query, until its row changes or HOLD_S has passed; False at once
    when the query is not young or every hold of this process is taken."""
    young_for = EARLY_FOR_S - (time.time() - query.created_at.timestamp())
    if HOLD_S <= 0 or young_for <= 0 or not _holds.acquire(blocking=False):
        return False
    try:
        shown = _shown(query.id)
        get_db().close()  # its connection back to the pool while the request waits
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            time.sleep(HOLD_CHECK_S)
            if _shown(query.id) != shown:
                break
    finally:
        _holds.release()
    return True


@bp.post("/queries")
def run():
    """Record the query (the worker runs it); the result's live part, or the form with why not."""
    values, errors = forms.parse_query_form(request.form)
    db = get_db()
    if not errors:
        try:
            query = service.start(
                current_user,
                db.get(Warehouse, values["warehouse_id"]),
                db.get(ComputeUnit, values["compute_unit_id"])
                if values["compute_unit_id"]
                else None,
                values["sql"],
                values["mode"],
                new_unit=values["new_unit"],
            )
        except service.QueryRefused as refusal:
            errors[refusal.field or "sql"] = refusal.message
    if errors:
        if request.htmx:
            return render_template("console/_form.html", **_form_context(values, errors)), 422
        return render_template(
            "console/index.html",
            query=None,
            history=queries.history(current_user),
            **_form_context(values, errors),
        ), 422
    return redirect_to(url_for("console.index", query=query.id))


@bp.post("/check")
def check():
    """The statement checked as it is typed (sqlglot's grammar, with line and column; a write in
    read mode): the field's message, empty when it may run."""
    values, _ = forms.parse_query_form(request.form)
    message = ""
    if values["sql"] and values["mode"] in service.MODES:
        try:
            check_statement(values["sql"], values["mode"])
        except StatementRefused as refused:
            message = f"Refused: {refused}."
    return render_template("console/_sql_error.html", sql_error=message)


@bp.get("/queries/<int:query_id>")
def result(query_id: int):
    """The query's live part: it polls itself until the query ends (304 while unchanged)."""
    query = get_owned_or_404(Query, query_id)
    if not request.htmx:
        return redirect_to(url_for("console.index", query=query.id))
    held = query.live and _held(query)
    if held:
        query = get_owned_or_404(Query, query_id)  # as it is now
    if query.state in QueryState.FINAL:  # the history shows its end too
        return render_template(
            "console/_result.html", query=query, **_result_context(query)
        ) + render_template(
            "console/_history.html", history=queries.history(current_user), oob=True
        )
    delay = _poll_delay(query, time.time(), held)
    context = _result_context(query)  # a live query's: a row's read at most
    return live_partials.conditional(
        (
            "console/_result.html",
            query.id,
            query.state,
            query.run_id,
            query.cancel_requested_at,
            context.get("unit_starting"),
            delay,
        ),
        lambda: render_template("console/_result.html", query=query, poll_delay=delay, **context),
    )


def _sorting() -> tuple[int | None, bool]:
    column = request.args.get("sort")
    return (int(column) if column and column.isdigit() else None), request.args.get("desc") == "1"


def _result_context(query: Query) -> dict:
    if query.state == QueryState.QUEUED and query.compute_unit_id:
        cu = get_db().get(ComputeUnit, query.compute_unit_id)
        return {"snapshots": [], "unit_starting": cu is not None and cu.state in service.STARTING}
    if query.state != QueryState.COMPLETED:
        return {"snapshots": []}
    sort, descending = _sorting()
    params = {"sort": str(sort), "desc": "1" if descending else "0"} if sort is not None else {}
    context = table_page_context(
        lambda page, size: queries.result_page(query, page, size, sort, descending),
        f"query {query.id}",
        url_for("console.rows", query_id=query.id),
        params,
    )
    return {
        **context,
        "plan": queries.stored_result(query)["plan"],
        "snapshots": queries.snapshots_read(query),
        "bound_rows": service.bounds()[0],
        "bound_size": _mib(service.bounds()[1]),
        "sort": sort,
        "descending": descending,
    }


@bp.get("/queries/<int:query_id>/rows")
def rows(query_id: int):
    """One page of a completed query's rows (sorted by `sort`, `desc`=1 descending)."""
    query = get_owned_or_404(Query, query_id)
    return render_template("console/_rows.html", query=query, **_result_context(query))


@bp.get("/queries/<int:query_id>/csv")
def csv(query_id: int):
    """The rows that came back, as CSV."""
    query = get_owned_or_404(Query, query_id)
    return Response(
        queries.csv_lines(query),
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="query-{query.id}.csv"'},
    )


@bp.post("/queries/<int:query_id>/cancel")
def cancel(query_id: int):
    query = get_owned_or_404(Query, query_id)
    try:
        service.cancel(query)
    except service.QueryRefused:
        pass  # it ended meanwhile: the result says how
    return redirect_to(url_for("console.index", query=query.id))


@bp.post("/queries/<int:query_id>/again")
def again(query_id: int):
    """The same statement again, on the same warehouse and unit, checked again."""
    query = get_owned_or_404(Query, query_id)
    try:
        fresh = service.run_again(current_user, query)
    except service.QueryRefused as refusal:
        values = {
            "warehouse_id": query.warehouse_id,
            "compute_unit_id": query.compute_unit_id,
            "mode": query.mode,
            "sql": query.sql,
        }
        return render_template(
            "console/index.html",
            query=None,
            history=queries.history(current_user),
            **_form_context(values, {refusal.field or "sql": refusal.message}),
        ), 422
    return redirect_to(url_for("console.index", query=fresh.id))


@bp.post("/queries/<int:query_id>/workflow")
def as_workflow(query_id: int):
    """A new workflow whose output step is this query's statement; its editor."""
    query = get_owned_or_404(Query, query_id)
    try:
        workflow = service.as_workflow(current_user, query)
    except service.QueryRefused as refusal:
        flash(refusal.message, "error")
        return redirect_to(url_for("console.index", query=query.id))
    flash(f"Workflow {workflow.name} runs the query in full: run it into a warehouse.", "success")
    return redirect_to(url_for("workflows.detail", workflow_id=workflow.id))


@bp.get("/history")
def history():
    return render_template("console/_history.html", history=queries.history(current_user))


@bp.get("/warehouses/<int:warehouse_id>/completions")
def warehouse_completions(warehouse_id: int):
    """What the editor completes for a warehouse the user may query (404 for any other, like a
    missing one): its namespaces, tables and columns as CodeMirror's SQL schema, from the
    catalog, kept a while per warehouse; `refresh=1` reads the catalog again."""
    warehouse = get_db().get(Warehouse, warehouse_id)
    if not service.readable(current_user, warehouse):
        abort(404)
    outline = completions.outline(warehouse, refresh=request.args.get("refresh") == "1")
    return jsonify(
        {
            "warehouse_id": warehouse.id,
            "schema": outline.editor_schema(),
            "tables": outline.table_count,
            "complete": outline.complete,
            "read_at": outline.read_at,
            "error": outline.error,
            "status": outline.status(warehouse.name),
        }
    )
