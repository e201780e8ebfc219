"""Who may do more than their own things: operators, by their identity provider's groups; and
which groups count for a user now.

Groups come from the provider: at sign-in, then again from the worker's re-validation every
IDENTITY_CHECK_SECONDS (app/auth/work.py). Groups the provider has not confirmed within
IDENTITY_BOUND_SECONDS count as none, on every path that reads them (pages, API tokens, shares,
operators), so a removal at the provider reaches Lakeport within the bound even when the provider
cannot be asked (docs/identity.md).
"""

from __future__ import annotations

from datetime import timedelta
from functools import wraps

from flask import abort, current_app
from flask_login import current_user

from app.models import User, utcnow

MAX_GROUPS = 200
MAX_GROUP_LENGTH = 255


def groups_from_claims(claims: dict) -> list[str]:
    """The `groups` claim as names: a list of strings (Keycloak's "/path" form without its
    slash), bounded; anything else in it is ignored."""
    raw = claims.get("groups")
    if not isinstance(raw, list):
        return []
    names = [group.strip().lstrip("/") for group in raw if isinstance(group, str)]
    return sorted({name for name in names if 0 < len(name) <= MAX_GROUP_LENGTH})[:MAX_GROUPS]


def aware(moment):
    """A time from the database as UTC (SQLite hands them back without a zone)."""
    return moment if moment is None or moment.tzinfo else moment.replace(tzinfo=utcnow().tzinfo)


def groups_confirmed(user: User, at=None) -> bool:
    """Whether the provider confirmed `user`'s groups within the bound (before `at`, default now)."""
    checked = aware(getattr(user, "groups_checked_at", None))
    bound = timedelta(seconds=current_app.config["IDENTITY_BOUND_SECONDS"])
    return checked is not None and user.suspended_at is None and (at or utcnow()) - checked < bound


def groups_of(user: User | None) -> list[str]:
    """The groups that count for `user` now: the provider's, while confirmed within the bound;
    none otherwise (and none for a suspended user)."""
    if user is None or not getattr(user, "is_authenticated", False) or not groups_confirmed(user):
        return []
    return user.group_names


def suspended(user: User | None) -> bool:
    """The provider refused this user since their last sign-in (app/auth/work.py)."""
    return user is not None and getattr(user, "suspended_at", None) is not None


def is_operator(user: User | None) -> bool:
    group = current_app.config["OPERATORS_GROUP"]
    return bool(group) and group in groups_of(user)


def operator_required(view):
    """A view for operators only; anyone else gets 404, as for a page that is not there."""

    @wraps(view)
    def checked(*args, **kwargs):
        if not is_operator(current_user):
            abort(404)
        return view(*args, **kwargs)

    return checked
