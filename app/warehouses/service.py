"""What users do with warehouses, as steps against Lakekeeper and Lakeport's database.

Every change goes to Lakekeeper first and to Lakeport's row second, so that a refusal
from Lakekeeper leaves nothing behind; when the row cannot be saved after Lakekeeper
accepted, the Lakekeeper side is undone (compensating delete).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from flask import current_app
from sqlmodel import select

from app.db import get_db
from app.executions import runner
from app.extensions import lakekeeper
from app.lakekeeper import (
    LakekeeperError,
    S3AccessKeyCredential,
    S3StorageProfile,
    TableSummary,
)
from app.models import Execution, User, Warehouse, WarehouseStatus, utcnow
from app.storage_probe import ProbeReport, S3Credentials, S3Location, probe_storage
from app.warehouses.forms import StorageForm


class WarehouseActionError(Exception):
    """An action was refused; `message` is for the user."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message, self.field = message, field


def lakekeeper_name(owner: User, name: str) -> str:
    # Lakekeeper's warehouse names are global to the project; the owner id keeps users apart.
    return f"u{owner.id}-{name}"


def default_key_prefix(owner: User, name: str) -> str:
    return f"lakeport/{lakekeeper_name(owner, name)}"


def location_of(form: StorageForm) -> S3Location:
    return S3Location(
        bucket=form.bucket, region=form.region, key_prefix=form.key_prefix,
        endpoint=form.endpoint or None, path_style=form.path_style_access,
    )


def test_connection(form: StorageForm) -> ProbeReport:
    """Write, read, list and delete a probe object with the given keys, held in memory only."""
    return probe_storage(location_of(form), S3Credentials(form.access_key_id, form.secret_access_key))


def user_warehouses(owner: User) -> list[Warehouse]:
    statement = select(Warehouse).where(Warehouse.owner_id == owner.id).order_by(Warehouse.created_at.desc())
    return list(get_db().exec(statement))


def name_taken(owner: User, name: str, except_id: int | None = None) -> bool:
    statement = select(Warehouse.id).where(Warehouse.owner_id == owner.id, Warehouse.name == name)
    return any(row_id != except_id for row_id in get_db().exec(statement))


def register(owner: User, form: StorageForm) -> Warehouse:
    """Create the warehouse in Lakekeeper, then save Lakeport's row (undoing the create if that fails)."""
    if name_taken(owner, form.name):
        raise WarehouseActionError("You already have a warehouse with this name.", field="name")
    key_prefix = form.key_prefix or default_key_prefix(owner, form.name)
    profile = S3StorageProfile(
        bucket=form.bucket, region=form.region, key_prefix=key_prefix,
        endpoint=form.endpoint or None, path_style_access=form.path_style_access, flavor=form.flavor,
    )
    credential = S3AccessKeyCredential(form.access_key_id, form.secret_access_key)
    try:
        created = lakekeeper().create_warehouse(lakekeeper_name(owner, form.name), profile, credential)
    except LakekeeperError as error:
        raise WarehouseActionError(error.user_message) from error

    warehouse = Warehouse(
        owner_id=owner.id, name=form.name, lakekeeper_name=created.name, lakekeeper_id=created.id,
        bucket=form.bucket, key_prefix=key_prefix, endpoint=form.endpoint, region=form.region,
        path_style_access=form.path_style_access, flavor=form.flavor,
    )
    db = get_db()
    try:
        db.add(warehouse)
        db.commit()
    except Exception:
        db.rollback()
        current_app.logger.exception("saving warehouse %s failed; deleting it in Lakekeeper again", created.id)
        _compensate_create(created.id)
        raise WarehouseActionError("Lakeport could not save the warehouse, so it was not created. Please try again.")
    current_app.logger.info("user %s registered warehouse %s (%s)", owner.id, warehouse.id, created.id)
    return warehouse


def _compensate_create(lakekeeper_id: str) -> None:
    try:
        lakekeeper().delete_warehouse(lakekeeper_id)
    except LakekeeperError:
        current_app.logger.exception("compensating delete of warehouse %s failed", lakekeeper_id)


def rename(warehouse: Warehouse, new_name: str) -> None:
    owner = get_db().get(User, warehouse.owner_id)
    if new_name == warehouse.name:
        return
    if name_taken(owner, new_name, except_id=warehouse.id):
        raise WarehouseActionError("You already have a warehouse with this name.", field="name")
    new_lakekeeper_name = lakekeeper_name(owner, new_name)
    try:
        lakekeeper().rename_warehouse(warehouse.lakekeeper_id, new_lakekeeper_name)
    except LakekeeperError as error:
        raise WarehouseActionError(error.user_message) from error
    warehouse.name, warehouse.lakekeeper_name = new_name, new_lakekeeper_name
    _save(warehouse)


def rotate_credentials(warehouse: Warehouse, access_key_id: str, secret_access_key: str) -> ProbeReport:
    """Send the new keys straight to Lakekeeper (which validates them), then re-test the connection."""
    credential = S3AccessKeyCredential(access_key_id, secret_access_key)
    try:
        lakekeeper().update_storage_credential(warehouse.lakekeeper_id, credential)
    except LakekeeperError as error:
        raise WarehouseActionError(error.user_message) from error
    _save(warehouse)
    location = S3Location(bucket=warehouse.bucket, region=warehouse.region, key_prefix=warehouse.key_prefix,
                          endpoint=warehouse.endpoint or None, path_style=warehouse.path_style_access)
    return probe_storage(location, S3Credentials(access_key_id, secret_access_key))


