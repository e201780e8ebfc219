"""Sharing a warehouse with a user or a group, and what each person may do with it.

The owner shares a warehouse as `read` (browse its tables, read what is in it) or `write` (also
run executions into it), with one user (by the email they sign in with) or one group of the
identity provider. Each change is mirrored into Lakekeeper first, so the catalog enforces it and
not only the portal: the warehouse's assignments are set as a whole (`catalog_assignments`):
`ownership` for the owner, `describe` + `select` for a read share, also `create` + `modify` for
a write share; a group's share is granted to the group's Lakekeeper role, whose assignees are
the group's members as of their last sign-in (`sync_memberships`). The catalog checks grants on
every request, so a revoked share stops a running run's token at its next catalog call.

Changes to one warehouse's shares take turns (`lock_grants`: its row locked until the change
commits), and the grants written are computed inside that turn from the committed shares plus this
change, so two changes at once can never write each other's stale view (a revoke's grants put back).
A catalog write that fails asks the worker to compare and repair soon (`grants_due_at`); the worker
also compares every warehouse periodically (app/warehouses/work.py).

An archived warehouse keeps only reading, for its owner and its sharees alike; a purge takes
every grant away. Credentials, rotation, renaming, closing and sharing stay with the owner.
"""

from __future__ import annotations

import json

from flask import abort, current_app
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app import grantees
from app.audit import service as audit
from app.db import engine, get_db
from app.errors import UserFacingError
from app.extensions import lakekeeper
from app.lakekeeper.errors import LakekeeperError
from app.lakekeeper.resources import WarehouseAssignment
from app.lakekeeper.tokens import lakekeeper_user_id
from app.models import (
    GroupRole,
    User,
    Warehouse,
    WarehouseShare,
    WarehouseStatus,
    Workflow,
    WorkflowShare,
    utcnow,
)
from app.signals import enforce_shares

LEVELS = {
    "read": "Read: browse its tables and read what is in it",
    "write": "Write: also run executions into it",
}
RELATIONS = {"read": ("describe", "select"), "write": ("describe", "select", "create", "modify")}
OWNER, WRITE, READ = grantees.OWNER, "write", "read"
MAX_SHARES = 100
_shares = grantees.Shares(Warehouse, WarehouseShare, "warehouse_id", (READ, WRITE))


def access_of(user: User, warehouse: Warehouse) -> str | None:
    """What `user` may do with `warehouse`: OWNER, WRITE or READ, or None."""
    return _shares.access_of(user, warehouse)


def accessible_or_404(warehouse_id: int, need: str | None = None) -> Warehouse:
    """The warehouse if the signed-in user may `need` it (by default the lowest level); 404
    otherwise, exactly like a missing one."""
    return _shares.accessible_or_404(warehouse_id, need)


def shared_with(user: User) -> list[tuple[Warehouse, str, User]]:
    """Other users' warehouses shared with `user`: (the warehouse, the best level, its owner)."""
    return _shares.shared_with(user)


def shares_of(warehouse: Warehouse) -> list[tuple]:
    """Who else has `warehouse`: each share with its user (None for a group's)."""
    return _shares.shares_of(warehouse)


class ShareRefused(UserFacingError):
    """A share could not be made, changed or revoked; `message` for the owner, `field` the form's."""


def writable_by(user: User) -> list[Warehouse]:
    """Active warehouses `user` may run into: their own and those shared with them to write."""
    own = get_db().exec(
        select(Warehouse).where(
            Warehouse.owner_id == user.id, Warehouse.status == WarehouseStatus.ACTIVE
        )
    )
    shared = [
        warehouse
        for warehouse, level, _ in shared_with(user)
        if level == WRITE and warehouse.status == WarehouseStatus.ACTIVE
    ]
    return sorted(
        [*own, *shared], key=lambda warehouse: (warehouse.owner_id != user.id, warehouse.name)
    )


def catalog_assignments(warehouse: Warehouse) -> list[WarehouseAssignment]:
    """The warehouse's grants in Lakekeeper, as a whole: the owner's and every share's (reading
    only, for everyone, once the warehouse is archived)."""
    db = get_db()
    owner = lakekeeper_user_id(db.get(User, warehouse.owner_id).subject)
    archived = warehouse.status == WarehouseStatus.ARCHIVED
    wanted = (
        [WarehouseAssignment(relation, user=owner) for relation in RELATIONS[READ]]
        if archived
        else [WarehouseAssignment("ownership", user=owner)]
    )
    for share, user in shares_of(warehouse):
        holder = (
            {"user": lakekeeper_user_id(user.subject)}
            if user is not None
            else {"role": _group_role(share.group_name)}
        )
        wanted += [
            WarehouseAssignment(relation, **holder)
            for relation in RELATIONS[READ if archived else share.level]
        ]
    return wanted


