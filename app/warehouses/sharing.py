"""Sharing a warehouse with a user or a group, and what each person may do with it.

The owner shares a warehouse as `read` (browse its tables, read what is in it) or `write` (also
run executions into it), with one user (by the email they sign in with) or one group of the
identity provider. Each change is mirrored into Lakekeeper first, so the catalog enforces it and
not only the portal: the warehouse's assignments are set as a whole (`catalog_assignments`):
`ownership` for the owner, `describe` + `select` for a read share, also `create` + `modify` for
a write share; a group's share is granted to the group's Lakekeeper role, whose assignees are
the group's members as of their last sign-in (`sync_memberships`). The catalog checks grants on
every request, so a revoked share stops a running run's token at its next catalog call.

An archived warehouse keeps only reading, for its owner and its sharees alike; a purge takes
every grant away. Credentials, rotation, renaming, closing and sharing stay with the owner.
"""
from __future__ import annotations

from flask import abort, current_app
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app import grantees
from app.audit import trail as audit
from app.db import engine, get_db
from app.errors import UserFacingError
from app.extensions import lakekeeper
from app.lakekeeper.errors import LakekeeperError
from app.lakekeeper.resources import WarehouseAssignment
from app.lakekeeper.tokens import lakekeeper_user_id
from app.models import GroupRole, User, Warehouse, WarehouseShare, WarehouseStatus
from app.signals import enforce_shares

LEVELS = {"read": "Read: browse its tables and read what is in it",
          "write": "Write: also run executions into it"}
RELATIONS = {"read": ("describe", "select"), "write": ("describe", "select", "create", "modify")}
OWNER, WRITE, READ = grantees.OWNER, "write", "read"
MAX_SHARES = 100
# What `user` may do with a warehouse (`access_of`: "owner", "write", "read", or None), the
# warehouse if the signed-in user may (`accessible_or_404`), the warehouses shared with a user
# (`shared_with`), who else has one (`shares_of`).
_shares = grantees.Shares(Warehouse, WarehouseShare, "warehouse_id", (READ, WRITE))
access_of, accessible_or_404, shared_with, shares_of = (
    _shares.access_of, _shares.accessible_or_404, _shares.shared_with, _shares.shares_of)


class ShareRefused(UserFacingError):
    """A share could not be made, changed or revoked; `message` for the owner, `field` the form's."""


def writable_by(user: User) -> list[Warehouse]:
    """Active warehouses `user` may run into: their own and those shared with them to write."""
    own = get_db().exec(select(Warehouse).where(Warehouse.owner_id == user.id,
                                                Warehouse.status == WarehouseStatus.ACTIVE))
    shared = [warehouse for warehouse, level, _ in shared_with(user)
              if level == WRITE and warehouse.status == WarehouseStatus.ACTIVE]
    return sorted([*own, *shared], key=lambda warehouse: (warehouse.owner_id != user.id, warehouse.name))


def catalog_assignments(warehouse: Warehouse) -> list[WarehouseAssignment]:
    """The warehouse's grants in Lakekeeper, as a whole: the owner's and every share's (reading
    only, for everyone, once the warehouse is archived)."""
    db = get_db()
    owner = lakekeeper_user_id(db.get(User, warehouse.owner_id).subject)
    archived = warehouse.status == WarehouseStatus.ARCHIVED
    wanted = ([WarehouseAssignment(relation, user=owner) for relation in RELATIONS[READ]] if archived
              else [WarehouseAssignment("ownership", user=owner)])
    for share, user in shares_of(warehouse):
        holder = ({"user": lakekeeper_user_id(user.subject)} if user is not None
                  else {"role": _group_role(share.group_name)})
        wanted += [WarehouseAssignment(relation, **holder) for relation in RELATIONS[READ if archived else share.level]]
    return wanted


