"""Sharing a workflow with a user or a group, to `view` (read its versions, copy it) or to `run`
(also run it). A runner uses their own unit and a warehouse they may write; the execution is
theirs and records who ran it. Versions stay immutable and the owner's to write: editing,
deleting, scheduling and sharing stay with the owner (404 for anyone else)."""

from __future__ import annotations

from flask import abort
from sqlalchemy.exc import IntegrityError

from app import grantees
from app.audit import service as audit
from app.db import get_db
from app.errors import UserFacingError
from app.models import User, Workflow, WorkflowShare
from app.signals import enforce_shares
from app.workflows import service

LEVELS = {"view": "View its versions and copy it", "run": "Also run it, on their own unit"}
OWNER, RUN, VIEW = grantees.OWNER, "run", "view"
MAX_SHARES = 100
_shares = grantees.Shares(Workflow, WorkflowShare, "workflow_id", (VIEW, RUN))


def access_of(user: User, workflow: Workflow) -> str | None:
    """What `user` may do with `workflow`: OWNER, RUN or VIEW, or None."""
    return _shares.access_of(user, workflow)


def accessible_or_404(workflow_id: int, need: str | None = None) -> Workflow:
    """The workflow if the signed-in user may `need` it (by default the lowest level); 404
    otherwise, exactly like a missing one."""
    return _shares.accessible_or_404(workflow_id, need)


def shared_with(user: User) -> list[tuple[Workflow, str, User]]:
    """Other users' workflows shared with `user`: (the workflow, the best level, its owner)."""
    return _shares.shared_with(user)


def shares_of(workflow: Workflow) -> list[tuple]:
    """Who else has `workflow`: each share with its user (None for a group's)."""
    return _shares.shares_of(workflow)


class ShareRefused(UserFacingError):
    """A share could not be made or revoked; `message` for the owner, `field` the form's."""


def share(workflow: Workflow, values) -> WorkflowShare:
    """Share with a user or a group at `level`, or change the level of an existing share."""
    level = values.get("level")
    if level not in LEVELS:
        raise ShareRefused("Choose view or run.", "level")
    grantee = grantees.parse(values, workflow.owner_id, ShareRefused)
    db = get_db()
    row = _shares.find(workflow, grantee)
    before = row.level if row else None
    if row is None:
        if len(shares_of(workflow)) >= MAX_SHARES:
            raise ShareRefused(f"A workflow has at most {MAX_SHARES} shares.")
        row = WorkflowShare(workflow_id=workflow.id, level=level, **grantee.fields)
    row.level = level
    db.add(row)
    try:
        db.commit()
    except IntegrityError:  # the same grantee, shared at the same moment by another request
        db.rollback()
        raise ShareRefused(
            "This workflow was shared with them at the same moment. Look again."
        ) from None
    audit.record("workflow.share", workflow, grantee=grantee.fields, before=before, after=level)
    if before:  # a level changed: runs it no longer allows stop
        enforce_shares(workflow)
    return row


def revoke(workflow: Workflow, share_id: int) -> None:
    db = get_db()
    row = db.get(WorkflowShare, share_id)
    if row is None or row.workflow_id != workflow.id:
        abort(404)
    db.delete(row)
    db.commit()
    audit.record(
        "workflow.unshare", workflow, grantee=grantees.fields_of(row), before=row.level, after=None
    )
    enforce_shares(workflow)  # the sharee's runs of it that have not reached a unit stop


def copy(user: User, workflow: Workflow, name: str) -> Workflow:
    """A workflow of `user`'s own named `name`, whose version 1 holds the shared one's latest steps."""
    made = service.create(user, name, f"Copied from {workflow.name}")
    version = service.latest_version(workflow)
    if version is not None:
        service.save_version(made, service.steps_of(version), 0)
    audit.record(
        "workflow.copy",
        made,
        source_workflow_id=workflow.id,
        source_version=workflow.latest_version,
    )
    return made
