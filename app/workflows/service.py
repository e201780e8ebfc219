"""What users do with workflows: create, save a new version of the steps, read versions, delete.

A version is never changed once written; saving writes version `latest_version + 1`.
"""

from __future__ import annotations

from flask import current_app
from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import select

from app.audit import service as audit
from app.db import get_db
from app.errors import UserFacingError
from app.models import Execution, User, Workflow, WorkflowVersion, utcnow
from app.workflows import steps as step_model
from app.workflows.steps import Step


class WorkflowActionError(UserFacingError):
    """An action was refused; `message` is for the user."""


def create(owner: User, name: str, description: str) -> Workflow:
    """A workflow without steps yet: its first save in the editor is version 1."""
    db = get_db()
    if db.exec(
        select(Workflow.id).where(Workflow.owner_id == owner.id, Workflow.name == name)
    ).first():
        raise WorkflowActionError("You already have a workflow with this name.", field="name")
    workflow = Workflow(owner_id=owner.id, name=name, description=description)
    db.add(workflow)
    try:
        db.commit()
    except IntegrityError:  # the same name, created at the same moment
        db.rollback()
        raise WorkflowActionError(
            "You already have a workflow with this name.", field="name"
        ) from None
    current_app.logger.info("user %s created workflow %s", owner.id, workflow.id)
    audit.record("workflow.create", workflow, name=name)
    return workflow


def version_of(workflow: Workflow, number: int) -> WorkflowVersion | None:
    statement = select(WorkflowVersion).where(
        WorkflowVersion.workflow_id == workflow.id, WorkflowVersion.version == number
    )
    return get_db().exec(statement).first()


def latest_version(workflow: Workflow) -> WorkflowVersion | None:
    return version_of(workflow, workflow.latest_version) if workflow.latest_version else None


def steps_of(version: WorkflowVersion | None) -> list[Step]:
    """The version's steps in order ([] for a workflow never saved)."""
    return step_model.loads(version.steps) if version else []


def save_version(workflow: Workflow, steps: list[Step], base_version: int) -> WorkflowVersion:
    """Write the steps as the next version. `base_version` is the version the editor started
    from: if another save happened since, this one is refused rather than silently replacing it."""
    check = step_model.check_steps(steps)
    if not check.ok:
        raise WorkflowActionError("Fix the steps marked below, then save again.")
    if base_version != workflow.latest_version:
        raise WorkflowActionError(
            f"This workflow was saved as version {workflow.latest_version} after you opened the editor. "
            "Your changes are still here; save again to make them the next version.",
            field="base_version",
        )
    if workflow.latest_version and steps_of(latest_version(workflow)) == steps:
        raise WorkflowActionError(f"Nothing changed since version {workflow.latest_version}.")
    db = get_db()
    version = WorkflowVersion(
        workflow_id=workflow.id, version=workflow.latest_version + 1, steps=step_model.dumps(steps)
    )
    workflow.latest_version = version.version
    workflow.updated_at = utcnow()
    db.add(version)
    db.add(workflow)
    try:
        db.commit()
    except IntegrityError:  # another save took this version number first
        db.rollback()
        db.refresh(workflow)
        raise WorkflowActionError(
            f"This workflow was saved as version {workflow.latest_version} at the same moment. "
            "Your changes are still here; save again to make them the next version.",
            field="base_version",
        ) from None
    current_app.logger.info("workflow %s saved as version %s", workflow.id, version.version)
    audit.record("workflow.save", workflow, version=version.version, steps=len(steps))
    return version


def delete(workflow: Workflow) -> None:
    """Delete a workflow; its versions go with it (ON DELETE CASCADE). Refused once it has executions: their history
    (and the tables they wrote, which name the workflow) must keep pointing at it."""
    if (
        count := get_db()
        .exec(
            select(func.count()).select_from(Execution).where(Execution.workflow_id == workflow.id)
        )
        .one()
    ):
        raise WorkflowActionError(
            f"{workflow.name} has {count} execution{'s' if count != 1 else ''}; a workflow that has run "
            "stays, so that its history remains readable."
        )
    db = get_db()
    db.delete(workflow)
    db.commit()
    current_app.logger.info("deleted workflow %s", workflow.id)
    audit.record("workflow.delete", workflow, name=workflow.name)
