"""What users do with warehouses, as steps against Lakekeeper and Lakeport's database.

Every change goes to Lakekeeper first and to Lakeport's row second, so that a refusal
from Lakekeeper leaves nothing behind; when the row cannot be saved after Lakekeeper
accepted, the Lakekeeper side is undone (compensating delete).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from flask import current_app
from sqlmodel import select

from app.audit import service as audit
from app.db import get_db
from app.errors import UserFacingError
from app.extensions import lakekeeper
from app.lakekeeper.errors import LakekeeperError
from app.lakekeeper.resources import S3AccessKeyCredential, S3StorageProfile
from app.lakekeeper.tokens import lakekeeper_user_id
from app.models import Execution, ExecutionState, User, Warehouse, WarehouseStatus, utcnow
from app.network_policy import OutboundRefused, portal_policy
from app.signals import close_warehouse
from app.storage_probe import ProbeReport, S3Credentials, S3Location, probe_storage
from app.warehouses import sharing
from app.warehouses.diagnosis import field_errors
from app.warehouses.forms import StorageForm
from app.warehouses.probe_limits import probe_slot


class WarehouseActionError(UserFacingError):
    """An action was refused; `message` is for the user."""


def lakekeeper_name(owner: User, name: str) -> str:
    # Lakekeeper's warehouse names are global to the project; the owner id keeps users apart.
    return f"u{owner.id}-{name}"


def default_key_prefix(owner: User, name: str) -> str:
    return f"lakeport/{lakekeeper_name(owner, name)}"


def location_of(storage: StorageForm | Warehouse) -> S3Location:
    return S3Location(
        bucket=storage.bucket,
        region=storage.region,
        key_prefix=storage.key_prefix,
        endpoint=storage.endpoint or None,
        path_style=storage.path_style_access,
    )


def check_endpoint(location: S3Location) -> None:
    """Refuse storage the portal's network policy does not allow, before anything is sent there
    or to Lakekeeper (which would contact it). Only user-named endpoints: AWS's are Amazon's."""
    if location.endpoint is None:
        return
    policy = portal_policy()
    try:
        for url in dict.fromkeys((location.endpoint, location.bucket_url())):
            policy.check_url(url)
    except OutboundRefused as refusal:
        raise WarehouseActionError(refusal.message, field="endpoint") from None


def test_connection(form: StorageForm, owner: User | None = None) -> ProbeReport:
    """Write, read, list and delete a probe object with the given keys, held in memory only; for
    `owner`'s new warehouse, under its default key prefix when the form names none. At most two
    of `owner`'s probes run at once, so many a minute (`probe_limits.ProbesLimited`)."""
    if owner is not None and not form.key_prefix:
        form = replace(form, key_prefix=default_key_prefix(owner, form.name or "warehouse"))
    location = location_of(form)
    check_endpoint(location)
    with probe_slot(owner.id if owner is not None else None):
        return probe_storage(
            location,
            S3Credentials(form.access_key_id, form.secret_access_key),
            policy=portal_policy(),
        )


def name_taken(owner: User, name: str, except_id: int | None = None) -> bool:
    statement = select(Warehouse.id).where(Warehouse.owner_id == owner.id, Warehouse.name == name)
    return any(row_id != except_id for row_id in get_db().exec(statement))


def vended_credentials_seconds(sts_enabled: bool) -> int | None:
    """The lifetime of the credentials Lakekeeper vends (LAKEPORT_VENDED_CREDENTIALS_SECONDS), sent
    with STS on; without STS Lakekeeper vends none."""
    return current_app.config["VENDED_CREDENTIALS_SECONDS"] if sts_enabled else None


