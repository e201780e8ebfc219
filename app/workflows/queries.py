"""What the workflow pages read: a user's workflows, a workflow's versions, the latest
sample-data job of a user into a warehouse."""

from __future__ import annotations

from sqlmodel import select

from app.db import get_db
from app.models import SampleDataJob, User, Warehouse, Workflow, WorkflowVersion


def user_workflows(owner: User) -> list[Workflow]:
    statement = (
        select(Workflow).where(Workflow.owner_id == owner.id).order_by(Workflow.updated_at.desc())
    )
    return list(get_db().exec(statement))


def versions_of(workflow: Workflow) -> list[WorkflowVersion]:
    statement = (
        select(WorkflowVersion)
        .where(WorkflowVersion.workflow_id == workflow.id)
        .order_by(WorkflowVersion.version.desc())
    )
    return list(get_db().exec(statement))


def sample_data_job(owner: User, warehouse: Warehouse) -> SampleDataJob | None:
    """The latest sample-data job of this user into this warehouse, if any."""
    return (
        get_db()
        .exec(
            select(SampleDataJob)
            .where(SampleDataJob.owner_id == owner.id, SampleDataJob.warehouse_id == warehouse.id)
            .order_by(SampleDataJob.id.desc())
            .limit(1)
        )
        .first()
    )
