"""What the Tokens page reads: a user's personal access tokens, newest first."""

from __future__ import annotations

from sqlmodel import select

from app.db import get_db
from app.models import ApiToken, User


def user_tokens(owner: User) -> list[ApiToken]:
    return list(
        get_db().exec(
            select(ApiToken)
            .where(ApiToken.owner_id == owner.id)
            .order_by(ApiToken.created_at.desc(), ApiToken.id.desc())
        )
    )