def share(warehouse: Warehouse, values) -> WarehouseShare:
    """Share the warehouse with a user (`email`) or a group (`group`) at `level`, or change the
    level of an existing share. The catalog's grants change first; a refusal there changes nothing."""
    level = values.get("level")
    if level not in LEVELS:
        raise ShareRefused("Choose read or write.", "level")
    grantee = grantees.parse(values, warehouse.owner_id, ShareRefused)
    fields = grantee.fields
    db = get_db()
    if "group_name" in fields:
        ensure_group_role(fields["group_name"])
    if lock_grants(warehouse.id) is None:  # re-read in its turn: an archive may have come first
        abort(404)
    if warehouse.status != WarehouseStatus.ACTIVE:
        db.rollback()
        raise ShareRefused("Only an active warehouse can be shared.")
    row = _shares.find(warehouse, grantee)
    before = row.level if row else None
    if row is None:
        if len(shares_of(warehouse)) >= MAX_SHARES:
            db.rollback()
            raise ShareRefused(f"A warehouse has at most {MAX_SHARES} shares.")
        row = WarehouseShare(warehouse_id=warehouse.id, level=level, **fields)
    row.level = level
    db.add(row)
    try:
        db.flush()  # the share counts in the grants below; committed only once Lakekeeper has them
    except IntegrityError:  # the same grantee, shared at the same moment by another request
        db.rollback()
        raise ShareRefused(
            "This warehouse was shared with them at the same moment. Look again."
        ) from None
    _mirror(warehouse)
    db.commit()
    audit.record("warehouse.share", warehouse, grantee=fields, before=before, after=level)
    if before:  # a level changed: runs it no longer allows stop
        enforce_shares(warehouse)
    return row


def revoke(warehouse: Warehouse, share_id: int) -> None:
    db = get_db()
    if lock_grants(warehouse.id) is None:
        abort(404)
    # Read in this turn: a revoke of the same share that came first has deleted it (404).
    row = db.exec(
        select(WarehouseShare)
        .where(WarehouseShare.id == share_id)
        .execution_options(populate_existing=True)
    ).first()
    if row is None or row.warehouse_id != warehouse.id:
        db.rollback()
        abort(404)
    db.delete(row)
    db.flush()
    _mirror(warehouse)
    db.commit()
    audit.record(
        "warehouse.unshare",
        warehouse,
        grantee=grantees.fields_of(row),
        before=row.level,
        after=None,
    )
    enforce_shares(warehouse)  # the sharee's runs into it stop


def lock_grants(
    warehouse_id: int, skip_locked: bool = False, writers_turn: bool = True
) -> Warehouse | None:
    """Take the warehouse's turn at changing its grants, until the request's transaction ends, and
    return its row read afresh (None if it is gone, or with `skip_locked` if another holds the turn).
    PostgreSQL: the row locked FOR UPDATE; the shares read after it are those committed before.
    SQLite has no row locks but lets one writer at a time: a first write takes the turn (unless
    not `writers_turn`: no other transaction could then write until this one ends); nothing may
    then be written in a transaction of its own before this one ends."""
    db = get_db()
    if db.get_bind().dialect.name == "sqlite":
        if writers_turn:
            db.execute(
                update(Warehouse).where(Warehouse.id == warehouse_id).values(id=Warehouse.id)
            )
        statement = select(Warehouse)
    else:
        statement = select(Warehouse).with_for_update(skip_locked=skip_locked)
    return db.exec(
        statement.where(Warehouse.id == warehouse_id).execution_options(populate_existing=True)
    ).first()


def ask_for_grants_check(warehouse_ids) -> None:
    """Ask the worker to compare these warehouses' grants with the catalog's soon (after a catalog
    write that failed, whose effect is unknown); in a transaction of its own."""
    ids = list(warehouse_ids)
    if ids:
        with Session(engine()) as own:
            own.execute(
                update(Warehouse).where(Warehouse.id.in_(ids)).values(grants_due_at=utcnow())
            )
            own.commit()


def _mirror(warehouse: Warehouse) -> None:
    """Set the warehouse's grants in Lakekeeper to what Lakeport holds now (the committed shares
    and this change, flushed, in the warehouse's turn: `lock_grants`); on a refusal roll Lakeport's
    change back, ask the worker to check the grants (a lost answer may hide a change made), and
    raise ShareRefused."""
    try:
        lakekeeper().set_warehouse_assignments(
            warehouse.lakekeeper_id, catalog_assignments(warehouse)
        )
    except LakekeeperError as error:
        get_db().rollback()
        current_app.logger.warning(
            "grants of warehouse %s could not be set: %s", warehouse.id, error
        )
        ask_for_grants_check([warehouse.id])
        raise ShareRefused(error.user_message) from error


