"""Who may do more than their own things: operators, by their identity provider's groups."""
from __future__ import annotations

from functools import wraps

from flask import abort, current_app
from flask_login import current_user

from app.models import User

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


def is_operator(user: User | None) -> bool:
    group = current_app.config["OPERATORS_GROUP"]
    return bool(group) and user is not None and getattr(user, "is_authenticated", False) \
        and group in user.group_names


def operator_required(view):
    """A view for operators only; anyone else gets 404, as for a page that is not there."""
    @wraps(view)
    def checked(*args, **kwargs):
        if not is_operator(current_user):
            abort(404)
        return view(*args, **kwargs)
    return checked