def register(owner: User, form: StorageForm) -> Warehouse:
    """Create the warehouse in Lakekeeper, then save Lakeport's row (undoing the create if that fails)."""
    if name_taken(owner, form.name):
        raise WarehouseActionError("You already have a warehouse with this name.", field="name")
    check_endpoint(location_of(form))
    key_prefix = form.key_prefix or default_key_prefix(owner, form.name)
    # Units read and write with the keys the catalog vends; Lakekeeper vends them only with STS on
    # and otherwise remote-signs, which units cannot use (lakekeeper/lakekeeper v0.13.3
    # crates/lakekeeper/src/service/storage/s3.rs, generate_table_config). An S3-compatible store
    # (MinIO) needs no role for it; on AWS STS needs a role ARN, which this form does not take.
    profile = S3StorageProfile(
        bucket=form.bucket,
        region=form.region,
        key_prefix=key_prefix,
        endpoint=form.endpoint or None,
        path_style_access=form.path_style_access,
        flavor=form.flavor,
        sts_enabled=form.flavor == "s3-compat",
        sts_token_validity_seconds=vended_credentials_seconds(form.flavor == "s3-compat"),
    )
    credential = S3AccessKeyCredential(form.access_key_id, form.secret_access_key)
    try:
        created = lakekeeper().create_warehouse(
            lakekeeper_name(owner, form.name), profile, credential
        )
    except LakekeeperError as error:
        if error.is_storage_refusal:
            # Lakekeeper's refusal is generic: the probe tells which field is at fault.
            diagnosis = field_errors(test_connection(replace(form, key_prefix=key_prefix)))
            field, message = next(iter(diagnosis.items()), ("form", error.user_message))
            raise WarehouseActionError(message, field=None if field == "form" else field) from error
        raise WarehouseActionError(error.user_message) from error
    try:
        _give_to_owner(owner, created.id)
    except LakekeeperError as error:
        current_app.logger.warning(
            "granting warehouse %s to user %s failed: %s", created.id, owner.id, error
        )
        _compensate_create(created.id)
        raise WarehouseActionError(error.user_message) from error

    warehouse = Warehouse(
        owner_id=owner.id,
        name=form.name,
        lakekeeper_name=created.name,
        lakekeeper_id=created.id,
        bucket=form.bucket,
        key_prefix=key_prefix,
        endpoint=form.endpoint,
        region=form.region,
        path_style_access=form.path_style_access,
        flavor=form.flavor,
    )
    db = get_db()
    try:
        db.add(warehouse)
        db.commit()
    except Exception:
        db.rollback()
        current_app.logger.exception(
            "saving warehouse %s failed; deleting it in Lakekeeper again", created.id
        )
        _compensate_create(created.id)
        raise WarehouseActionError(
            "Lakeport could not save the warehouse, so it was not created. Please try again."
        )
    current_app.logger.info(
        "user %s registered warehouse %s (%s)", owner.id, warehouse.id, created.id
    )
    audit.record(
        "warehouse.register",
        warehouse,
        name=warehouse.name,
        bucket=warehouse.bucket,
        endpoint=warehouse.endpoint,
        lakekeeper_id=warehouse.lakekeeper_id,
    )
    return warehouse


def _give_to_owner(owner: User, lakekeeper_id: str) -> None:
    """Ownership in Lakekeeper mirrors ownership in Lakeport: the owner's Lakekeeper identity
    (`oidc~<subject>`) becomes the warehouse's only grantee; the service identity that created
    it keeps only what its project-admin role gives. The owner registers in Lakekeeper through a
    token exchanged for them (self-provisioning needs no right the portal lacks)."""
    client = lakekeeper()
    provisioned = client.provision_user(
        client.user_token(owner.subject, lakekeeper_id).access_token
    )
    expected = lakekeeper_user_id(owner.subject)
    if provisioned.id != expected:
        raise LakekeeperError(
            None,
            "UnexpectedUserId",
            f"Lakekeeper names the user {provisioned.id!r}, not {expected!r}: its subject claim must be `sub`",
            "provision_user",
        )
    client.grant_sole_ownership(lakekeeper_id, expected)


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
    _call(lambda: lakekeeper().rename_warehouse(warehouse.lakekeeper_id, new_lakekeeper_name))
    before = warehouse.name
    warehouse.name, warehouse.lakekeeper_name = new_name, new_lakekeeper_name
    _save(warehouse)
    audit.record("warehouse.rename", warehouse, before=before, after=new_name)


def rotate_credentials(
    warehouse: Warehouse, access_key_id: str, secret_access_key: str
) -> ProbeReport:
    """Send the new keys straight to Lakekeeper (which validates them), then re-test the connection."""
    location = location_of(warehouse)
    # The endpoint was allowed at registration; its name may resolve elsewhere now.
    check_endpoint(location)
    credential = S3AccessKeyCredential(access_key_id, secret_access_key)
    _call(lambda: lakekeeper().update_storage_credential(warehouse.lakekeeper_id, credential))
    _save(warehouse)
    audit.record("warehouse.rotate_keys", warehouse)
    return probe_storage(
        location, S3Credentials(access_key_id, secret_access_key), policy=portal_policy()
    )