def ensure_group_role(group: str) -> None:
    """Make the group's Lakekeeper role on its first share, with the group's members as of their
    last sign-in as its assignees; before the warehouse's turn (`lock_grants`), since its row is
    saved in a transaction of its own (kept even if the share is refused after)."""
    db = get_db()
    if db.exec(select(GroupRole.id).where(GroupRole.group_name == group)).first() is not None:
        return
    try:
        made = lakekeeper().create_role(
            f"lakeport-group-{group}", f"Members of the group {group} (Lakeport)"
        )
    except LakekeeperError as error:
        raise ShareRefused(error.user_message) from error
    try:
        members = {
            lakekeeper_user_id(user.subject)
            for user in db.exec(select(User))
            if group in user.group_names
        }
        lakekeeper().update_role_members(made.id, add=members)
    except LakekeeperError as error:
        _delete_role_quietly(made.id)  # no role is left in the catalog that no row names
        raise ShareRefused(error.user_message) from error
    try:
        with Session(engine()) as own:
            own.add(GroupRole(group_name=group, lakekeeper_role_id=made.id))
            _note_members_synced(own, group)
            own.commit()
    except IntegrityError:  # another share made the group's role at the same moment: theirs is kept
        _delete_role_quietly(made.id)


def _group_role(group: str) -> str:
    """The group's Lakekeeper role id (made by `ensure_group_role`). Its row stays locked until the
    caller's transaction ends, so the worker cannot delete the role as unused
    (app/warehouses/work.py) while a share of it is being made."""
    role = (
        get_db()
        .exec(
            select(GroupRole)
            .where(GroupRole.group_name == group)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        .first()
    )
    if role is None:  # deleted as unused between its making and this turn
        raise ShareRefused("The group's role changed at the same moment. Please try again.")
    return role.lakekeeper_role_id


def _note_members_synced(db: Session, group: str) -> None:
    """The new role's assignees are the group's members: as `sync_memberships` counts them, each
    user's synced groups now say the same of this group."""
    for user in db.exec(select(User)):
        synced = set(json.loads(user.catalog_groups or "[]"))
        if (group in synced) != (group in user.group_names):
            user.catalog_groups = json.dumps(sorted(synced ^ {group}))
            db.add(user)


def _delete_role_quietly(role_id: str) -> None:
    try:
        lakekeeper().delete_role(role_id)
    except LakekeeperError as error:
        current_app.logger.warning("a spare role %s could not be deleted: %s", role_id, error)


def sync_memberships(user: User, groups: list[str] | None = None) -> None:
    """Make `user` an assignee of the roles of the groups they are in now (`groups`, by default
    their groups as the provider last sent them), and of no other: at each sign-in, and whenever
    their groups change. Asks the catalog only about the groups that changed since the last sync
    (`User.catalog_groups`) and have a role: two calls each, none when nothing changed. Best effort:
    a group the catalog fails for stays to be synced at the next call, and the warehouses shared
    with it are checked by the worker soon (it also compares every role's assignees periodically)."""
    now = set(user.group_names if groups is None else groups)
    recorded = get_db().exec(select(User.catalog_groups).where(User.id == user.id)).first()
    before = set(json.loads(recorded or "[]"))
    if now == before:
        return
    synced = set(
        now
    )  # groups without a role need no call: a role made later takes its members then
    member = lakekeeper_user_id(user.subject)
    roles = get_db().exec(select(GroupRole).where(GroupRole.group_name.in_(now ^ before))).all()
    for role in roles:
        wanted = role.group_name in now
        try:
            if (member in lakekeeper().role_members(role.lakekeeper_role_id)) != wanted:
                lakekeeper().update_role_members(
                    role.lakekeeper_role_id,
                    add={member} if wanted else set(),
                    remove=set() if wanted else {member},
                )
        except LakekeeperError as error:
            current_app.logger.warning(
                "role of group %s: membership of user %s not synced: %s",
                role.group_name,
                user.id,
                error,
            )
            synced ^= {role.group_name}  # as before: asked again next time
            ask_for_grants_check(
                get_db()
                .exec(
                    select(WarehouseShare.warehouse_id).where(
                        WarehouseShare.group_name == role.group_name
                    )
                )
                .all()
            )
    user.catalog_groups = json.dumps(sorted(synced))
    with Session(
        engine()
    ) as own:  # the sign-in's callback is a reading request: a write of its own
        own.execute(
            update(User).where(User.id == user.id).values(catalog_groups=user.catalog_groups)
        )
        own.commit()
    _enforce_lost_groups(before - now)


def _enforce_lost_groups(lost: set[str]) -> None:
    """The user left `lost`: what they ran through those groups' shares stops, as after a revoke
    (a run into a warehouse they may no longer write, a queued run of a workflow they may no
    longer run)."""
    if not lost:
        return
    db = get_db()
    warehouses = db.exec(
        select(Warehouse)
        .join(WarehouseShare, WarehouseShare.warehouse_id == Warehouse.id)
        .where(WarehouseShare.group_name.in_(lost))
        .distinct()
    ).all()
    workflows = db.exec(
        select(Workflow)
        .join(WorkflowShare, WorkflowShare.workflow_id == Workflow.id)
        .where(WorkflowShare.group_name.in_(lost))
        .distinct()
    ).all()
    for thing in [*warehouses, *workflows]:
        enforce_shares(thing)
