"""Users as the identity provider describes them."""
from __future__ import annotations

import json

from sqlmodel import select

from app.roles import groups_from_claims
from app.db import get_db, writing_session
from app.models import User, utcnow


def upsert_user_from_claims(issuer: str, claims: dict) -> User:
    """The user for these ID-token claims: created on first sign-in, name, email and groups
    refreshed on each."""
    with writing_session() as db:  # the sign-in callback is a GET, whose own session reads only
        user = db.exec(select(User).where(User.issuer == issuer, User.subject == claims["sub"])).first()
        if user is None:
            user = User(issuer=issuer, subject=claims["sub"])
        user.name = claims.get("name") or claims.get("preferred_username") or ""
        user.email = claims.get("email") or ""
        user.groups = json.dumps(groups_from_claims(claims))
        user.last_login_at = utcnow()
        db.add(user)
        db.flush()
        db.refresh(user)
    return user


def load_user(user_id: str) -> User | None:
    try:
        return get_db().get(User, int(user_id))
    except ValueError:
        return None