def deactivate(warehouse: Warehouse) -> int:
    """Lakekeeper refuses all access to a deactivated warehouse: executions writing into it are
    stopped (returns how many)."""
    _require(warehouse, WarehouseStatus.ACTIVE, "Only an active warehouse can be deactivated.")
    warehouse.status = WarehouseStatus.INACTIVE
    return _close(warehouse, CLOSING_DEACTIVATE, WarehouseStatus.ACTIVE, "was deactivated")


def activate(warehouse: Warehouse) -> None:
    _require(warehouse, WarehouseStatus.INACTIVE, "Only a deactivated warehouse can be activated.")
    _call(lambda: lakekeeper().activate_warehouse(warehouse.lakekeeper_id))
    warehouse.status = WarehouseStatus.ACTIVE
    owe_nothing(warehouse)  # a deactivation still owed is called off
    _save(warehouse)
    audit.record(
        "warehouse.activate", warehouse, before=WarehouseStatus.INACTIVE, after=warehouse.status
    )


def archive(warehouse: Warehouse) -> int:
    """Step one of deleting: no new executions, and those writing into it now are stopped
    (returns how many); what was written stays readable (Lakeport-side only)."""
    if warehouse.status == WarehouseStatus.ARCHIVED:
        return 0
    previous = warehouse.status
    if previous == WarehouseStatus.INACTIVE:
        # Reads need an active warehouse in Lakekeeper; archived data stays readable.
        _call(lambda: lakekeeper().activate_warehouse(warehouse.lakekeeper_id))
        owe_nothing(warehouse)
    warehouse.status, warehouse.archived_at = WarehouseStatus.ARCHIVED, utcnow()
    return _close(warehouse, CLOSING_ARCHIVE, previous, "was archived")


CLOSING_DEACTIVATE, CLOSING_ARCHIVE = "deactivate", "archive"
# How long the catalog's part of a closing waits for the runs still writing into the warehouse.
CLOSING_WAIT_SECONDS = 30.0


def _close(warehouse: Warehouse, step: str, previous: str, why: str) -> int:
    """Deactivate or archive (the row's new status set): the row first (no new executions), then
    the runs writing into it stop (returns how many), then the catalog's part, since their clean-up
    (dropping partial results) still needs the access it takes away. That part is done now if
    nothing still writes into the warehouse (a refusal then undoes the step, and says why), else
    owed to the worker once the runs have ended (app/warehouses/work.py): a request never
    waits on a unit."""
    _save(warehouse)
    audit.record(f"warehouse.{step}", warehouse, before=previous, after=warehouse.status)
    stopped = close_warehouse(warehouse, why)
    if running_into(warehouse):
        _owe(warehouse, step, CLOSING_WAIT_SECONDS)
        return stopped
    try:
        catalog_step(warehouse, step)
    except WarehouseActionError:
        warehouse.status = previous
        if step == CLOSING_ARCHIVE:
            warehouse.archived_at = None
        _save(warehouse)
        raise
    return stopped


def running_into(warehouse: Warehouse) -> bool:
    """Whether a run of an execution still writes into the warehouse on its unit."""
    return (
        get_db()
        .exec(
            select(Execution.id).where(
                Execution.warehouse_id == warehouse.id, Execution.state == ExecutionState.RUNNING
            )
        )
        .first()
        is not None
    )


def catalog_step(warehouse: Warehouse, step: str) -> bool:
    """Take the warehouse's access away in Lakekeeper: all of it (deactivate), or all but reading
    (archive); or delete a purged warehouse, and its row (purge). False when the catalog is not
    ready for it yet (a purge's tasks still run). Raises WarehouseActionError."""
    if step == CLOSING_PURGE:
        return _delete_purged(warehouse)
    if step == CLOSING_DEACTIVATE:
        _call(lambda: lakekeeper().deactivate_warehouse(warehouse.lakekeeper_id))
        return True
    # The owner and the sharees keep reading (describe, select) but may no longer write, grant or
    # delete: a token minted before the archive cannot add to a warehouse on its way out.
    _call(
        lambda: lakekeeper().set_warehouse_assignments(
            warehouse.lakekeeper_id, sharing.catalog_assignments(warehouse)
        )
    )
    return True


