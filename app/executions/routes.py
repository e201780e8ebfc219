from __future__ import annotations

import json
import time
from collections.abc import Callable

from flask import Response, abort, flash, render_template, request, url_for
from flask_login import current_user
from htmx_flask import make_response

from app import live_partials
from app.charts import step_timeline_svg
from app.db import get_db, get_owned_or_404
from app.executions import (
    bp,
    comparison,
    forms,
    notifications,
    queries,
    results,
    seen_version,
    service,
)
from app.executions import logs as logs_view
from app.executions.queries import Filters
from app.executions.service import RunRefused
from app.iceberg_catalogs import ResultReadError, TableMissing
from app.models import ComputeUnit, Execution, ExecutionState, Warehouse, Workflow
from app.table_pages import canonical_page_url, table_page_context
from app.web import redirect_to
from app.workflows import sharing as workflow_sharing
from app.workflows.service import latest_version


@bp.app_template_global()
def warehouse_table_url(warehouse_id: int | None, table: str) -> str | None:
    """The warehouse's page of `table` (namespace.table), where the portal has one."""
    if warehouse_id is None:  # its warehouse was deleted: the name alone
        return None
    return url_for("warehouses.table", warehouse_id=warehouse_id, name=table)


def _execution(execution_id: int) -> Execution:
    return get_owned_or_404(Execution, execution_id)


def _live_partial(template: str, execution: Execution, context: Callable[[], dict]):
    """A self-polling partial of the execution: while it runs, tagged with its version (a poll that
    finds it unchanged answers 304 before `context` is read) and asking again sooner while it changes."""
    if execution.state in ExecutionState.FINAL:
        return render_template(template, execution=execution, **context())
    now = time.time()
    delay = live_partials.poll_delay(queries.last_change(execution, now), now)
    return live_partials.conditional(
        (template,) + queries.live_version(execution, delay),
        lambda: render_template(template, execution=execution, poll_delay=delay, **context()),
    )


def _live_context(execution: Execution) -> dict:
    """What the execution's live part shows besides the row."""
    return {
        "progress": queries.progress_of(execution),
        "outputs": queries.output_tables(execution),
        "published": queries.published_outputs(execution),
        "checks": queries.check_results(execution),
        "lineage": queries.lineage_of(execution),
        "failed_step": queries.failed_step(execution),
        "others": queries.completed_runs_of(current_user, execution.workflow_id, execution.id)
        if execution.state == ExecutionState.COMPLETED
        else [],
    }


@bp.get("/")
def index():
    filters = Filters.from_args(request.args)
    rows = queries.user_executions(current_user, filters)
    if request.htmx:
        return render_template("executions/_list.html", rows=rows, filters=filters)
    return render_template(
        "executions/index.html",
        rows=rows,
        filters=filters,
        warehouses=queries.user_warehouses(current_user),
        compute_units=queries.user_compute_units(current_user),
        states=ExecutionState.ALL,
    )


@bp.get("/workflow/<int:workflow_id>")
def for_workflow(workflow_id: int):
    workflow = workflow_sharing.accessible_or_404(workflow_id)
    rows = queries.user_executions(current_user, workflow_id=workflow.id)
    return render_template("executions/_workflow_history.html", workflow=workflow, rows=rows)


