from __future__ import annotations

from flask import Response, abort, flash, redirect, render_template, request, url_for
from flask_login import current_user
from htmx_flask import make_response

from app.charts import step_timeline_svg
from app.db import get_db, get_owned_or_404
from app.executions import bp, forms, history, results, runner
from app.executions.history import Filters
from app.executions.runner import RunRefused
from app.iceberg_reader import ResultReadError
from app.models import ComputeUnit, Execution, ExecutionState, Warehouse, Workflow
from app.workflows.service import latest_version


@bp.app_template_filter("log_time")
def log_time(value) -> str:
    """A log line's time (epoch seconds from the compute unit, or a datetime) as HH:MM:SS."""
    moment = results.as_datetime(value)
    return moment.strftime("%H:%M:%S") if moment else ""


def _execution(execution_id: int) -> Execution:
    return get_owned_or_404(Execution, execution_id)


@bp.get("/")
def index():
    filters = Filters.from_args(request.args)
    rows = history.user_executions(current_user, filters)
    if request.htmx:
        return render_template("executions/_list.html", rows=rows, filters=filters)
    return render_template("executions/index.html", rows=rows, filters=filters,
                           warehouses=history.user_warehouses(current_user),
                           compute_units=history.user_compute_units(current_user), states=ExecutionState.ALL)


@bp.get("/workflow/<int:workflow_id>")
def for_workflow(workflow_id: int):
    workflow = get_owned_or_404(Workflow, workflow_id)
    rows = history.user_executions(current_user, workflow_id=workflow.id)
    return render_template("executions/_workflow_history.html", workflow=workflow, rows=rows)


@bp.route("/new", methods=["GET", "POST"])
def new():
    workflow_id = request.args.get("workflow_id", type=int)
    if workflow_id is None:
        abort(404)
    workflow = get_owned_or_404(Workflow, workflow_id)
    version = latest_version(workflow)
    values = {"compute_unit_id": None, "warehouse_id": history.last_warehouse_id(current_user, workflow)}
    errors: dict[str, str] = {}
    if request.method == "POST":
        values, errors = forms.parse_run_form(request.form)
        if not errors:
            db = get_db()
            cu = db.get(ComputeUnit, values["compute_unit_id"])
            warehouse = db.get(Warehouse, values["warehouse_id"])
            try:
                execution = runner.start(current_user, workflow, version, cu, warehouse)
            except RunRefused as refusal:
                errors[refusal.field or "form"] = refusal.message
            else:
                flash(f"Execution #{execution.id} of {workflow.name} is queued.", "success")
                url = url_for("executions.detail", execution_id=execution.id)
                return make_response("", redirect=url) if request.htmx else redirect(url)
    page = render_template("executions/new.html", workflow=workflow, version=version, values=values, errors=errors,
                           compute_units=history.running_compute_units(current_user),
                           warehouses=history.active_warehouses(current_user))
    return (page, 422) if errors else page


@bp.get("/<int:execution_id>")
def detail(execution_id: int):
    execution = _execution(execution_id)
    context = {"execution": execution, "progress": history.progress_of(execution),
               "outputs": history.output_tables(execution)}
    if request.htmx:
        return render_template("executions/_live.html", **context)
    workflow = get_db().get(Workflow, execution.workflow_id)
    cu = get_db().get(ComputeUnit, execution.compute_unit_id) if execution.compute_unit_id else None
    return render_template("executions/detail.html", workflow=workflow, cu=cu, **context)


@bp.get("/<int:execution_id>/row")
def row(execution_id: int):
    execution = _execution(execution_id)
    workflow = get_db().get(Workflow, execution.workflow_id)
    cu = get_db().get(ComputeUnit, execution.compute_unit_id) if execution.compute_unit_id else None
    return render_template("executions/_row.html", row=history.ExecutionRow(execution, workflow.name,
                                                                            cu.name if cu else None))


@bp.post("/<int:execution_id>/cancel")
def cancel(execution_id: int):
    execution = _execution(execution_id)
    try:
        runner.cancel(execution)
    except RunRefused as refusal:
        flash(refusal.message, "error")
    else:
        flash(f"Execution #{execution.id} is being cancelled.", "info")
    url = url_for("executions.detail", execution_id=execution.id)
    return make_response("", redirect=url) if request.htmx else redirect(url)


@bp.get("/<int:execution_id>/stats")
def stats(execution_id: int):
    execution = _execution(execution_id)
    chart, error = None, None
    if results.ran_on_the_unit(execution):
        try:
            timings = results.step_timings(execution)
            chart = step_timeline_svg(timings) if timings else None
        except ResultReadError as failure:
            error = failure.args[0]
    return render_template("executions/_stats.html", execution=execution, chart=chart, error=error)


def _output_table(execution: Execution, step: str) -> str:
    table = history.output_tables(execution).get(step)
    if table is None:
        abort(404)
    return table


def _table_page(execution: Execution, table: str, endpoint: str, **route_args):
    page_number, size = forms.parse_paging(request.args)
    try:
        page, error = results.page(execution, table, page_number, size), None
    except ResultReadError as failure:
        page, error = None, failure.args[0]
    return {"page": page, "error": error, "table": table, "size": size, "page_sizes": forms.PAGE_SIZES,
            "pager_url": url_for(endpoint, execution_id=execution.id, **route_args)}


@bp.get("/<int:execution_id>/results/<step>")
def results_page(execution_id: int, step: str):
    execution = _execution(execution_id)
    context = _table_page(execution, _output_table(execution, step), "executions.results_page", step=step)
    if request.htmx:
        return render_template("executions/_table_page.html", **context)
    return render_template("executions/results.html", execution=execution, step=step,
                           warehouse=results.warehouse_of(execution), outputs=history.output_tables(execution),
                           **context)


@bp.get("/<int:execution_id>/results/<step>/csv")
def download(execution_id: int, step: str):
    execution = _execution(execution_id)
    table = _output_table(execution, step)
    try:
        chunks = results.csv_chunks(execution, table)
    except ResultReadError as failure:
        return render_template("error.html", title="Download failed", message=failure.args[0]), 502
    filename = f"{table.replace('.', '-')}.csv"
    return Response(chunks, mimetype="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


@bp.get("/<int:execution_id>/logs")
def logs(execution_id: int):
    execution = _execution(execution_id)
    if request.args.get("tail") or not results.ran_on_the_unit(execution):
        # While it runs (or if it never ran): the tail the compute unit reports. Once it has
        # ended, the tail partial loads the complete console_logs table in its place.
        template = "executions/_log_tail.html" if request.htmx else "executions/logs.html"
        return render_template(template, execution=execution, progress=history.progress_of(execution),
                               tail=True)
    context = _table_page(execution, history.console_logs_table(execution), "executions.logs")
    if request.htmx:
        return render_template("executions/_table_page.html", **context)
    return render_template("executions/logs.html", execution=execution, tail=False, **context)
