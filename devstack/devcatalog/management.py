"""The subset of Lakekeeper's Management API (`/management/v1`) that the portal uses.

Requests and answers follow Lakekeeper's management-open-api.yaml; so do the error types
(`CreateWarehouseStorageProfileOverlap`, `WarehouseAlreadyExists`, `IoOperationFailed`,
`NoSuchWarehouseException`, `WarehouseNotEmpty`, ...). Projects are implicit: any UUID in
`x-project-id` names one, the nil UUID is the default project. Lakekeeper's 409
`WarehouseHasUnfinishedTasks` never comes up: SeaweedFS purges a dropped table at once, so
there are no background tasks to wait for. Only project admins create warehouses; other callers
see and manage only the warehouses their grants allow, and a warehouse-scoped token (see `auth`)
sees only its warehouses and may not change anything here.
"""

from __future__ import annotations

import dataclasses
import uuid

from flask import Blueprint, current_app, request

from app.network_policy import NetworkPolicy
from app.storage_probe import S3Credentials, S3Location, probe_storage
from devstack.devcatalog.auth import caller, may_reach, token_scope
from devstack.devcatalog.errors import (
    CatalogError,
    bad_request,
    project_forbidden,
    warehouse_forbidden,
    warehouse_not_found,
)
from devstack.devcatalog.seaweed import TableBucketNotEmpty
from devstack.devcatalog.store import Warehouse, name_taken
from devstack.seaweedfs import warehouse_table_bucket

DEFAULT_PROJECT_ID = "00000000-0000-0000-0000-000000000000"
SERVER_ID = "5eed0000-0000-4000-8000-00000000dc01"
# Lakekeeper contacts whatever storage it is given (the portal checks endpoints before it asks);
# the stand-in's SeaweedFS is on loopback. Link-local and metadata addresses stay refused.
STORAGE_POLICY = NetworkPolicy(allow_loopback=True, allow_private=True)
# The Lakekeeper release the deployment pins (deploy/compose.yaml), with SemVer build metadata
# naming the stand-in: the portal's version check (app/lakekeeper/versions.py) reads it as that release.
DEV_CATALOG_VERSION = "0.13.3+lakeport-dev-catalog"
# The S3 profile fields Lakekeeper defines (management-open-api.yaml, S3Profile).
_S3_PROFILE_FIELDS = {
    "type",
    "bucket",
    "region",
    "sts-enabled",
    "key-prefix",
    "endpoint",
    "path-style-access",
    "flavor",
    "sts-endpoint",
    "sts-role-arn",
    "assume-role-arn",
    "aws-kms-key-arn",
    "allow-alternative-protocols",
    "legacy-md5-behavior",
    "push-s3-delete-disabled",
    "remote-signing-enabled",
    "remote-signing-url-style",
    "storage-layout",
    "sts-session-tags",
    "sts-token-validity-seconds",
}

management = Blueprint("management", __name__, url_prefix="/management/v1")


@management.before_request
def scoped_tokens_only_read():
    # A scoped token serves one execution's catalog access; managing warehouses is the portal's.
    if request.method in ("GET", "HEAD") or not token_scope().restricted:
        return
    warehouse_id = (request.view_args or {}).get("warehouse_id")
    if warehouse_id is None:
        raise project_forbidden("A warehouse-scoped token may not create warehouses")
    raise warehouse_forbidden(
        f"A warehouse-scoped token may read warehouse '{warehouse_id}' but not change it"
    )


def _services():
    return current_app.extensions["devcatalog"]


def request_project_id() -> str:
    # As Lakekeeper v0.13.3 reads it (crates/lakekeeper/src/request_metadata.rs, ProjectId::try_new in
    # crates/lakekeeper/src/service/identifier/project.rs): trimmed, empty counts as absent (the
    # default project); any id of letters, digits, '-' and '_', not only UUIDs, taken as written.
    project_id = (request.headers.get("x-project-id") or "").strip() or DEFAULT_PROJECT_ID
    if not all(c.isalnum() or c in "-_" for c in project_id):
        raise bad_request(
            "Project IDs may only contain alphanumeric characters, hyphens and underscores. "
            f"Got: `{project_id}`",
            "MalformedProjectID",
        )
    return project_id


def _json_object() -> dict:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise bad_request("Expected a JSON object as the request body")
    return body


