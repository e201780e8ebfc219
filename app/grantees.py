"""Whom a warehouse or a workflow is shared with: one user, by the email they sign in with, or
one group of the identity provider; and who may do what with a shared thing (`Shares`). Used by
both kinds of share (app/warehouses/sharing.py, app/workflows/sharing.py), whose rows carry
`user_id` or `group_name`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from flask import abort
from flask_login import current_user
from sqlalchemy import false, or_
from sqlmodel import select

from app.db import get_db
from app.errors import UserFacingError
from app.models import User
from app.roles import groups_of

OWNER = "owner"
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
        return (
            share_model.user_id == self.user.id
            if self.user
            else share_model.group_name == self.group
        )


def parse(values, owner_id: int, refused: type[UserFacingError]) -> Grantee:
    """The grantee a share form names (`kind`: user with `email`, or group with `group`), or
    `refused` with the field at fault."""
    kind = values.get("kind")
    if kind == "user":
        email = (values.get("email") or "").strip().lower()
        user = get_db().exec(select(User).where(User.email == email)).first() if email else None
        if user is None:
            raise refused(
                "No Lakeport user signs in with this email yet: they sign in once first.", "email"
            )
        if user.id == owner_id:
            raise refused("That is you: you own it already.", "email")
        return Grantee(user=user)
    if kind == "group":
        group = (values.get("group") or "").strip()
        if not GROUP_NAME.match(group):
            raise refused(
                "A group's name as your identity provider sends it, e.g. analytics.", "group"
            )
        return Grantee(group=group)
    raise refused("Share with a user or with a group.", "kind")


def shared_to(share_model, user: User):
    """The clause that finds `share_model`'s rows that reach `user`: theirs or their groups'
    (those the provider confirmed within the bound: app/roles.py)."""
    groups = groups_of(user)
    return or_(
        share_model.user_id == user.id, share_model.group_name.in_(groups) if groups else false()
    )


def fields_of(share) -> dict:
    """The grantee of a share row, as `Grantee.fields` names it."""
    return {"user_id": share.user_id} if share.user_id else {"group_name": share.group_name}


class Shares:
    """One kind of share: `share_model`'s rows give users or groups a level (`levels`, lowest
    first) on a `model` row (named by the share's `key` column); its owner has every level."""

    def __init__(self, model, share_model, key: str, levels: tuple[str, ...]) -> None:
        self.model, self.share_model, self.key, self.levels = (
            model,
            share_model,
            getattr(share_model, key),
            levels,
        )
        self.rank = {None: 0, **{level: rank for rank, level in enumerate((*levels, OWNER), 1)}}

    def access_of(self, user: User, thing) -> str | None:
        """What `user` may do with `thing`: "owner", one of the levels, or None."""
        if thing.owner_id == user.id:
            return OWNER
        levels = [
            share.level
            for share in get_db().exec(
                select(self.share_model).where(
                    self.key == thing.id, shared_to(self.share_model, user)
                )
            )
        ]
        return max(levels, key=self.rank.__getitem__, default=None)

    def accessible_or_404(self, thing_id: int, need: str | None = None):
        """The row if the signed-in user may `need` it (by default the lowest level); 404
        otherwise, exactly like a missing one."""
        thing = get_db().get(self.model, thing_id)
        if (
            thing is None
            or self.rank[self.access_of(current_user, thing)] < self.rank[need or self.levels[0]]
        ):
            abort(404)
        return thing

    def shared_with(self, user: User) -> list[tuple]:
        """Other users' rows shared with `user`: (the row, the best level, its owner)."""
        rows = get_db().exec(
            select(self.share_model, self.model, User)
            .join(self.model, self.model.id == self.key)
            .join(User, User.id == self.model.owner_id)
            .where(shared_to(self.share_model, user), self.model.owner_id != user.id)
            .order_by(self.model.name)
        )
        best: dict[int, tuple] = {}
        for share, thing, owner in rows:
            if thing.id not in best or self.rank[share.level] > self.rank[best[thing.id][1]]:
                best[thing.id] = (thing, share.level, owner)
        return list(best.values())

    def shares_of(self, thing) -> list[tuple]:
        """Who else has `thing`: each share with its user (None for a group's)."""
        return list(
            get_db().exec(
                select(self.share_model, User)
                .join(User, User.id == self.share_model.user_id, isouter=True)
                .where(self.key == thing.id)
                .order_by(self.share_model.group_name, self.share_model.id)
            )
        )

    def find(self, thing, grantee: Grantee):
        """`grantee`'s share of `thing`, or None."""
        return (
            get_db()
            .exec(
                select(self.share_model).where(
                    self.key == thing.id, grantee.same_as(self.share_model)
                )
            )
            .first()
        )
