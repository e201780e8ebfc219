"""Recording and reading the audit trail.

`record` is called by the services after a state change succeeds (pages, the API and the worker
all go through them), so each action is written once, wherever it came from. In a request the
actor is the signed-in user (and the personal token the call used), the address the request came
from and its user agent; in the worker, the actor is given (a schedule acts for its owner).
Details are checked for secrets by name: a key that looks like one is refused, not stored.
Rows are only ever inserted: the database refuses an UPDATE or a DELETE (migration 0014).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from datetime import timedelta

from flask import g, has_request_context, request
from flask_login import current_user
from sqlalchemy import or_
from sqlmodel import Session, select

from app.db import engine, get_db
from app.models import AuditEvent, User, utcnow
from app.untrusted import clean_text

# Detail keys that could hold a secret never reach a row (a programming error, refused loudly).
SECRET_WORDS = ("secret", "password", "token_text", "access_key", "credential")
PAGE_SIZE = 100
EXPORT_LIMIT = 10_000
CSV_COLUMNS = (
    "at",
    "actor",
    "token_id",
    "action",
    "object_type",
    "object_id",
    "owner_id",
    "detail",
    "ip",
    "user_agent",
)


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


@dataclass
class Filters:
    action: str = ""
    object_type: str = ""
    actor: str = ""
    days: int = 30

    @classmethod
    def from_args(cls, args) -> "Filters":
        days = args.get("days", type=int) or 30
        return cls(
            action=(args.get("action") or "").strip()[:64],
            object_type=(args.get("object_type") or "").strip()[:32],
            actor=(args.get("actor") or "").strip()[:255],
            days=max(1, min(days, 3650)),
        )

    def query(self) -> dict:
        return {key: value for key, value in vars(self).items() if value}


def visible_events(
    viewer: User,
    everything: bool,
    filters: Filters,
    before_id: int | None = None,
    limit: int = PAGE_SIZE,
) -> list[AuditEvent]:
    """The events `viewer` may read, newest first: those on their objects or by them, or (an
    operator's `everything`) all."""
    statement = select(AuditEvent).where(AuditEvent.at >= utcnow() - timedelta(days=filters.days))
    if not everything:
        statement = statement.where(
            or_(AuditEvent.owner_id == viewer.id, AuditEvent.actor_id == viewer.id)
        )
    if filters.action:
        statement = statement.where(AuditEvent.action.startswith(filters.action, autoescape=True))
    if filters.object_type:
        statement = statement.where(AuditEvent.object_type == filters.object_type)
    if filters.actor:
        statement = statement.where(AuditEvent.actor_name.contains(filters.actor, autoescape=True))
    if before_id is not None:
        statement = statement.where(AuditEvent.id < before_id)
    return list(get_db().exec(statement.order_by(AuditEvent.id.desc()).limit(limit)))


def as_csv(events: list[AuditEvent]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for event in events:
        writer.writerow(
            [
                _cell(value)
                for value in (
                    event.at.isoformat(),
                    event.actor_name,
                    event.token_id or "",
                    event.action,
                    event.object_type,
                    event.object_id,
                    event.owner_id or "",
                    event.detail,
                    event.ip,
                    event.user_agent,
                )
            ]
        )
    return out.getvalue()


def _cell(value) -> str:
    """A CSV cell a spreadsheet shows as text, never runs as a formula."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