def deactivate(warehouse: Warehouse) -> int:
    """Lakekeeper refuses all access to a deactivated warehouse: executions writing into it are
    stopped (returns how many)."""
    _require(warehouse, WarehouseStatus.ACTIVE, "Only an active warehouse can be deactivated.")
    _call(lambda: lakekeeper().deactivate_warehouse(warehouse.lakekeeper_id))
    warehouse.status = WarehouseStatus.INACTIVE
    _save(warehouse)
    return runner.stop_in_warehouse(warehouse, "was deactivated")


def activate(warehouse: Warehouse) -> None:
    _require(warehouse, WarehouseStatus.INACTIVE, "Only a deactivated warehouse can be activated.")
    _call(lambda: lakekeeper().activate_warehouse(warehouse.lakekeeper_id))
    warehouse.status = WarehouseStatus.ACTIVE
    _save(warehouse)


def archive(warehouse: Warehouse) -> int:
    """Step one of deleting: no new executions, and those writing into it now are stopped
    (returns how many); what was written stays readable (Lakeport-side only)."""
    if warehouse.status == WarehouseStatus.ARCHIVED:
        return 0
    if warehouse.status == WarehouseStatus.INACTIVE:
        # Reads need an active warehouse in Lakekeeper; archived data stays readable.
        _call(lambda: lakekeeper().activate_warehouse(warehouse.lakekeeper_id))
    warehouse.status = WarehouseStatus.ARCHIVED
    warehouse.archived_at = utcnow()
    _save(warehouse)
    return runner.stop_in_warehouse(warehouse, "was archived")


@dataclass
class PurgeOutcome:
    tables_dropped: int
    namespaces_dropped: int


PURGE_DELETE_ATTEMPTS = 30
PURGE_DELETE_PAUSE_SECONDS = 1.0


def purge(warehouse: Warehouse, typed_name: str) -> PurgeOutcome:
    """Step two: drop every table (purging its files), then the namespaces, then the warehouse,
    then Lakeport's row. Retries while Lakekeeper drains purge tasks; a 404 counts as done."""
    _require(warehouse, WarehouseStatus.ARCHIVED, "Archive the warehouse before purging it.")
    if typed_name.strip() != warehouse.name:
        raise WarehouseActionError("Type the warehouse's name exactly to confirm the purge.", field="confirm_name")
    runner.stop_in_warehouse(warehouse, "was purged")  # none, unless one slipped past the archive
    client = lakekeeper()
    try:
        contents = client.purge_warehouse_contents(warehouse.lakekeeper_name)
    except LakekeeperError as error:
        if error.status != 404:
            raise WarehouseActionError(error.user_message) from error
        contents = None
    for attempt in range(PURGE_DELETE_ATTEMPTS):
        try:
            client.delete_warehouse(warehouse.lakekeeper_id)
            break
        except LakekeeperError as error:
            if error.status == 404:
                break
            if error.type == "WarehouseHasUnfinishedTasks" and attempt + 1 < PURGE_DELETE_ATTEMPTS:
                time.sleep(PURGE_DELETE_PAUSE_SECONDS)
                continue
            raise WarehouseActionError(error.user_message) from error
    db = get_db()
    # History stays; what the executions wrote is gone.
    for execution in db.exec(select(Execution).where(Execution.warehouse_id == warehouse.id)):
        execution.outputs_purged, execution.warehouse_id = True, None
        db.add(execution)
    db.delete(warehouse)
    db.commit()
    current_app.logger.info("purged warehouse %s (%s)", warehouse.id, warehouse.lakekeeper_id)
    return PurgeOutcome(contents.tables_dropped if contents else 0, contents.namespaces_dropped if contents else 0)


@dataclass
class NamespaceListing:
    name: str
    tables: list[TableSummary]


def browse(warehouse: Warehouse) -> list[NamespaceListing]:
    """The warehouse's namespaces (nested ones flattened as a.b) with each table's rows and size."""
    client = lakekeeper()
    try:
        prefix = client.catalog_prefix(warehouse.lakekeeper_name)
        listings = []
        pending = list(client.list_namespaces(prefix))
        while pending:
            namespace = pending.pop(0)
            tables = [client.load_table(prefix, table) for table in client.list_tables(prefix, namespace)]
            listings.append(NamespaceListing(".".join(namespace), tables))
            pending.extend(client.list_namespaces(prefix, namespace))
    except LakekeeperError as error:
        raise WarehouseActionError(error.user_message) from error
    return sorted(listings, key=lambda listing: listing.name)


def _require(warehouse: Warehouse, status: str, message: str) -> None:
    if warehouse.status != status:
        raise WarehouseActionError(message)


def _call(action) -> None:
    try:
        action()
    except LakekeeperError as error:
        raise WarehouseActionError(error.user_message) from error


def _save(warehouse: Warehouse) -> None:
    warehouse.updated_at = utcnow()
    db = get_db()
    db.add(warehouse)
    db.commit()
