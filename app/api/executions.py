"""The API's executions: list, start (idempotent), get, cancel; results page by page, CSV, logs
and lineage."""

from __future__ import annotations

import json as json_module

from flask import Response as FlaskResponse
from flask import request
from flask_login import current_user
from pydantic import BaseModel, Field
from spectree import Response

from app.api import bp, schemas
from app.api.openapi import spec
from app.api.paging import ERRORS, page_of, rows_page, table_read
from app.api.problems import PROBLEM_TYPE, ApiProblem
from app.db import get_db, get_owned_or_404
from app.executions import logs, notifications, results, seen_version
from app.executions import queries as execution_queries
from app.executions import service as execution_service
from app.models import ComputeUnit, Execution, Warehouse
from app.workflows import sharing as workflow_sharing

IDEMPOTENCY_KEY_MAX = 128


class LogsQuery(schemas.RowsQuery):
    level: str = Field("", max_length=16)
    step: str = Field("", max_length=40)
    q: str = Field("", max_length=logs.MAX_QUERY_LENGTH)


class Lines(BaseModel):
    """A running execution's last lines, as its unit reports them (its console_logs table once it ended)."""

    lines: list[dict]


def execution_out(row: Execution) -> schemas.Execution:
    outputs = json_module.loads(row.outputs or "{}").get("outputs") or {}
    fields = {
        name: getattr(row, name) for name in schemas.Execution.model_fields if hasattr(row, name)
    }
    return schemas.Execution(
        **{
            **fields,
            "outputs": {str(step): str(table) for step, table in outputs.items()},
            "published": execution_queries.published_outputs(row),
            "checks": execution_queries.check_results(row),
            "code_author": seen_version.execution_code_author(row),
        }
    )


def _version_conflict(changed: seen_version.VersionChanged) -> FlaskResponse:
    """409: the workflow's latest version is not the one the call saw (nothing started)."""
    body = schemas.VersionConflict(
        type="about:blank",
        title="Conflict",
        status=409,
        detail=changed.message,
        field="version",
        seen_version=changed.seen,
        latest_version=changed.latest,
    )
    return FlaskResponse(body.model_dump_json(), 409, content_type=PROBLEM_TYPE)


def _output_table(execution: Execution, step: str) -> str:
    table = execution_queries.output_tables(execution).get(step)
    if table is None:
        raise ApiProblem(
            404,
            f"Execution {execution.id} has no output {step!r} (only a completed one has outputs).",
        )
    return table


@bp.get("/executions")
@spec.validate(
    query=schemas.ListQuery,
    resp=Response(HTTP_200=schemas.ExecutionPage, **ERRORS),
    tags=["executions"],
)
def list_executions(query: schemas.ListQuery):
    """Your executions (the newest 200)."""
    rows = [row.execution for row in execution_queries.user_executions(current_user)]
    return page_of(rows, query, execution_out, schemas.ExecutionPage)