def _warehouse(warehouse_id: uuid.UUID, *, active_only: bool = False) -> Warehouse:
    warehouse = _services().store.get(warehouse_id)
    if warehouse is None or (active_only and warehouse.status != "active"):
        raise warehouse_not_found(warehouse_id)
    return warehouse


def _validated_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise bad_request("Warehouse name cannot be empty", "EmptyWarehouseName")
    if "/" in name:
        raise bad_request("Warehouse name cannot contain '/'", "InvalidWarehouseName")
    return name


def _s3_profile(raw: object) -> dict:
    if not isinstance(raw, dict) or raw.get("type") != "s3":
        raise bad_request(
            "The Lakekeeper-compatible dev catalog supports S3 storage profiles only",
            "UnsupportedStorageProfile",
        )
    for name, kind in (("bucket", str), ("region", str), ("sts-enabled", bool)):
        if not isinstance(raw.get(name), kind) or raw.get(name) == "":
            raise bad_request(f"S3 storage profile needs '{name}'", "InvalidStorageProfile")
    profile = {key: value for key, value in raw.items() if key in _S3_PROFILE_FIELDS}
    key_prefix = (profile.pop("key-prefix", None) or "").strip("/")
    if key_prefix:
        profile["key-prefix"] = key_prefix
    return profile


def _s3_credentials(raw: object) -> S3Credentials:
    if raw is None:
        raise bad_request(
            "Credential is missing, a credential is required for storage `s3`",
            "MissingCredentialError",
        )
    if (
        not isinstance(raw, dict)
        or raw.get("type") != "s3"
        or raw.get("credential-type") != "access-key"
    ):
        raise CatalogError(
            501,
            "UnsupportedCredentialError",
            "Credential not supported: the dev catalog takes S3 access-key credentials only",
        )
    access_key_id, secret = raw.get("access-key-id"), raw.get("secret-access-key")
    if (
        not isinstance(access_key_id, str)
        or not isinstance(secret, str)
        or not access_key_id
        or not secret
    ):
        raise bad_request("An access-key credential needs 'access-key-id' and 'secret-access-key'")
    return S3Credentials(access_key_id, secret)


def _delete_profile(raw: object) -> dict:
    if raw == {"type": "hard"}:
        return raw
    if (
        isinstance(raw, dict)
        and raw.get("type") == "soft"
        and set(raw) == {"type", "expiration-seconds"}
        and isinstance(raw["expiration-seconds"], int)
        and raw["expiration-seconds"] >= 0
    ):
        return raw
    raise bad_request(
        'Delete profile must be {"type": "hard"} or {"type": "soft", "expiration-seconds": N}'
    )


def _validate_storage(location: S3Location, credentials: S3Credentials) -> None:
    """Lakekeeper's storage validation: write, read, list and delete a probe object."""
    report = probe_storage(
        location,
        credentials,
        policy=STORAGE_POLICY,
        timeout=current_app.config["STORAGE_CHECK_TIMEOUT"],
    )
    if not report.ok:
        raise CatalogError(
            400,
            "IoOperationFailed",
            f"IO Operation failed during Validation: {report.summary()}",
            stack=[
                f"{check.name}: {check.outcome.value}: {check.message}" for check in report.checks
            ],
        )


def _overlaps(a: S3Location, b: S3Location) -> bool:
    """Same bucket, and one key prefix is the other or lies inside it (whole path segments)."""
    if a.bucket != b.bucket:
        return False
    if not a.prefix or not b.prefix:
        return True  # a whole bucket holds every prefix in it
    first, second = a.prefix.split("/"), b.prefix.split("/")
    shorter = min(len(first), len(second))
    return first[:shorter] == second[:shorter]


@management.get("/info")
def server_info():
    return {
        "version": DEV_CATALOG_VERSION,
        "lakekeeper-version": DEV_CATALOG_VERSION,
        "description": "Lakekeeper-compatible dev catalog: a development stand-in for Lakekeeper, not Lakekeeper",
        "bootstrapped": True,
        "server-id": SERVER_ID,
        "default-project-id": DEFAULT_PROJECT_ID,
        # Decides like Lakekeeper's OpenFGA authorizer for what Lakeport uses (see `auth`).
        "authz-backend": "openfga",
        "aws-system-identities-enabled": False,
        "azure-system-identities-enabled": False,
        "gcp-system-identities-enabled": False,
        "queues": [],
        "license-status": {"license-type": "Apache-2.0", "valid": True},
    }


