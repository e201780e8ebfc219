"""Reading the audit trail: the events a viewer may read, filtered and paged (newest first),
and their CSV export."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import or_
from sqlmodel import select

from app.db import get_db
from app.models import AuditEvent, User, utcnow

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
