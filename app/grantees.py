"""Whom a warehouse or a workflow is shared with: one user, by the email they sign in with, or
one group of the identity provider. Used by both kinds of share (app/warehouses/sharing.py,
app/workflows/sharing.py), whose rows carry `user_id` or `group_name`."""
from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import false, or_
from sqlmodel import select

from app.db import get_db
from app.errors import UserFacingError
from app.models import User

GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/ -]{0,254}$")


@dataclass(frozen=True)
class Grantee:
    user: User | None = None
    group: str | None = None

    @property
    def fields(self) -> dict:
        return {"user_id": self.user.id} if self.user else {"group_name": self.group}

    def same_as(self, share_model):
        """The clause that finds this grantee's share among `share_model`'s rows."""
        return share_model.user_id == self.user.id if self.user else share_model.group_name == self.group


def parse(values, owner_id: int, refused: type[UserFacingError]) -> Grantee:
    """The grantee a share form names (`kind`: user with `email`, or group with `group`), or
    `refused` with the field at fault."""
    kind = values.get("kind")
    if kind == "user":
        email = (values.get("email") or "").strip().lower()
        user = get_db().exec(select(User).where(User.email == email)).first() if email else None
        if user is None:
            raise refused("No Lakeport user signs in with this email yet: they sign in once first.", "email")
        if user.id == owner_id:
            raise refused("That is you: you own it already.", "email")
        return Grantee(user=user)
    if kind == "group":
        group = (values.get("group") or "").strip()
        if not GROUP_NAME.match(group):
            raise refused("A group's name as your identity provider sends it, e.g. analytics.", "group")
        return Grantee(group=group)
    raise refused("Share with a user or with a group.", "kind")


def shared_to(share_model, user: User):
    """The clause that finds `share_model`'s rows that reach `user`: theirs or their groups'."""
    groups = user.group_names
    return or_(share_model.user_id == user.id, share_model.group_name.in_(groups) if groups else false())
