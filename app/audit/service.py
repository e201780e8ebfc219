"""Recording the audit trail: `record` appends one event.

It is called by the services after a state change succeeds (pages, the API and the worker
all go through them), so each action is written once, wherever it came from. In a request the
actor is the signed-in user (and the personal token the call used), the address the request came
from and its user agent; in the worker, the actor is given (a schedule acts for its owner).
Details are checked for secrets by name: a key that looks like one is refused, not stored.
Rows are only ever inserted: the database refuses an UPDATE or a DELETE (migration 0014).
"""

from __future__ import annotations

import json

from flask import g, has_request_context, request
from flask_login import current_user
from sqlmodel import Session

from app.db import engine
from app.models import AuditEvent, User
from app.untrusted import clean_text

# Detail keys that could hold a secret never reach a row (a programming error, refused loudly).
SECRET_WORDS = ("secret", "password", "token_text", "access_key", "credential")


def record(
    action: str, obj=None, *, owner_id: int | None = None, actor: User | None = None, **detail
) -> None:
    """Append one event: `action` ("warehouse.rename"…) on `obj` (a row with an id and, usually,
    an owner), with `detail` (before/after and what else matters; never a secret)."""
    leaked = [key for key in detail if any(word in key.lower() for word in SECRET_WORDS)]
    if leaked:
        raise ValueError(f"audit details never hold secrets: {leaked}")
    in_request = has_request_context()
    if actor is None and in_request and current_user.is_authenticated:
        actor = current_user
    token = g.get("api_token") if in_request else None
    event = AuditEvent(
        actor_id=actor.id if actor else None,
        actor_name=actor.display_name[:255] if actor else "",
        token_id=token.id if token is not None else None,
        action=action,
        object_type=type(obj).__name__.lower() if obj is not None else "",
        object_id=str(getattr(obj, "id", "") or "")[:64],
        owner_id=owner_id if owner_id is not None else getattr(obj, "owner_id", None),
        detail=clean_text(json.dumps(detail, default=str, sort_keys=True), 2000),
        ip=(request.remote_addr or "")[:64] if in_request else "",
        user_agent=clean_text(request.user_agent.string, 255, one_line=True) if in_request else "",
    )
    with Session(engine()) as db:  # its own transaction: the caller's has committed its change
        db.add(event)
        db.commit()
