"""The worker's side of warehouses: the catalog's part of closing one, and the catalog's grants
kept in line with the portal's shares.

## Closing
Deactivating or archiving a warehouse that runs were writing into: the request stopped the runs
(app/executions/stopping.py) and left the catalog's part owed on the warehouse's row
(`closing`): taking write access away must wait until the cancelled runs have dropped their
partial outputs, and a request never waits on a unit. Purging: Lakekeeper deletes a warehouse
only once its purge tasks have drained; the worker asks again every second until then. The
worker does it once no run writes into the warehouse any more, or at `closing_due_at` at the
latest. A catalog that refuses or does not answer is tried again CLOSING_RETRY_SECONDS later, and the
warehouse's page says why meanwhile; its status (no new executions) holds throughout.

## Grants
The catalog's grants converge with the portal's shares: the worker compares each warehouse's
assignments in Lakekeeper with what its owner and its shares imply (`sharing.catalog_assignments`)
and the assignees of each shared group's role with the group's members, repairs what differs,
records each repair in the audit trail, and deletes the roles of groups nothing is shared with any
more. The warehouse's row keeps when the catalog was last checked and last agreed, and what the
check repaired (its page shows it to the owner).

When: every GRANTS_RECONCILE_SECONDS (`reconcile_grants`, one worker at a time, under its
lease), and soon after a catalog write that failed (`grants_due_at`, `pending_grant_checks`),
whose effect is unknown.

Each warehouse is compared in its turn (`sharing.lock_grants`), as share changes are made: a
change under way is not compared half-made, and one that comes after waits for the repair. A
warehouse whose closing still owes the catalog's part (above), or an archived or deactivated one
that runs still write into, is left to the closing, which sets its grants.

What Lakekeeper does that this relies on (lakekeeper/lakekeeper v0.13.3):
- reading a warehouse's assignments checks the caller's right to read them, not the warehouse's
  status (crates/authz-openfga/src/api.rs `get_warehouse_assignments_by_id`, `get_relations`:
  every relation, every page), so inactive warehouses are compared too;
- the portal's service identity may delete the roles it made: Lakekeeper gives a role's creator
  its ownership (crates/authz-openfga/src/authorizer.rs `create_role`, with
  crates/authz-openfga/src/tuples.rs `ownership_tuples_for_role`);
- deleting a role removes it with its assignees and every grant it held
  (crates/lakekeeper/src/api/management/v1/role.rs `authorized_delete_role`: the role's rows go
  `ON DELETE CASCADE`; crates/authz-openfga/src/authorizer.rs `delete_role` ->
  `delete_all_relations`: the tuples on the role and those naming it).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from sqlalchemy import delete, exists, update
from sqlmodel import Session, select

from app import leases, work_registry
from app.audit import service as audit
from app.db import engine, get_db
from app.extensions import lakekeeper
from app.lakekeeper.errors import LakekeeperError
from app.lakekeeper.resources import WarehouseAssignment
from app.lakekeeper.tokens import lakekeeper_user_id
from app.models import GroupRole, User, Warehouse, WarehouseShare, WarehouseStatus, utcnow
from app.untrusted import fit_column
from app.warehouses import service, sharing

logger = logging.getLogger(__name__)

# A catalog that refused or did not answer a closing's part is asked again after this long.
CLOSING_RETRY_SECONDS = 30.0
GRANTS_LEASE = "catalog-grants"
# A check the catalog failed is tried again after this long (and at the next periodic pass).
GRANTS_RETRY_SECONDS = 60.0
# A due check that found the warehouse in another change's turn (a long purge holds it) is looked
# at again after this long, not at every pass of the worker; in this process's memory only.
GRANTS_BUSY_SECONDS = 5.0
_busy_until: dict[int, float] = {}


def _fitted(column: str, text: str, warehouse_id: int) -> str:
    """A closing's or a grants check's error or repair, fitted to its column (app/untrusted.py
    `fit_column`, the one bound of such text)."""
    return fit_column(text, Warehouse.__table__.c[column], f"warehouse {warehouse_id}'s {column}")


# --- Closing ------------------------------------------------------------------------------------


def pending_closings() -> list[tuple[str, object, int]]:
    """The warehouses whose closing still owes the catalog's part."""
    with Session(engine()) as db:
        ids = db.exec(select(Warehouse.id).where(Warehouse.closing != "")).all()
    return [
        (f"warehouse-closing:{warehouse_id}", finish_closing, warehouse_id) for warehouse_id in ids
    ]