@management.post("/warehouse")
def create_warehouse():
    if not caller().project_admin:
        raise project_forbidden(f"{caller().user_id} may not create warehouses: project admins do")
    body = _json_object()
    project_id = request_project_id()
    name = _validated_name(body.get("warehouse-name"))
    profile = _s3_profile(body.get("storage-profile"))
    credentials = _s3_credentials(body.get("storage-credential"))
    delete_profile = _delete_profile(body.get("delete-profile", {"type": "hard"}))
    store, seaweed = _services().store, _services().seaweed

    warehouse_id = uuid.uuid4()
    draft = Warehouse(
        id=warehouse_id,
        project_id=project_id,
        name=name,
        storage_profile=profile,
        delete_profile=delete_profile,
        status="active",
        table_bucket=warehouse_table_bucket(profile["bucket"], warehouse_id),
        table_bucket_arn="",
    )
    # Lakekeeper's order: storage validation, then overlap, then the name (a database constraint).
    _validate_storage(draft.location, credentials)
    for other in store.list(project_id):
        if _overlaps(draft.location, other.location):
            raise bad_request(
                f"Storage profile overlaps with existing warehouse {other.name}",
                "CreateWarehouseStorageProfileOverlap",
            )
    if store.find_by_name(project_id, name):
        raise name_taken(name, project_id)

    arn = seaweed.create_table_bucket(draft.table_bucket)
    try:
        created = store.add(
            dataclasses.replace(draft, table_bucket_arn=arn), credentials, caller().user_id
        )
    except CatalogError:
        seaweed.delete_table_bucket(draft.table_bucket, arn)
        raise
    return created.as_api(), 201


@management.get("/warehouse")
def list_warehouses():
    # Lakekeeper 0.13.3 lists active warehouses only: a `warehouseStatus` filter answers 400 (app.py).
    statuses = ("active",)
    project_id = request.args.get("projectId") or request_project_id()
    store, user_id = _services().store, caller().user_id
    visible = [
        w
        for w in store.list(project_id, statuses)
        if may_reach(w.id, "describe", store.relations(w.id, user_id))
    ]
    return {"warehouses": [w.as_api() for w in visible]}


@management.get("/warehouse/<uuid:warehouse_id>")
def get_warehouse(warehouse_id: uuid.UUID):
    return _warehouse(warehouse_id).as_api()


@management.delete("/warehouse/<uuid:warehouse_id>")
def delete_warehouse(warehouse_id: uuid.UUID):
    warehouse = _warehouse(warehouse_id)
    seaweed = _services().seaweed
    not_empty = CatalogError(
        409, "WarehouseNotEmpty", "Warehouse is not empty. Cannot delete a non-empty warehouse."
    )
    # Checked first so that a refused delete leaves the namespaces alone.
    if seaweed.has_tables(warehouse.table_bucket_arn):
        raise not_empty
    try:
        seaweed.delete_table_bucket(warehouse.table_bucket, warehouse.table_bucket_arn)
    except TableBucketNotEmpty:
        raise not_empty from None
    _services().store.delete(warehouse_id)
    return "", 204


@management.post("/warehouse/<uuid:warehouse_id>/rename")
def rename_warehouse(warehouse_id: uuid.UUID):
    new_name = _validated_name(_json_object().get("new-name"))
    return _services().store.rename(_warehouse(warehouse_id), new_name).as_api()


@management.post("/warehouse/<uuid:warehouse_id>/storage-credential")
def update_storage_credential(warehouse_id: uuid.UUID):
    warehouse = _warehouse(warehouse_id)
    credentials = _s3_credentials(_json_object().get("new-storage-credential"))
    _validate_storage(warehouse.location, credentials)
    return _services().store.set_credentials(warehouse_id, credentials).as_api()


@management.post("/warehouse/<uuid:warehouse_id>/deactivate")
def deactivate_warehouse(warehouse_id: uuid.UUID):
    _services().store.set_status(_warehouse(warehouse_id).id, "inactive")
    return "", 200


@management.post("/warehouse/<uuid:warehouse_id>/activate")
def activate_warehouse(warehouse_id: uuid.UUID):
    _services().store.set_status(_warehouse(warehouse_id).id, "active")
    return "", 200


@management.post("/warehouse/<uuid:warehouse_id>/delete-profile")
def update_delete_profile(warehouse_id: uuid.UUID):
    delete_profile = _delete_profile(_json_object().get("delete-profile"))
    warehouse = _warehouse(warehouse_id, active_only=True)
    return _services().store.set_delete_profile(warehouse.id, delete_profile).as_api()