def _owe(warehouse: Warehouse, step: str, seconds: float) -> None:
    """Leave the catalog's part of `step` to the worker, due in `seconds` at the latest."""
    warehouse.closing, warehouse.closing_error = step, ""
    warehouse.closing_due_at = utcnow() + timedelta(seconds=seconds)
    _save(warehouse)


def owe_nothing(warehouse: Warehouse) -> None:
    warehouse.closing, warehouse.closing_error, warehouse.closing_due_at = "", "", None


@dataclass
class PurgeOutcome:
    tables_dropped: int
    namespaces_dropped: int
    # Lakekeeper still purges the tables' files: the worker removes the warehouse once it has.
    pending: bool = False


CLOSING_PURGE = "purge"
# How often the worker asks Lakekeeper again whether a purged warehouse can go.
PURGE_RETRY_SECONDS = 1.0


def purge(warehouse: Warehouse, typed_name: str) -> PurgeOutcome:
    """Step two: drop every table (purging its files), then the namespaces, then the warehouse,
    then Lakeport's row. While Lakekeeper still drains its purge tasks the warehouse cannot be
    deleted yet: that last part is then owed to the worker (app/warehouses/work.py), which
    tries again until it is done; a request never waits for it. A 404 counts as done."""
    _require(warehouse, WarehouseStatus.ARCHIVED, "Archive the warehouse before purging it.")
    if typed_name.strip() != warehouse.name:
        raise WarehouseActionError(
            "Type the warehouse's name exactly to confirm the purge.", field="confirm_name"
        )
    close_warehouse(warehouse, "was purged")  # none, unless one slipped past the archive
    # The grants' turn, kept to the end: the worker's check of the grants must not give back what
    # the purge takes (SQLite: no turn, its writes would wait for the purge's end).
    sharing.lock_grants(warehouse.id, writers_turn=False)
    client = lakekeeper()
    contents = _call(
        lambda: client.purge_warehouse_contents(warehouse.lakekeeper_name), missing_ok=True
    )
    # Lakekeeper drops a deleted warehouse's grants only on a best-effort basis: revoke them first.
    _call(lambda: client.set_warehouse_assignments(warehouse.lakekeeper_id, []), missing_ok=True)
    outcome = PurgeOutcome(
        contents.tables_dropped if contents else 0, contents.namespaces_dropped if contents else 0
    )
    audit.record(
        "warehouse.purge", warehouse, name=warehouse.name, tables_dropped=outcome.tables_dropped
    )
    if not _delete_purged(warehouse):
        _owe(warehouse, CLOSING_PURGE, PURGE_RETRY_SECONDS)
        outcome.pending = True
    return outcome


def _delete_purged(warehouse: Warehouse) -> bool:
    """Delete the purged warehouse in Lakekeeper, then Lakeport's row; False while Lakekeeper
    still has purge tasks to finish. Raises WarehouseActionError."""
    try:
        lakekeeper().delete_warehouse(warehouse.lakekeeper_id)
    except LakekeeperError as error:
        if error.type == "WarehouseHasUnfinishedTasks":
            return False
        if error.status != 404:
            raise WarehouseActionError(error.user_message) from error
    db = get_db()
    # History stays; what the executions wrote is gone.
    for execution in db.exec(select(Execution).where(Execution.warehouse_id == warehouse.id)):
        execution.outputs_purged, execution.warehouse_id = True, None
        db.add(execution)
    db.delete(warehouse)
    db.commit()
    current_app.logger.info("purged warehouse %s (%s)", warehouse.id, warehouse.lakekeeper_id)
    return True


def _require(warehouse: Warehouse, status: str, message: str) -> None:
    if warehouse.status != status:
        raise WarehouseActionError(message)


def _call(action, *, missing_ok: bool = False):
    """`action()`'s result, a refusal of Lakekeeper's raised for the user (None for a 404 with
    `missing_ok`: gone already)."""
    try:
        return action()
    except LakekeeperError as error:
        if missing_ok and error.status == 404:
            return None
        raise WarehouseActionError(error.user_message) from error


def _save(warehouse: Warehouse) -> None:
    warehouse.updated_at = utcnow()
    db = get_db()
    db.add(warehouse)
    db.commit()