@bp.post("/executions")
@spec.validate(
    json=schemas.ExecutionStart,
    resp=Response(
        HTTP_201=schemas.Execution,
        HTTP_200=schemas.Execution,
        HTTP_409=schemas.VersionConflict,
        **ERRORS,
    ),
    tags=["executions"],
)
def start_execution(json: schemas.ExecutionStart):
    """Run a workflow's latest version, the one you saw (`version`), on one of your running units, into one of
    your active warehouses, optionally reading some tables at given snapshots (`pinned`). If a newer version
    was saved meanwhile, nothing starts: 409 with `seen_version` and `latest_version`. With an `Idempotency-Key`
    header, a retried call answers the execution the first one started (200) instead of starting another."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not (0 < len(key) <= IDEMPOTENCY_KEY_MAX and key.isprintable()):
        raise ApiProblem(400, f"1 to {IDEMPOTENCY_KEY_MAX} printable characters", "Idempotency-Key")
    if (
        key is not None
        and (earlier := execution_service.started_with(current_user, key)) is not None
    ):
        return execution_out(earlier), 200
    workflow = workflow_sharing.accessible_or_404(json.workflow_id, workflow_sharing.RUN)
    try:
        version = seen_version.version_to_run(current_user, workflow, json.version)
    except seen_version.VersionChanged as changed:
        return _version_conflict(changed)
    asked = (
        {
            "notify_on": json.notify.on,
            "webhook_url": json.notify.webhook_url,
            "notify_email": json.notify.email,
        }
        if json.notify
        else {}
    )
    for field, message in notifications.check(asked).items():
        raise ApiProblem(
            400,
            message,
            {"notify_on": "notify.on", "notify_email": "notify.email"}.get(
                field, f"notify.{field}"
            ),
        )
    db = get_db()
    try:
        execution = execution_service.start(
            current_user,
            workflow,
            version,
            db.get(ComputeUnit, json.compute_unit_id),
            db.get(Warehouse, json.warehouse_id),
            idempotency_key=key,
            pinned_to={"tables": json.pinned} if json.pinned else None,
            notify=notifications.fields(asked),
        )
    except execution_service.RunRefused as refusal:
        raise ApiProblem(400, refusal.message, refusal.field) from None
    except execution_service.AlreadyStarted as started:  # the same key, at the same moment
        return execution_out(started.execution), 200
    answer = execution_out(execution)
    if execution.webhook_url:  # its signing secret, in this answer only
        answer.webhook_secret = notifications.webhook_secret(execution)
    return answer, 201


@bp.get("/executions/<int:execution_id>")
@spec.validate(resp=Response(HTTP_200=schemas.Execution, **ERRORS), tags=["executions"])
def get_execution(execution_id: int):
    """One of your executions."""
    return execution_out(get_owned_or_404(Execution, execution_id))


@bp.post("/executions/<int:execution_id>/cancel")
@spec.validate(
    resp=Response(HTTP_202=schemas.Execution, HTTP_409=schemas.Problem, **ERRORS),
    tags=["executions"],
)
def cancel_execution(execution_id: int):
    """Cancel an execution: at once if it has not started, else as soon as its unit has stopped it."""
    execution = get_owned_or_404(Execution, execution_id)
    try:
        execution_service.cancel(execution)
    except execution_service.RunRefused as refusal:
        raise ApiProblem(409, refusal.message) from None
    return execution_out(execution), 202


@bp.get("/executions/<int:execution_id>/results/<step>")
@spec.validate(
    query=schemas.RowsQuery,
    resp=Response(HTTP_200=schemas.RowsPage, HTTP_409=schemas.Problem, **ERRORS),
    tags=["executions"],
)
def get_results(execution_id: int, step: str, query: schemas.RowsQuery):
    """One page of an output's rows."""
    execution = get_owned_or_404(Execution, execution_id)
    table = _output_table(execution, step)
    return rows_page(table_read(lambda: results.page(execution, table, query.page, query.size)))


@bp.get("/executions/<int:execution_id>/results/<step>/csv")
@spec.validate(resp=Response("HTTP_200", HTTP_409=schemas.Problem, **ERRORS), tags=["executions"])
def get_results_csv(execution_id: int, step: str):
    """An output's rows as CSV (text/csv), streamed."""
    execution = get_owned_or_404(Execution, execution_id)
    table = _output_table(execution, step)
    chunks = table_read(lambda: results.csv_chunks(execution, table))
    return FlaskResponse(
        chunks,
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{table.replace(".", "-")}.csv"'},
    )


@bp.get("/executions/<int:execution_id>/logs")
@spec.validate(
    query=LogsQuery,
    resp=Response(HTTP_200=schemas.RowsPage, HTTP_409=schemas.Problem, **ERRORS),
    tags=["executions"],
)
def get_logs(execution_id: int, query: LogsQuery):
    """One page of an ended execution's console log, in time order, optionally filtered by
    level, step and text (`q`). While it runs, `/logs/tail` has its last lines."""
    execution = get_owned_or_404(Execution, execution_id)
    if not results.ran_on_the_unit(execution):
        raise ApiProblem(409, "This execution has not ended on its unit: see /logs/tail.")
    filters = logs.LogFilters(level=query.level, step=query.step, text=query.q)
    return rows_page(
        table_read(lambda: logs.log_view(execution, filters).page(query.page, query.size))
    )


@bp.get("/executions/<int:execution_id>/logs/tail")
@spec.validate(resp=Response(HTTP_200=Lines, **ERRORS), tags=["executions"])
def get_log_tail(execution_id: int):
    """The last lines the execution's unit reported (kept while it runs)."""
    execution = get_owned_or_404(Execution, execution_id)
    return Lines(
        lines=[
            line
            for line in execution_queries.progress_of(execution)["logs"]
            if isinstance(line, dict)
        ]
    )


@bp.get("/executions/<int:execution_id>/lineage")
@spec.validate(resp=Response(HTTP_200=schemas.Lineage, **ERRORS), tags=["executions"])
def get_lineage(execution_id: int):
    """What a completed execution read (tables and snapshots), read incrementally and wrote."""
    lineage = execution_queries.lineage_of(get_owned_or_404(Execution, execution_id))
    return schemas.Lineage(**lineage)