def share(warehouse: Warehouse, values) -> WarehouseShare:
    """Share the warehouse with a user (`email`) or a group (`group`) at `level`, or change the
    level of an existing share. The catalog's grants change first; a refusal there changes nothing."""
    level = values.get("level")
    if level not in LEVELS:
        raise ShareRefused("Choose read or write.", "level")
    if warehouse.status != WarehouseStatus.ACTIVE:
        raise ShareRefused("Only an active warehouse can be shared.")
    grantee = grantees.parse(values, warehouse.owner_id, ShareRefused)
    fields = grantee.fields
    db = get_db()
    row = _shares.find(warehouse, grantee)
    before = row.level if row else None
    if row is None:
        if len(shares_of(warehouse)) >= MAX_SHARES:
            raise ShareRefused(f"A warehouse has at most {MAX_SHARES} shares.")
        row = WarehouseShare(warehouse_id=warehouse.id, level=level, **fields)
    row.level = level
    if "group_name" in fields:
        _group_role(fields["group_name"])
    db.add(row)
    try:
        db.flush()  # the share counts in the grants below; committed only once Lakekeeper has them
    except IntegrityError:  # the same grantee, shared at the same moment by another request
        db.rollback()
        raise ShareRefused("This warehouse was shared with them at the same moment. Look again.") from None
    _mirror(warehouse)
    db.commit()
    audit.record("warehouse.share", warehouse, grantee=fields, before=before, after=level)
    if before:  # a level changed: runs it no longer allows stop
        enforce_shares(warehouse)
    return row


def revoke(warehouse: Warehouse, share_id: int) -> None:
    db = get_db()
    row = db.get(WarehouseShare, share_id)
    if row is None or row.warehouse_id != warehouse.id:
        abort(404)
    db.delete(row)
    db.flush()
    _mirror(warehouse)
    db.commit()
    audit.record("warehouse.unshare", warehouse, grantee=grantees.fields_of(row), before=row.level, after=None)
    enforce_shares(warehouse)  # the sharee's runs into it stop


def _mirror(warehouse: Warehouse) -> None:
    """Set the warehouse's grants in Lakekeeper to what Lakeport holds now (flushed, not yet
    committed); on a refusal roll Lakeport's change back and raise ShareRefused."""
    try:
        lakekeeper().set_warehouse_assignments(warehouse.lakekeeper_id, catalog_assignments(warehouse))
    except LakekeeperError as error:
        get_db().rollback()
        current_app.logger.warning("grants of warehouse %s could not be set: %s", warehouse.id, error)
        raise ShareRefused(error.user_message) from error


def _group_role(group: str) -> str:
    """The group's Lakekeeper role id, made on its first share, with the group's members as of
    their last sign-in as its assignees."""
    db = get_db()
    role = db.exec(select(GroupRole).where(GroupRole.group_name == group)).first()
    if role is not None:
        return role.lakekeeper_role_id
    try:
        made = lakekeeper().create_role(f"lakeport-group-{group}", f"Members of the group {group} (Lakeport)")
        members = {lakekeeper_user_id(user.subject) for user in db.exec(select(User))
                   if group in user.group_names}
        lakekeeper().update_role_members(made.id, add=members)
    except LakekeeperError as error:
        raise ShareRefused(error.user_message) from error
    with Session(engine()) as own:  # kept even if the share that made it is refused after
        own.add(GroupRole(group_name=group, lakekeeper_role_id=made.id))
        own.commit()
    return made.id


def sync_memberships(user: User) -> None:
    """Make `user` an assignee of the roles of the groups they are in now, and of no other
    (at each sign-in). Best effort: a catalog that is away leaves the last memberships."""
    member = lakekeeper_user_id(user.subject)
    for role in get_db().exec(select(GroupRole)):
        try:
            inside = member in lakekeeper().role_members(role.lakekeeper_role_id)
            wanted = role.group_name in user.group_names
            if inside != wanted:
                lakekeeper().update_role_members(role.lakekeeper_role_id, add={member} if wanted else set(),
                                                 remove=set() if wanted else {member})
        except LakekeeperError as error:
            current_app.logger.warning("role of group %s: membership of user %s not synced: %s",
                                       role.group_name, user.id, error)