@bp.route("/new", methods=["GET", "POST"])
def new():
    workflow_id = request.args.get("workflow_id", type=int)
    if workflow_id is None:
        abort(404)
    workflow = workflow_sharing.accessible_or_404(workflow_id, workflow_sharing.RUN)
    version = latest_version(workflow)
    errors: dict[str, str] = {}
    changed: seen_version.VersionChanged | None = None
    if request.method == "GET":
        values = {
            "compute_unit_id": None,
            "warehouse_id": queries.run_form_warehouse_id(current_user, workflow),
        }
    else:
        values, errors = forms.parse_run_form(request.form)
        if not errors:
            try:
                execution = _start_seen(workflow, values)
            except (
                seen_version.VersionChanged
            ) as refusal:  # nothing queued: show what changed, then ask again
                changed = refusal
            except RunRefused as refusal:
                errors[refusal.field or "form"] = refusal.message
            else:
                if (
                    execution.webhook_url
                ):  # its signing secret, shown this once, before the execution's page
                    return render_template(
                        "executions/started.html",
                        execution=execution,
                        workflow=workflow,
                        webhook_secret=notifications.webhook_secret(execution),
                    )
                flash(f"You started execution #{execution.id} of {workflow.name}.", "success")
                return redirect_to(url_for("executions.detail", execution_id=execution.id))
    author = seen_version.code_author(current_user.id, workflow)
    page = render_template(
        "executions/new.html",
        workflow=workflow,
        version=version,
        values=values,
        errors=errors,
        compute_units=queries.running_compute_units(current_user),
        warehouses=queries.active_warehouses(current_user),
        notify_on=notifications.NOTIFY_ON,
        code_author=seen_version.author_label(author) if author else None,
        changed=changed,
        changes=seen_version.changes_between(workflow, changed.seen, changed.latest)
        if changed
        else [],
    )
    return (
        (page, 422) if changed or errors else page
    )  # the form again, to look at before submitting


def _start_seen(workflow: Workflow, values: dict) -> Execution:
    """Start the run dialog's execution of the version it showed (VersionChanged if not the latest)."""
    db = get_db()
    version = seen_version.version_to_run(current_user, workflow, values["version"])
    return service.start(
        current_user,
        workflow,
        version,
        db.get(ComputeUnit, values["compute_unit_id"]),
        db.get(Warehouse, values["warehouse_id"]),
        notify=notifications.fields(values),
    )


@bp.get("/<int:execution_id>")
def detail(execution_id: int):
    execution = _execution(execution_id)
    if request.htmx:
        return _live_partial("executions/_live.html", execution, lambda: _live_context(execution))
    workflow = get_db().get(Workflow, execution.workflow_id)
    cu = get_db().get(ComputeUnit, execution.compute_unit_id) if execution.compute_unit_id else None
    return render_template(
        "executions/detail.html",
        execution=execution,
        workflow=workflow,
        cu=cu,
        pinned=queries.pinned_of(execution),
        code_author=seen_version.execution_code_author(execution),
        **_live_context(execution),
    )


@bp.post("/<int:execution_id>/rerun")
def rerun(execution_id: int):
    """Run the execution's workflow version again with every input pinned to the snapshot it read."""
    execution = _execution(execution_id)
    try:
        shown = service.rerun_pinned(current_user, execution)
    except RunRefused as refusal:
        flash(refusal.message, "error")
        shown = execution
    else:
        flash(f"Execution #{shown.id} re-runs #{execution.id} on the same inputs.", "success")
    return redirect_to(url_for("executions.detail", execution_id=shown.id))


def _pair() -> tuple[Execution, Execution]:
    a, b = request.args.get("a", type=int), request.args.get("b", type=int)
    if a is None or b is None:
        abort(404)
    return _execution(a), _execution(b)


@bp.get("/compare")
def compare():
    a, b = _pair()
    workflow = get_db().get(Workflow, a.workflow_id)
    if b.workflow_id != a.workflow_id:
        return render_template(
            "error.html",
            title="Not comparable",
            message=f"Executions #{a.id} and #{b.id} run different workflows.",
        ), 422
    return _rows_partial(
        a,
        b,
        comparison.latest_rows_job(a, b),
        template="executions/compare.html",
        workflow=workflow,
        outputs=comparison.outputs(a, b),
    )


@bp.get("/compare/rows")
def compare_rows():
    """The differing rows of A and B as far as the worker has them (the partial polls itself
    while the job runs)."""
    a, b = _comparable_pair()
    return _rows_partial(a, b, comparison.latest_rows_job(a, b))


@bp.post("/compare/rows")
def request_compare_rows():
    """Ask for the differing rows; the worker computes them on a unit of the user's."""
    a, b = _comparable_pair()
    try:
        job = comparison.request_rows(current_user, a, b)
    except comparison.RowsUnavailable as unavailable:
        return _rows_partial(a, b, None, error=unavailable.args[0])
    return _rows_partial(a, b, job, nothing_shared=job is None)


def _comparable_pair() -> tuple[Execution, Execution]:
    a, b = _pair()
    if b.workflow_id != a.workflow_id:
        abort(404)
    return a, b


