"""The API's workflows: list, get, save a new version."""

from __future__ import annotations

from flask_login import current_user
from spectree import Response

from app.api import bp, schemas
from app.api.openapi import spec
from app.api.paging import ERRORS, page_of
from app.api.problems import ApiProblem
from app.db import get_owned_or_404
from app.models import Workflow
from app.workflows import queries, service
from app.workflows import sharing as workflow_sharing
from app.workflows import steps as step_model
from app.workflows.service import WorkflowActionError
from compute.contract import Step


def workflow_out(row: Workflow) -> schemas.Workflow:
    steps = [
        schemas.Step(**step.to_dict()) for step in service.steps_of(service.latest_version(row))
    ]
    return schemas.Workflow(
        id=row.id,
        name=row.name,
        description=row.description,
        latest_version=row.latest_version,
        steps=steps,
    )


@bp.get("/workflows")
@spec.validate(
    query=schemas.ListQuery,
    resp=Response(HTTP_200=schemas.WorkflowPage, **ERRORS),
    tags=["workflows"],
)
def list_workflows(query: schemas.ListQuery):
    """Your workflows, each with the steps of its latest version."""
    return page_of(queries.user_workflows(current_user), query, workflow_out, schemas.WorkflowPage)


@bp.get("/workflows/<int:workflow_id>")
@spec.validate(resp=Response(HTTP_200=schemas.Workflow, **ERRORS), tags=["workflows"])
def get_workflow(workflow_id: int):
    """One of your workflows, or one shared with you (to view or to run: a runner reads the code
    it is about to run), with the steps of its latest version."""
    return workflow_out(workflow_sharing.accessible_or_404(workflow_id))


@bp.post("/workflows/<int:workflow_id>/versions")
@spec.validate(
    json=schemas.StepsIn,
    resp=Response(HTTP_201=schemas.Workflow, HTTP_409=schemas.Problem, **ERRORS),
    tags=["workflows"],
)
def save_workflow_version(workflow_id: int, json: schemas.StepsIn):
    """Save the steps as the workflow's next version (versions never change once saved). The
    steps get the editor's checks; `base_version` must be the latest, or the save is refused."""
    workflow = get_owned_or_404(Workflow, workflow_id)
    steps = [step_model.normalized(Step.from_dict(step.model_dump())) for step in json.steps]
    check = step_model.check_steps(steps)
    if not check.ok:
        if check.workflow:
            raise ApiProblem(400, check.workflow[0], "steps")
        index, fields = next(iter(check.steps.items()))
        field, messages = next(iter(fields.items()))
        raise ApiProblem(400, messages[0], f"steps.{index}.{field}")
    try:
        service.save_version(workflow, steps, json.base_version)
    except WorkflowActionError as error:
        raise ApiProblem(409, error.message, error.field) from None
    return workflow_out(workflow), 201


@bp.delete("/workflows/<int:workflow_id>")
@spec.validate(resp=Response("HTTP_204", HTTP_409=schemas.Problem, **ERRORS), tags=["workflows"])
def delete_workflow(workflow_id: int):
    """Delete a workflow that never ran (one that ran stays, so its history stays readable)."""
    workflow = get_owned_or_404(Workflow, workflow_id)
    try:
        service.delete(workflow)
    except WorkflowActionError as error:
        raise ApiProblem(409, error.message) from None
    return "", 204