def finish_closing(warehouse_id: int) -> None:
    """Do the catalog's part owed on the warehouse if it is due: its runs have stopped, or the
    wait is over (a run that will not stop does not keep its warehouse open)."""
    db = get_db()
    warehouse = db.get(Warehouse, warehouse_id)
    if warehouse is None or not warehouse.closing:
        return
    step = warehouse.closing
    due = warehouse.closing_due_at is None or utcnow() >= warehouse.closing_due_at
    # An archive or deactivation goes ahead as soon as its runs have stopped; a retry waits.
    runs_stopped = (
        step != service.CLOSING_PURGE
        and not warehouse.closing_error
        and not service.running_into(warehouse)
    )
    if not (due or runs_stopped):
        return  # looked at again at the worker's next pass
    try:
        done = service.catalog_step(warehouse, step)
    except service.WarehouseActionError as error:
        logger.warning(
            "warehouse %s: the catalog's part of %s failed: %s", warehouse_id, step, error.message
        )
        warehouse.closing_error = _fitted("closing_error", error.message, warehouse_id)
        warehouse.closing_due_at = utcnow() + timedelta(seconds=CLOSING_RETRY_SECONDS)
        warehouse.updated_at = utcnow()
    else:
        if not done:  # a purge whose tasks still run
            warehouse.closing_due_at = utcnow() + timedelta(seconds=service.PURGE_RETRY_SECONDS)
        elif step == service.CLOSING_PURGE:
            return  # the row is gone with the warehouse
        else:
            logger.info("warehouse %s: the catalog's part of %s is done", warehouse_id, step)
            service.owe_nothing(warehouse)
            warehouse.updated_at = utcnow()
    db.add(warehouse)
    db.commit()


# --- Grants -------------------------------------------------------------------------------------


def pending_grant_checks() -> list[tuple[str, object, int]]:
    """The warehouses whose grants were asked to be checked soon (a catalog write failed)."""
    with Session(engine()) as db:
        ids = db.exec(select(Warehouse.id).where(Warehouse.grants_due_at <= utcnow())).all()
    now = time.monotonic()
    return [
        (f"warehouse-grants:{warehouse_id}", check_grants, warehouse_id)
        for warehouse_id in ids
        if _busy_until.get(warehouse_id, 0.0) <= now
    ]


def reconcile_grants() -> None:
    """The periodic pass: every warehouse's grants and its groups' roles, then the unused roles."""
    with Session(engine()) as db:
        ids = db.exec(select(Warehouse.id).order_by(Warehouse.id)).all()
    roles_checked: set[str] = set()  # a role shared with several warehouses is compared once a pass
    for warehouse_id in ids:
        if not leases.still_held():
            return  # the worker stops, or another took the pass over: it goes on from here
        check_grants(warehouse_id, roles_checked)
    delete_unused_roles()