def _rows_partial(
    a: Execution,
    b: Execution,
    job,
    error: str | None = None,
    nothing_shared: bool = False,
    template: str = "executions/_compare_rows.html",
    **context,
):
    """The differing rows' partial (or, with `template`, the page around it)."""
    return render_template(
        template,
        a=a,
        b=b,
        job=job,
        error=error,
        nothing_shared=nothing_shared,
        sample=comparison.SAMPLE_ROWS,
        rows=json.loads(job.result) if job is not None and not job.running else {},
        **context,
    )


@bp.get("/<int:execution_id>/row")
def row(execution_id: int):
    execution = _execution(execution_id)
    workflow = get_db().get(Workflow, execution.workflow_id)
    cu = get_db().get(ComputeUnit, execution.compute_unit_id) if execution.compute_unit_id else None
    return render_template(
        "executions/_row.html",
        row=queries.ExecutionRow(execution, workflow.name, cu.name if cu else None),
    )


@bp.post("/<int:execution_id>/cancel")
def cancel(execution_id: int):
    execution = _execution(execution_id)
    try:
        service.cancel(execution)
    except RunRefused as refusal:
        flash(refusal.message, "error")
    else:
        flash(f"Requested the cancellation of execution #{execution.id}.", "info")
    return redirect_to(url_for("executions.detail", execution_id=execution.id))


@bp.get("/<int:execution_id>/stats")
def stats(execution_id: int):
    execution = _execution(execution_id)
    timings, error, from_progress = [], None, False
    if results.ran_on_the_unit(execution):
        try:
            timings = results.step_timings(execution)
        except TableMissing:
            # It ended before recording them: what it reported as it ran is what it has.
            timings, from_progress = results.progress_timings(execution), True
        except ResultReadError as failure:
            error = failure.args[0]
    return render_template(
        "executions/_stats.html",
        execution=execution,
        error=error,
        from_progress=from_progress,
        chart=step_timeline_svg(timings) if timings else None,
    )


def _output_table(execution: Execution, step: str) -> str:
    table = queries.output_tables(execution).get(step)
    if table is None:
        abort(404)
    return table


def _table_partial(context: dict):
    """The pager's partial; the address bar follows the page shown."""
    return make_response(
        render_template("executions/_table_page.html", **context),
        push_url=canonical_page_url(context),
    )


@bp.get("/<int:execution_id>/results/<step>")
def results_page(execution_id: int, step: str):
    execution = _execution(execution_id)
    table = _output_table(execution, step)
    context = table_page_context(
        lambda page, size: results.page(execution, table, page, size),
        table,
        url_for("executions.results_page", execution_id=execution.id, step=step),
    )
    if request.htmx:
        return _table_partial(context)
    return render_template(
        "executions/results.html",
        execution=execution,
        step=step,
        warehouse=results.warehouse_of(execution),
        outputs=queries.output_tables(execution),
        **context,
    )


@bp.get("/<int:execution_id>/results/<step>/csv")
def download(execution_id: int, step: str):
    execution = _execution(execution_id)
    table = _output_table(execution, step)
    try:
        chunks = results.csv_chunks(execution, table)
    except ResultReadError as failure:
        return render_template("error.html", title="Download failed", message=failure.args[0]), 502
    return Response(
        chunks,
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{table.replace(".", "-")}.csv"'},
    )


@bp.get("/<int:execution_id>/logs")
def logs(execution_id: int):
    execution = _execution(execution_id)
    if request.args.get("tail") or not results.ran_on_the_unit(execution):
        # While it runs (or if it never ran): the tail the compute unit reports. Once it has
        # ended, the tail partial loads the complete console_logs table in its place.
        if request.htmx:
            return _live_partial(
                "executions/_log_tail.html",
                execution,
                lambda: {"progress": queries.progress_of(execution)},
            )
        return render_template(
            "executions/logs.html",
            execution=execution,
            progress=queries.progress_of(execution),
            tail=True,
        )
    context = logs_view.page_context(
        execution,
        logs_view.LogFilters.from_args(request.args),
        url_for("executions.logs", execution_id=execution.id),
    )
    if request.htmx:
        return _table_partial(context)
    return render_template("executions/logs.html", execution=execution, tail=False, **context)
