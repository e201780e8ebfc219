"""The Iceberg REST catalog (`/catalog/v1`): Lakekeeper's config answer, then a thin proxy.

`GET /catalog/v1/config?warehouse=NAME` answers as Lakekeeper does: `defaults.prefix` is the
warehouse id and `overrides.uri` this catalog. Every call under `/catalog/v1/<warehouse id>/`
goes to SeaweedFS's Iceberg REST catalog under the warehouse's table bucket, unchanged but for
the prefix and the credentials (SeaweedFS accepts only its own tokens). A caller reaches only
the warehouses its grants allow (reads need `select`, `modify` or ownership; writes `create`,
`modify` or ownership), and a warehouse-scoped token (see `auth`) only its warehouses, config
lookups by name included.

Vended credentials: when a client sends `X-Iceberg-Access-Delegation: vended-credentials`,
every LoadTableResult (create, load, register) carries credentials this catalog vends itself
(SeaweedFS STS, see `seaweed.vend_credentials`), in `config` and in `storage-credentials`:
`s3.access-key-id`, `s3.secret-access-key`, `s3.session-token`,
`s3.session-token-expires-at-ms`, `s3.endpoint`, `s3.path-style-access`, `s3.region`,
`client.region`. As Lakekeeper vends them (rules and sources in `vending`): for the caller's
privilege (ReadWriteDelete with `modify` or ownership, and for a table the caller creates;
Read with `select` only; none without either), for the table's location, and for the
warehouse profile's `sts-token-validity-seconds` (15 minutes when it sets none).
`DevCatalogConfig.vended_credentials_scope` "warehouse" widens the location to the warehouse's
whole table bucket (the local stack scopes to the table, as Lakekeeper). Each storage credential
also carries `s3.session-token-expires-at-ms`, `expiration-time` and
`client.refresh-credentials-endpoint`, this table's `GET .../tables/{table}/credentials`
(loadCredentials), which vends the same; the table's `config` repeats the keys but not those
three, as Lakekeeper's (`generate_table_config`, crates/lakekeeper/src/service/storage/s3.rs). Vending
happens whatever the warehouse's `sts-enabled` says: Lakekeeper would remote-sign for a
warehouse without STS, which this stand-in cannot, and vending keeps such clients working as
they would with Lakekeeper.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from contextlib import nullcontext
from urllib.parse import quote

from flask import Blueprint, Response, current_app, request

from devstack.devcatalog.auth import caller, may_reach
from devstack.devcatalog.commits import TableHolds, transaction_tables
from devstack.devcatalog.credential_cache import CacheKey
from devstack.devcatalog.errors import (
    CatalogError,
    bad_request,
    warehouse_not_found,
)
from devstack.devcatalog.management import DEFAULT_PROJECT_ID
from devstack.devcatalog.seaweed import VendedCredentials
from devstack.devcatalog.store import Warehouse
from devstack.devcatalog.vending import (
    SCOPE_TABLE,
    STS_DURATION_RANGE,
    StoragePermissions,
    lifetime_seconds,
    load_permissions,
    split_location,
    stated_expiry,
)

catalog = Blueprint("catalog", __name__, url_prefix="/catalog/v1")

# Lakekeeper's default page size for list calls.
REST_PAGE_SIZE = "100"
_ACCESS_DELEGATION = "X-Iceberg-Access-Delegation"
# Lakekeeper's keys of a storage credential that its LoadTableResult's `config` does not repeat
# (`generate_table_config`, crates/lakekeeper/src/service/storage/s3.rs: `creds` only).
_CREDENTIAL_ONLY = frozenset(
    {"s3.session-token-expires-at-ms", "expiration-time", "client.refresh-credentials-endpoint"}
)
_TABLE = re.compile(r"namespaces/[^/]+/tables/[^/]+")
_TRANSACTION = "transactions/commit"
# Commits hold their tables and loads wait for them, so no reader sees half a multi-table commit
# (commits.py).
_HOLDS = TableHolds()
# The calls whose answer is a LoadTableResult, which carries vended credentials.
_LOAD_TABLE_RESULTS = (
    ("POST", re.compile(r"namespaces/[^/]+/tables")),  # createTable
    ("GET", re.compile(r"namespaces/[^/]+/tables/[^/]+")),  # loadTable
    ("POST", re.compile(r"namespaces/[^/]+/register")),  # registerTable
)


def _project_and_name(argument: str) -> tuple[str, str]:
    """Lakekeeper's `warehouse` argument: `NAME` or `<project uuid>/NAME`."""
    project, _, name = argument.partition("/")
    try:
        return str(uuid.UUID(project)), name
    except ValueError:
        return request.headers.get("x-project-id") or DEFAULT_PROJECT_ID, argument