def check_grants(warehouse_id: int, roles_checked: set[str] | None = None) -> None:
    """Compare the warehouse's grants (and its groups' roles' assignees) with what its shares
    imply, repair the difference, and record the outcome on its row and in the audit trail."""
    db = get_db()
    try:
        # The groups' roles first, outside the warehouse's turn: one the catalog lost is made again.
        members = _repair_members(warehouse_id, set() if roles_checked is None else roles_checked)
        warehouse = sharing.lock_grants(warehouse_id, skip_locked=True)
        if warehouse is None or _left_to_closing(warehouse):
            db.rollback()  # gone, in a change's turn (the next pass), or the closing sets its grants
            _busy_until[warehouse_id] = time.monotonic() + GRANTS_BUSY_SECONDS
            return
        added, removed = _repair_assignments(warehouse)
    except (LakekeeperError, sharing.ShareRefused) as error:
        db.rollback()
        message = getattr(error, "user_message", None) or str(error)
        logger.warning("warehouse %s: its grants could not be checked: %s", warehouse_id, message)
        db.execute(
            update(Warehouse)
            .where(Warehouse.id == warehouse_id)
            .values(
                grants_checked_at=utcnow(),
                grants_error=_fitted("grants_error", message, warehouse_id),
                grants_due_at=utcnow() + timedelta(seconds=GRANTS_RETRY_SECONDS),
            )
        )
        db.commit()
        return
    names = _holder_names()
    repair = "; ".join(
        [
            *(f"restored {_label(a, names)}" for a in added),
            *(f"removed {_label(a, names)}" for a in removed),
            *(_member_text(*repair) for repair in members),
        ]
    )
    now = utcnow()
    warehouse.grants_checked_at = warehouse.grants_agreed_at = now
    warehouse.grants_repair, warehouse.grants_error, warehouse.grants_due_at = (
        _fitted("grants_repair", repair, warehouse_id),
        "",
        None,
    )
    db.add(warehouse)
    db.commit()
    for change, assignments in (("added", added), ("removed", removed)):
        for assignment in assignments:
            audit.record(
                "warehouse.grant_repair",
                warehouse,
                change=change,
                relation=assignment.relation,
                holder=_label_holder(assignment, names),
            )
    for group, change, who in members:
        audit.record(
            "warehouse.role_member_repair", warehouse, change=change, group=group, user=who
        )


def _left_to_closing(warehouse: Warehouse) -> bool:
    """Whether the warehouse's closing still owes the catalog's part (it sets the grants then), or
    is about to: an archive or deactivation whose runs still write into it."""
    return bool(warehouse.closing) or (
        warehouse.status != WarehouseStatus.ACTIVE and service.running_into(warehouse)
    )


def _repair_assignments(
    warehouse: Warehouse,
) -> tuple[list[WarehouseAssignment], list[WarehouseAssignment]]:
    """Make the warehouse's assignments in the catalog those its shares imply; what was added and
    removed. Raises LakekeeperError or ShareRefused (a group's role could not be made)."""
    wanted = set(sharing.catalog_assignments(warehouse))
    found = set(lakekeeper().warehouse_assignments(warehouse.lakekeeper_id))
    added, removed = sorted(wanted - found, key=_order), sorted(found - wanted, key=_order)
    if added or removed:
        lakekeeper().update_warehouse_assignments(warehouse.lakekeeper_id, added, removed)
    return added, removed


def _repair_members(warehouse_id: int, roles_checked: set[str]) -> list[tuple[str, str, str]]:
    """Make the assignees of the roles of the groups the warehouse is shared with the groups'
    members (as of their last sign-in); (group, "added" or "removed", user) for each repair. A role
    the catalog no longer has is forgotten and made again, with its members."""
    db = get_db()
    groups = set(
        db.exec(
            select(WarehouseShare.group_name).where(
                WarehouseShare.warehouse_id == warehouse_id, WarehouseShare.group_name.is_not(None)
            )
        ).all()
    )
    repairs = []
    for role in db.exec(select(GroupRole).where(GroupRole.group_name.in_(groups))).all():
        if role.lakekeeper_role_id in roles_checked:
            continue
        try:
            found = lakekeeper().role_members(role.lakekeeper_role_id)
        except LakekeeperError as error:
            if error.status != 404:
                raise
            with Session(engine()) as own:
                own.execute(delete(GroupRole).where(GroupRole.id == role.id))
                own.commit()
            sharing.ensure_group_role(role.group_name)
            repairs.append((role.group_name, ROLE_MADE_AGAIN, ""))
            continue
        wanted = {
            lakekeeper_user_id(user.subject)
            for user in db.exec(select(User))
            if role.group_name in user.group_names
        }
        if wanted != found:
            lakekeeper().update_role_members(
                role.lakekeeper_role_id, add=wanted - found, remove=found - wanted
            )
            repairs += [(role.group_name, "added", who) for who in sorted(wanted - found)]
            repairs += [(role.group_name, "removed", who) for who in sorted(found - wanted)]
        roles_checked.add(role.lakekeeper_role_id)
    for group in groups - {role.group_name for role in db.exec(select(GroupRole))}:
        sharing.ensure_group_role(
            group
        )  # a share whose role is missing (made again in the catalog)
    db.rollback()  # nothing of this transaction's reads is kept into the warehouse's turn
    return repairs


