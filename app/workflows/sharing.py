"""Sharing a workflow with a user or a group, to `view` (read its versions, copy it) or to `run`
(also run it). A runner uses their own unit and a warehouse they may write; the execution is
theirs and records who ran it. Versions stay immutable and the owner's to write: editing,
deleting, scheduling and sharing stay with the owner (404 for anyone else)."""
from __future__ import annotations

from flask import abort
from flask_login import current_user
from sqlalchemy.exc import IntegrityError
from sqlmodel import select

from app import grantees
from app.audit import trail as audit
from app.db import get_db
from app.errors import UserFacingError
from app.grantees import shared_to
from app.models import User, Workflow, WorkflowShare
from app.workflows import service

LEVELS = {"view": "View its versions and copy it", "run": "Also run it, on their own unit"}
OWNER, RUN, VIEW = "owner", "run", "view"
RANK = {None: 0, VIEW: 1, RUN: 2, OWNER: 3}
MAX_SHARES = 100


class ShareRefused(UserFacingError):
    """A share could not be made or revoked; `message` for the owner, `field` the form's."""


def access_of(user: User, workflow: Workflow) -> str | None:
    """What `user` may do with the workflow: "owner", "run", "view", or None."""
    if workflow.owner_id == user.id:
        return OWNER
    levels = [share.level for share in get_db().exec(select(WorkflowShare).where(
        WorkflowShare.workflow_id == workflow.id, shared_to(WorkflowShare, user)))]
    return max(levels, key=RANK.__getitem__, default=None)


def accessible_or_404(workflow_id: int, need: str = VIEW) -> Workflow:
    """The workflow if the signed-in user may `need` it; 404 otherwise, like a missing one."""
    workflow = get_db().get(Workflow, workflow_id)
    if workflow is None or RANK[access_of(current_user, workflow)] < RANK[need]:
        abort(404)
    return workflow


def shared_with(user: User) -> list[tuple[Workflow, str, User]]:
    """Other users' workflows shared with `user`: (workflow, the best level, its owner)."""
    rows = get_db().exec(select(WorkflowShare, Workflow, User)
                         .join(Workflow, Workflow.id == WorkflowShare.workflow_id)
                         .join(User, User.id == Workflow.owner_id)
                         .where(shared_to(WorkflowShare, user), Workflow.owner_id != user.id).order_by(Workflow.name))
    best: dict[int, tuple[Workflow, str, User]] = {}
    for share, workflow, owner in rows:
        if workflow.id not in best or RANK[share.level] > RANK[best[workflow.id][1]]:
            best[workflow.id] = (workflow, share.level, owner)
    return list(best.values())


def shares_of(workflow: Workflow) -> list[tuple[WorkflowShare, User | None]]:
    return list(get_db().exec(select(WorkflowShare, User).join(User, User.id == WorkflowShare.user_id, isouter=True)
                              .where(WorkflowShare.workflow_id == workflow.id)
                              .order_by(WorkflowShare.group_name, WorkflowShare.id)))


def share(workflow: Workflow, values) -> WorkflowShare:
    """Share with a user or a group at `level`, or change the level of an existing share."""
    level = values.get("level")
    if level not in LEVELS:
        raise ShareRefused("Choose view or run.", "level")
    grantee = grantees.parse(values, workflow.owner_id, ShareRefused)
    db = get_db()
    row = db.exec(select(WorkflowShare).where(WorkflowShare.workflow_id == workflow.id,
                                              grantee.same_as(WorkflowShare))).first()
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
        raise ShareRefused("This workflow was shared with them at the same moment. Look again.") from None
    audit.record("workflow.share", workflow, grantee=grantee.fields, before=before, after=level)
    return row


def revoke(workflow: Workflow, share_id: int) -> None:
    db = get_db()
    row = db.get(WorkflowShare, share_id)
    if row is None or row.workflow_id != workflow.id:
        abort(404)
    grantee = {"user_id": row.user_id} if row.user_id else {"group_name": row.group_name}
    db.delete(row)
    db.commit()
    audit.record("workflow.unshare", workflow, grantee=grantee, before=row.level, after=None)


def copy(user: User, workflow: Workflow, name: str) -> Workflow:
    """A workflow of `user`'s own named `name`, whose version 1 holds the shared one's latest steps."""
    made = service.create(user, name, f"Copied from {workflow.name}")
    version = service.latest_version(workflow)
    if version is not None:
        service.save_version(made, service.steps_of(version), 0)
    audit.record("workflow.copy", made, source_workflow_id=workflow.id, source_version=workflow.latest_version)
    return made
