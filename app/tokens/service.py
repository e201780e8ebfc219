"""Personal access tokens: a random secret shown once, stored only as its SHA-256, with a name,
a scope ("read" or "run"), an expiry of at most MAX_DAYS, and a last-used time; revoked at once.

A token stands for its owner in the API (app/api/auth.py), never on the pages, and opens only
what its scope allows.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlmodel import select

from app.audit import service as audit
from app.db import get_db, writing_session
from app.errors import UserFacingError
from app.models import ApiToken, User, utcnow

SCOPES = {
    "read": "Read: look at warehouses, units, workflows and executions",
    "run": "Run: also start and cancel executions, create and terminate units",
}
MAX_DAYS = 90
PREFIX = "lkp_"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$")
# What a token's text looks like: anything else is refused before the database is asked.
TOKEN_RE = re.compile(r"^lkp_[A-Za-z0-9_-]{43}$")


class TokenRefused(UserFacingError):
    """A token could not be made or revoked; `message` is for the user, `field` the form field."""


@dataclass(frozen=True)
class NewToken:
    row: ApiToken
    text: str  # shown once, never stored


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def create(owner: User, name: str, scope: str, days: str | int) -> NewToken:
    name = (name or "").strip()
    if not NAME_RE.match(name):
        raise TokenRefused(
            "1–64 characters: letters, digits, spaces, _ . and -, starting with a letter or digit.",
            "name",
        )
    if scope not in SCOPES:
        raise TokenRefused("Choose read or run.", "scope")
    try:
        days = int(days)
    except (TypeError, ValueError):
        days = 0
    if not 1 <= days <= MAX_DAYS:
        raise TokenRefused(f"A token lives 1 to {MAX_DAYS} days.", "days")
    text = PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    row = ApiToken(
        owner_id=owner.id,
        name=name,
        scope=scope,
        token_sha256=digest(text),
        prefix=text[:10],
        created_at=now,
        expires_at=now + timedelta(days=days),
    )
    db = get_db()
    db.add(row)
    db.commit()
    audit.record("token.create", row, name=name, scope=scope, days=days)
    return NewToken(row, text)


def revoke(token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        db = get_db()
        db.add(token)
        db.commit()
        audit.record("token.revoke", token, name=token.name)


def holder_of(text: str) -> tuple[ApiToken, User] | None:
    """The live token `text` is, and its owner; None for anything else (unknown, expired,
    revoked). Marks it used."""
    if not TOKEN_RE.match(text or ""):
        return None
    with (
        writing_session() as db
    ):  # marking it used is a write, and most calls are GETs, whose session reads only
        token = db.exec(select(ApiToken).where(ApiToken.token_sha256 == digest(text))).first()
        now = utcnow()
        if token is None or token.revoked_at is not None or token.expires_at <= now:
            return None
        token.last_used_at = now
        user = db.get(User, token.owner_id)
    return token, user
