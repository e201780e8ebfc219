"""The API's routes: thin, as the pages' are. Each loads the caller's rows through the same
services, answers another user's id with 404, and returns a model from `schemas.py`."""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from flask import current_app, request
from flask_login import current_user
from spectree import Response

from app.api import bp, schemas
from app.api.openapi import spec
from app.api.problems import ApiProblem
from app.compute_units import forms as unit_forms, lifecycle
from app.compute_units.backends import unit_choices
from app.compute_units.lifecycle import ComputeUnitError
from app.db import get_db, get_owned_or_404
from app.executions import history, runner
from app.models import ComputeUnit, Execution, Warehouse, Workflow
from app.warehouses import service as warehouses
from app.workflows import service as workflows

ERRORS = {"HTTP_400": schemas.Problem, "HTTP_401": schemas.Problem, "HTTP_403": schemas.Problem,
          "HTTP_404": schemas.Problem, "HTTP_413": schemas.Problem, "HTTP_429": schemas.Problem}
IDEMPOTENCY_KEY_MAX = 128


def _page(rows: Sequence, query: schemas.ListQuery, convert: Callable, page_model):
    """One page of `rows` (the caller's, any order), newest id first, after the query's cursor."""
    before = None
    if query.cursor is not None and (before := schemas.cursor_id(query.cursor)) is None:
        raise ApiProblem(400, "cursor: not one this API gave", "cursor")
    ordered = sorted((row for row in rows if before is None or row.id < before), key=lambda row: -row.id)
    items = ordered[:query.limit]
    more = len(ordered) > query.limit
    return page_model(items=[convert(row) for row in items],
                      next_cursor=schemas.cursor_after(items[-1].id) if more else None)


def _warehouse(row: Warehouse) -> schemas.Warehouse:
    return schemas.Warehouse(id=row.id, name=row.name, status=row.status, location=row.location, bucket=row.bucket,
                             key_prefix=row.key_prefix, endpoint=row.endpoint, region=row.region,
                             created_at=row.created_at, archived_at=row.archived_at)


def _unit(row: ComputeUnit) -> schemas.ComputeUnit:
    return schemas.ComputeUnit(id=row.id, name=row.name, kind=row.kind, state=row.state, reason=row.reason,
                               cpus=row.cpus, memory_gb=row.memory_gb, worker_nodes=row.worker_nodes,
                               created_at=row.created_at, started_at=row.started_at, ended_at=row.ended_at)


def _workflow(row: Workflow) -> schemas.Workflow:
    steps = [schemas.Step(**step.to_dict()) for step in workflows.steps_of(workflows.latest_version(row))]
    return schemas.Workflow(id=row.id, name=row.name, description=row.description,
                            latest_version=row.latest_version, steps=steps)


def _execution(row: Execution) -> schemas.Execution:
    outputs = json.loads(row.outputs or "{}").get("outputs") or {}
    return schemas.Execution(id=row.id, workflow_id=row.workflow_id, workflow_version=row.workflow_version,
                             compute_unit_id=row.compute_unit_id, warehouse_id=row.warehouse_id,
                             warehouse_name=row.warehouse_name, state=row.state, reason=row.reason,
                             created_at=row.created_at, started_at=row.started_at, ended_at=row.ended_at,
                             outputs={str(step): str(table) for step, table in outputs.items()})


# --- Warehouses ---------------------------------------------------------------------------


@bp.get("/warehouses")
@spec.validate(query=schemas.ListQuery, resp=Response(HTTP_200=schemas.WarehousePage, **ERRORS), tags=["warehouses"])
def list_warehouses(query: schemas.ListQuery):
    """Your warehouses."""
    return _page(warehouses.user_warehouses(current_user), query, _warehouse, schemas.WarehousePage)


@bp.get("/warehouses/<int:warehouse_id>")
@spec.validate(resp=Response(HTTP_200=schemas.Warehouse, **ERRORS), tags=["warehouses"])
def get_warehouse(warehouse_id: int):
    """One of your warehouses."""
    return _warehouse(get_owned_or_404(Warehouse, warehouse_id))


# --- Compute units ------------------------------------------------------------------------


@bp.get("/compute-units")
@spec.validate(query=schemas.ListQuery, resp=Response(HTTP_200=schemas.ComputeUnitPage, **ERRORS),
               tags=["compute units"])
def list_compute_units(query: schemas.ListQuery):
    """Your compute units (but those you cleared from the list)."""
    return _page(lifecycle.user_compute_units(current_user), query, _unit, schemas.ComputeUnitPage)


@bp.post("/compute-units")
@spec.validate(json=schemas.ComputeUnitCreate, resp=Response(HTTP_201=schemas.ComputeUnit, **ERRORS),
               tags=["compute units"])
