"""Users as the identity provider describes them, and how long a browser session of theirs lasts.

A session carries the time of its sign-in (SIGNED_IN_KEY). It ends SESSION_MAX_HOURS after it,
however active, and at once when the provider refused the user after it (a suspension by the
worker's identity pass, app/auth/work.py).
"""

from __future__ import annotations

import json
import time

from flask import current_app, flash, session
from sqlmodel import select

from app.auth import provider_grant
from app.db import get_db, writing_session
from app.models import User, utcnow
from app.roles import aware, groups_from_claims

SIGNED_IN_KEY = "lakeport_signed_in_at"


def upsert_user_from_claims(issuer: str, claims: dict, refresh_token: str | None = None) -> User:
    """The user for these ID-token claims: created on first sign-in, name, email and groups
    refreshed on each, confirmed now; the sign-in's refresh token kept (sealed) for re-validation,
    and a suspension lifted."""
    with writing_session() as db:  # the sign-in callback is a GET, whose own session reads only
        user = db.exec(
            select(User).where(User.issuer == issuer, User.subject == claims["sub"])
        ).first()
        if user is None:
            user = User(issuer=issuer, subject=claims["sub"])
        user.name = claims.get("name") or claims.get("preferred_username") or ""
        user.email = claims.get("email") or ""
        user.groups = json.dumps(groups_from_claims(claims))
        user.last_login_at = user.groups_checked_at = utcnow()
        user.refresh_token_sealed = provider_grant.seal(refresh_token)
        user.suspended_at = None
        db.add(user)
        db.flush()
        db.refresh(user)
    return user


def begin_session(user: User) -> None:
    """Mark the (fresh) session as begun now; flask-login's `login_user` follows."""
    session[SIGNED_IN_KEY] = time.time()


def _session_ended(user: User) -> str | None:
    """Why this request's session of `user` is over, or None while it lasts."""
    began = session.get(SIGNED_IN_KEY)
    if not isinstance(began, (int, float)):
        # A session from before sessions carried their start: its lifetime counts from now.
        session[SIGNED_IN_KEY] = began = time.time()
    if time.time() - began > current_app.config["SESSION_MAX_HOURS"] * 3600:
        return f"Sessions last {current_app.config['SESSION_MAX_HOURS']:g} hours: please sign in again."
    suspended_at = aware(user.suspended_at)
    if suspended_at is not None and suspended_at.timestamp() >= began:
        return "Your sign-in is no longer valid at the identity provider: please sign in again."
    return None


def load_user(user_id: str) -> User | None:
    """The session's user (flask-login's loader), or None once the session has ended."""
    try:
        user = get_db().get(User, int(user_id))
    except ValueError:
        return None
    if user is None:
        return None
    ended = _session_ended(user)
    if ended:
        session.clear()
        flash(ended, "info")
        return None
    return user