def delete_unused_roles() -> int:
    """Delete the roles of groups no warehouse is shared with any more (their assignees go with
    them in the catalog); how many. A share being made of the group holds the role's row, and one
    made after the deletion makes a new role."""
    with Session(engine()) as db:
        unused = db.exec(
            select(GroupRole.id).where(
                ~exists().where(WarehouseShare.group_name == GroupRole.group_name)
            )
        ).all()
    return sum(_delete_if_unused(role_id) for role_id in unused)


def _delete_if_unused(role_id: int) -> bool:
    db = get_db()
    if (
        db.get_bind().dialect.name == "sqlite"
    ):  # no row locks: a first write takes the writers' turn
        db.execute(update(GroupRole).where(GroupRole.id == role_id).values(id=GroupRole.id))
    role = db.exec(
        select(GroupRole)
        .where(GroupRole.id == role_id)
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    ).first()
    if (
        role is None
        or db.exec(
            select(WarehouseShare.id).where(WarehouseShare.group_name == role.group_name)
        ).first()
    ):
        db.rollback()  # gone, being shared right now, or shared again since
        return False
    try:
        lakekeeper().delete_role(role.lakekeeper_role_id)
    except LakekeeperError as error:
        if error.status != 404:  # 404: the catalog has no such role any more; the row goes too
            db.rollback()
            logger.warning("the role of group %s could not be deleted: %s", role.group_name, error)
            return False
    db.delete(role)
    db.commit()
    audit.record(
        "group_role.delete",
        role,
        owner_id=None,
        group=role.group_name,
        lakekeeper_role_id=role.lakekeeper_role_id,
        why="no warehouse is shared with the group",
    )
    return True


ROLE_MADE_AGAIN = "role made again"


def _member_text(group: str, change: str, who: str) -> str:
    if change == ROLE_MADE_AGAIN:
        return f"made the role of group {group} again (the catalog had lost it)"
    return f"{change} {who} {'to' if change == 'added' else 'from'} the members of group {group}"


def _holder_names() -> dict[str, str]:
    """Lakekeeper's names of users and roles, as the owner knows them: a user's email, a group."""
    db = get_db()
    names = {
        lakekeeper_user_id(user.subject): user.email or user.display_name
        for user in db.exec(select(User))
    }
    names.update(
        {role.lakekeeper_role_id: f"group {role.group_name}" for role in db.exec(select(GroupRole))}
    )
    return names


def _label_holder(assignment: WarehouseAssignment, names: dict[str, str]) -> str:
    holder = assignment.user or assignment.role
    return names.get(holder) or (f"user {holder}" if assignment.user else f"role {holder}")


def _label(assignment: WarehouseAssignment, names: dict[str, str]) -> str:
    return f"{assignment.relation} for {_label_holder(assignment, names)}"


def _order(assignment: WarehouseAssignment) -> tuple[str, str, str]:
    return assignment.user or "", assignment.role or "", assignment.relation


work_registry.pending_source("warehouse-closing", work_registry.CATALOG + 1, pending_closings)
work_registry.pending_source("grants", work_registry.CATALOG + 2, pending_grant_checks)
work_registry.periodic_pass(
    GRANTS_LEASE, "GRANTS_RECONCILE_SECONDS", reconcile_grants, work_registry.FirstPass.SOON
)