def create_compute_unit(json: schemas.ComputeUnitCreate):
    """Ask for a compute unit: it is PENDING until the worker has started it."""
    values, errors = unit_forms.parse({key: str(value) for key, value in json.model_dump().items()},
                                      current_app.config, *unit_choices(current_app.config, current_user))
    if errors:
        field, message = next(iter(errors.items()))
        raise ApiProblem(400, message, field)
    try:
        cu = lifecycle.create(current_user, values)
    except ComputeUnitError as error:
        raise ApiProblem(409 if error.field in (None, "form") else 400, error.message, error.field) from None
    return _unit(cu), 201


@bp.get("/compute-units/<int:cu_id>")
@spec.validate(resp=Response(HTTP_200=schemas.ComputeUnit, **ERRORS), tags=["compute units"])
def get_compute_unit(cu_id: int):
    """One of your compute units."""
    return _unit(get_owned_or_404(ComputeUnit, cu_id))


@bp.post("/compute-units/<int:cu_id>/terminate")
@spec.validate(resp=Response(HTTP_202=schemas.ComputeUnit, **ERRORS), tags=["compute units"])
def terminate_compute_unit(cu_id: int):
    """Ask for the unit to be stopped: it is TERMINATING until the worker has stopped it."""
    cu = get_owned_or_404(ComputeUnit, cu_id)
    lifecycle.terminate(cu, reason="terminated by its owner")
    get_db().refresh(cu)
    return _unit(cu), 202


# --- Workflows ------------------------------------------------------------------------------


@bp.get("/workflows")
@spec.validate(query=schemas.ListQuery, resp=Response(HTTP_200=schemas.WorkflowPage, **ERRORS), tags=["workflows"])
def list_workflows(query: schemas.ListQuery):
    """Your workflows, each with the steps of its latest version."""
    return _page(workflows.user_workflows(current_user), query, _workflow, schemas.WorkflowPage)


@bp.get("/workflows/<int:workflow_id>")
@spec.validate(resp=Response(HTTP_200=schemas.Workflow, **ERRORS), tags=["workflows"])
def get_workflow(workflow_id: int):
    """One of your workflows, with the steps of its latest version."""
    return _workflow(get_owned_or_404(Workflow, workflow_id))


# --- Executions -----------------------------------------------------------------------------


@bp.get("/executions")
@spec.validate(query=schemas.ListQuery, resp=Response(HTTP_200=schemas.ExecutionPage, **ERRORS),
               tags=["executions"])
def list_executions(query: schemas.ListQuery):
    """Your executions (the newest 200)."""
    rows = [row.execution for row in history.user_executions(current_user)]
    return _page(rows, query, _execution, schemas.ExecutionPage)


@bp.post("/executions")
@spec.validate(json=schemas.ExecutionStart,
               resp=Response(HTTP_201=schemas.Execution, HTTP_200=schemas.Execution, **ERRORS), tags=["executions"])
def start_execution(json: schemas.ExecutionStart):
    """Run a workflow version on one of your running units, into one of your active warehouses.
    With an `Idempotency-Key` header, a retried call answers the execution the first one started
    (200) instead of starting another."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not (0 < len(key) <= IDEMPOTENCY_KEY_MAX and key.isprintable()):
        raise ApiProblem(400, f"Idempotency-Key: 1 to {IDEMPOTENCY_KEY_MAX} printable characters", "Idempotency-Key")
    if key is not None and (earlier := runner.started_with(current_user, key)) is not None:
        return _execution(earlier), 200
    workflow = get_owned_or_404(Workflow, json.workflow_id)
    version = (workflows.version_of(workflow, json.version) if json.version is not None
               else workflows.latest_version(workflow))
    if version is None:
        raise ApiProblem(400, f"workflow {workflow.id} has no version {json.version}", "version")
    db = get_db()
    try:
        execution = runner.start(current_user, workflow, version, db.get(ComputeUnit, json.compute_unit_id),
                                 db.get(Warehouse, json.warehouse_id), idempotency_key=key)
    except runner.RunRefused as refusal:
        raise ApiProblem(400, refusal.message, refusal.field) from None
    except runner.AlreadyStarted as started:  # the same key, at the same moment
        return _execution(started.execution), 200
    return _execution(execution), 201


@bp.get("/executions/<int:execution_id>")
@spec.validate(resp=Response(HTTP_200=schemas.Execution, **ERRORS), tags=["executions"])
def get_execution(execution_id: int):
    """One of your executions."""
    return _execution(get_owned_or_404(Execution, execution_id))


@bp.post("/executions/<int:execution_id>/cancel")
@spec.validate(resp=Response(HTTP_202=schemas.Execution, HTTP_409=schemas.Problem, **ERRORS), tags=["executions"])
def cancel_execution(execution_id: int):
    """Cancel an execution: at once if it has not started, else as soon as its unit has stopped it."""
    execution = get_owned_or_404(Execution, execution_id)
    try:
        runner.cancel(execution)
    except runner.RunRefused as refusal:
        raise ApiProblem(409, refusal.message) from None
    return _execution(execution), 202