@catalog.get("/config")
def get_config():
    argument = request.args.get("warehouse")
    if not argument:
        raise bad_request(
            "No warehouse specified. Please specify the 'warehouse' parameter in the GET /config request.",
            "GetConfigNoWarehouseProvided",
        )
    project_id, name = _project_and_name(argument)
    store = current_app.extensions["devcatalog"].store
    warehouse = store.find_by_name(project_id, name)
    # Lakekeeper v0.13.3 (crates/lakekeeper/src/server/config.rs, `get_config`): a name that is
    # not an active warehouse and one the caller cannot see both answer the same name-keyed 404
    # `NoSuchWarehouseException`, so a name reveals nothing (`is_warehouse_hidden`).
    if (
        warehouse is None
        or warehouse.status != "active"
        or not may_reach(warehouse.id, "describe", store.relations(warehouse.id, caller().user_id))
    ):
        raise warehouse_not_found(name)
    return {
        "defaults": {"prefix": str(warehouse.id), "rest-page-size": REST_PAGE_SIZE},
        "overrides": {"uri": f"{request.host_url.rstrip('/')}/catalog"},
    }


def _active_warehouse(warehouse_id: uuid.UUID) -> Warehouse:
    warehouse = current_app.extensions["devcatalog"].store.get(warehouse_id)
    if warehouse is None or warehouse.status != "active":
        raise warehouse_not_found(warehouse_id)
    return warehouse


def _vended_credentials(
    warehouse: Warehouse,
    table_location: str,
    permissions: StoragePermissions,
    namespace: str,
    table: str,
) -> dict:
    """A `storage-credentials` entry for `table_location` (or the warehouse's whole table
    bucket, by the catalog's scope) with `permissions`, naming the table's loadCredentials
    endpoint to renew them (Lakekeeper's `client.refresh-credentials-endpoint`)."""
    services, settings = current_app.extensions["devcatalog"], current_app.config
    location = (
        table_location
        if settings["VENDED_CREDENTIALS_SCOPE"] == SCOPE_TABLE
        else f"s3://{warehouse.table_bucket}/"
    )
    try:
        inside = split_location(location)[0] == warehouse.table_bucket
    except ValueError:
        inside = False
    if not inside:  # the role reaches every warehouse's table bucket: never vend outside this one
        raise CatalogError(
            403, "StorageLocationForbidden", f"No credentials for {location}: outside the warehouse"
        )
    lifetime = lifetime_seconds(warehouse.storage_profile, settings["VENDED_CREDENTIALS_SECONDS"])
    # Through Lakekeeper's cache: a load within half the lifetime of an earlier one for the same
    # table and privilege gets the same keys. The vending role here is SeaweedFS's own, so the
    # warehouse's last change stands for the storage credential in the key.
    key = CacheKey.of(
        location,
        permissions.value,
        str(warehouse.id),
        f"{namespace}.{table}",
        warehouse.storage_profile,
        f"{warehouse.has_credential}:{warehouse.updated_at}",
    )

    def vend() -> tuple[VendedCredentials, str]:
        vended = services.seaweed.vend_credentials(
            location,
            permissions,
            max(lifetime, STS_DURATION_RANGE.start),
            session_name=f"lakeport-wh-{warehouse.id.hex}",
        )
        # A profile lifetime below STS's minimum is stated, not granted (`vending.stated_expiry`),
        # from the fetch: a cached set keeps the expiry it was vended with.
        return vended, str(int(stated_expiry(vended.expires_at.timestamp(), lifetime) * 1000))

    vended, expires_at_ms = services.credential_cache.get_or_load(key, lifetime, vend)
    return {
        "prefix": vended.location,
        "config": {
            "s3.access-key-id": vended.credentials.access_key_id,
            "s3.secret-access-key": vended.credentials.secret_access_key,
            "s3.session-token": vended.credentials.session_token,
            "s3.session-token-expires-at-ms": expires_at_ms,
            "expiration-time": expires_at_ms,
            "s3.endpoint": services.seaweed.s3_endpoint,
            "s3.path-style-access": "true",
            "s3.region": services.seaweed.region,
            "client.region": services.seaweed.region,
            "client.refresh-credentials-endpoint": (
                f"{request.host_url.rstrip('/')}/catalog/v1/{warehouse.id}/namespaces/{quote(namespace, safe='')}"
                f"/tables/{quote(table, safe='')}/credentials"
            ),
        },
    }


class _CreatedTables:
    """Which caller created (or registered) each table here, and its location. Lakekeeper makes the
    creator the table's owner (crates/authz-openfga/src/authorizer.rs, `create_table`:
    `ownership_tuples_for_table` for the actor), so the creator loads it, and its credentials, with
    ReadWriteDelete whatever its warehouse grants; and loadCredentials serves a staged table
    (stage-create) too (`TabularListFlags::active_and_staged()`, `load_table_credentials` in
    crates/lakekeeper/src/server/tables.rs), which SeaweedFS knows only once it is committed.
    In memory: the store holds warehouse grants only, so a restart forgets who created what."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: dict[tuple[uuid.UUID, str, str], tuple[str, str]] = {}

    def add(
        self, warehouse_id: uuid.UUID, namespace: str, table: str, creator: str, location: str
    ) -> None:
        with self._lock:
            self._tables[(warehouse_id, namespace, table)] = (creator, location)

    def forget(self, warehouse_id: uuid.UUID, namespace: str, table: str) -> None:
        with self._lock:
            self._tables.pop((warehouse_id, namespace, table), None)

    def get(self, warehouse_id: uuid.UUID, namespace: str, table: str) -> tuple[str, str] | None:
        with self._lock:
            return self._tables.get((warehouse_id, namespace, table))


_CREATED = _CreatedTables()


def _callers_load_permissions(
    warehouse: Warehouse, namespace: str, table: str
) -> StoragePermissions | None:
    """What the caller's grants allow on a table it loads (`vending.load_permissions`); all of it
    on a table it created (`_CreatedTables`)."""
    created = _CREATED.get(warehouse.id, namespace, table)
    if created is not None and created[0] == caller().user_id:
        return StoragePermissions.READ_WRITE_DELETE
    store = current_app.extensions["devcatalog"].store
    return load_permissions(store.relations(warehouse.id, caller().user_id), caller().project_admin)


def _wants_vended_credentials() -> bool:
    asked = request.headers.get(_ACCESS_DELEGATION, "")
    return "vended-credentials" in (mode.strip() for mode in asked.split(","))


def _is_load_table_result(rest: str) -> bool:
    return any(
        request.method == method and pattern.fullmatch(rest)
        for method, pattern in _LOAD_TABLE_RESULTS
    )


def _table_named(rest: str) -> tuple[str, str]:
    """The namespace and table a call is about: in the path (load, drop), or the request's
    `name` (create, register)."""
    parts = rest.split("/")
    if request.method != "POST":
        return parts[1], parts[3]
    return parts[1], str((request.get_json(silent=True) or {}).get("name", ""))


def _forward(warehouse: Warehouse, method: str, rest: str, **kwargs):
    # Flask decoded the path; the namespace separator (0x1F) and spaces must be encoded again.
    return current_app.extensions["devcatalog"].seaweed.iceberg_call(
        method,
        warehouse.table_bucket,
        quote(rest, safe="/"),
        **kwargs,
    )


@catalog.get("/<uuid:warehouse_id>/namespaces/<namespace>/tables/<table>/credentials")
def load_credentials(warehouse_id: uuid.UUID, namespace: str, table: str):
    warehouse = _active_warehouse(warehouse_id)
    table_exists = _forward(
        warehouse, "GET", f"namespaces/{namespace}/tables/{table}", query=b"snapshots=refs"
    )
    staged = _CREATED.get(warehouse.id, namespace, table)
    if not table_exists.is_success and (table_exists.status_code != 404 or staged is None):
        # SeaweedFS's own answer: NoSuchTableException, NoSuchNamespaceException.
        return Response(
            table_exists.content,
            status=table_exists.status_code,
            content_type=table_exists.headers.get("content-type"),
        )
    permissions = _callers_load_permissions(warehouse, namespace, table)
    if permissions is None:  # Lakekeeper: AuthZTableActionForbidden for ReadData
        raise CatalogError(
            403, "TableActionForbidden", f"{caller().user_id} may not read data of table {table}"
        )
    location = (
        json.loads(table_exists.content)["metadata"]["location"]
        if table_exists.is_success
        else staged[1]
    )
    return {
        "storage-credentials": [
            _vended_credentials(warehouse, location, permissions, namespace, table)
        ]
    }


def _held(warehouse_id: uuid.UUID, rest: str):
    """The hold a call takes (commits.py): a commit holds its tables, a load waits for them."""
    if request.method == "POST" and rest == _TRANSACTION:
        return _HOLDS.committing(transaction_tables(warehouse_id, request.get_json(silent=True)))
    if _TABLE.fullmatch(rest):
        parts = rest.split("/")
        key = (warehouse_id, parts[1], parts[3])
        if request.method == "POST":  # updateTable: a commit of one table
            return _HOLDS.committing([key])
        if request.method in ("GET", "HEAD"):
            return _HOLDS.loading(key)
    return nullcontext()


@catalog.route("/<uuid:warehouse_id>/<path:rest>", methods=["GET", "HEAD", "POST", "DELETE"])
def forward(warehouse_id: uuid.UUID, rest: str):
    warehouse = _active_warehouse(warehouse_id)
    # SeaweedFS is not asked to vend: the vending rules are Lakekeeper's, applied here.
    headers = {"content-type": request.content_type} if request.content_type else {}
    with _held(warehouse.id, rest):
        answer = _forward(
            warehouse,
            request.method,
            rest,
            query=request.query_string,
            content=request.get_data(),
            headers=headers,
        )
    body = answer.content
    if answer.is_success and request.method == "DELETE" and _TABLE.fullmatch(rest):
        _CREATED.forget(warehouse.id, *_table_named(rest))
    if answer.is_success and _is_load_table_result(rest):
        namespace, table = _table_named(rest)
        if (
            request.method == "POST"
        ):  # Lakekeeper's: a table the caller creates or registers is theirs
            _CREATED.add(
                warehouse.id,
                namespace,
                table,
                caller().user_id,
                json.loads(body)["metadata"]["location"],
            )
    if answer.is_success and _is_load_table_result(rest) and _wants_vended_credentials():
        permissions = (
            StoragePermissions.READ_WRITE_DELETE
            if request.method == "POST"
            else _callers_load_permissions(warehouse, namespace, table)
        )
        if permissions is not None:  # Lakekeeper loads the table without credentials then
            result = json.loads(body)
            credential = _vended_credentials(
                warehouse, result["metadata"]["location"], permissions, namespace, table
            )
            # Lakekeeper puts the renewal endpoint and the expiry in the credential only (`creds`).
            result["config"] = {
                **(result.get("config") or {}),
                **{
                    key: value
                    for key, value in credential["config"].items()
                    if key not in _CREDENTIAL_ONLY
                },
            }
            result["storage-credentials"] = [credential]
            body = json.dumps(result).encode()
    return Response(
        body, status=answer.status_code, content_type=answer.headers.get("content-type")
    )
