"""Lakeport's client for Lakekeeper: its Management API and the Iceberg REST calls the portal
makes to browse and purge a warehouse (see the package's docstring for identity, errors, retries).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from app.lakekeeper.errors import LakekeeperError, LakekeeperUnavailable, ServiceTokenError
from app.lakekeeper.resources import (
    CatalogRole,
    CatalogUser,
    DeleteProfile,
    PurgeResult,
    S3AccessKeyCredential,
    S3StorageProfile,
    ServerInfo,
    TableIdentifier,
    TableSummary,
    WarehouseAssignment,
    WarehouseInfo,
)
from app.lakekeeper.tokens import ScopedToken, TokenSource
from app.lakekeeper.versions import require_supported

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Lakekeeper's default project.
DEFAULT_PROJECT_ID = "00000000-0000-0000-0000-000000000000"
# Separates the parts of a multi-level namespace in Iceberg REST paths and queries.
NAMESPACE_SEPARATOR = "\x1f"
_RETRY_STATUSES = frozenset({502, 503, 504})
# Lakekeeper writes one call's assignment changes to OpenFGA in one transaction of at most 100
# tuples (lakekeeper/lakekeeper v0.13.3, crates/authz-openfga/src/authorizer.rs `write`, reached
# from crates/authz-openfga/src/api.rs `checked_write`).
MAX_ASSIGNMENT_CHANGES = 100
# How long a version read from /management/v1/info is trusted: Lakekeeper may be upgraded under a
# running portal.
VERSION_RECHECK_SECONDS = 300.0


class LakekeeperClient:
    """Lakekeeper's Management API and the Iceberg REST calls the portal uses.

    `base_url` is Lakekeeper's root (without `/management` or `/catalog`). Every call names
    the project with `x-project-id` (Lakekeeper's default project when `project_id` is not
    given), so changing Lakekeeper's default project never moves the portal's warehouses.
    `transport` lets tests substitute the HTTP layer (e.g. `httpx.MockTransport`).
    With `check_version`, the first call (and the first after `VERSION_RECHECK_SECONDS`) reads
    Lakekeeper's version from `/management/v1/info`, and every call raises `UnsupportedLakekeeper`
    while that version is outside the supported range (app/lakekeeper/versions.py).
    """

    def __init__(
        self,
        base_url: str,
        token_source: TokenSource,
        project_id: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        *,
        retries: int = 2,
        backoff: float = 0.2,
        check_version: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.project_id = project_id or DEFAULT_PROJECT_ID
        self.retries = retries
        self.backoff = backoff
        self.check_version = check_version
        self._version_seen: tuple[float, str] | None = None  # (when, Lakekeeper's version)
        # Where this client's bearer tokens come from (the portal's Iceberg reads share it).
        self.token_source = token_source
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport)

    def __repr__(self) -> str:
        return f"LakekeeperClient({self.base_url!r}, project_id={self.project_id!r})"

    def user_token(self, subject: str, warehouse_id: str | None = None) -> ScopedToken:
        """A fresh catalog token acting as the user `subject`, for one execution in the
        warehouse `warehouse_id` (Lakekeeper's id); see `ClientCredentialsTokenSource.user_token`."""
        return self.token_source.user_token(subject, warehouse_id)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "LakekeeperClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- Management API: server and warehouses ---

    def server_info(self) -> ServerInfo:
        return self._call("server_info", "GET", "/management/v1/info", parse=ServerInfo.from_api)

    def lakekeeper_version(self) -> str:
        """Lakekeeper's version, read again; raises UnsupportedLakekeeper when it is not supported."""
        version = self.server_info().version
        self._version_seen = (time.monotonic(), version)
        require_supported(version, "server_info")
        return version

    def create_warehouse(
        self,
        name: str,
        storage_profile: S3StorageProfile,
        credential: S3AccessKeyCredential | None = None,
        delete_profile: DeleteProfile | None = None,
    ) -> WarehouseInfo:
        """Register a warehouse. Lakekeeper first checks that it can write, read and delete
        a test object at the location with `credential`, and refuses otherwise."""
        optional = {"storage-credential": credential, "delete-profile": delete_profile}
        body = {
            "warehouse-name": name,
            "storage-profile": storage_profile.to_api(),
            **{key: value.to_api() for key, value in optional.items() if value is not None},
        }
        return self._call(
            "create_warehouse",
            "POST",
            "/management/v1/warehouse",
            json=body,
            idempotent=False,
            secrets=_secrets_of(credential),
            parse=WarehouseInfo.from_api,
        )

    def list_warehouses(self) -> list[WarehouseInfo]:
        """The project's active warehouses that the caller may see.

        No `warehouseStatus` filter is sent: Lakekeeper 0.13.x answers 400 to any value of an array
        query parameter (see `role_members`) and lists active warehouses without one
        (crates/lakekeeper-storage-postgres/src/warehouse.rs, `list_warehouses`, at v0.13.3). A
        deactivated warehouse is read by its id (`get_warehouse`)."""
        return self._call(
            "list_warehouses",
            "GET",
            "/management/v1/warehouse",
            parse=lambda body: [WarehouseInfo.from_api(item) for item in body["warehouses"]],
        )

    def get_warehouse(self, warehouse_id: str) -> WarehouseInfo:
        return self._call(
            "get_warehouse", "GET", _warehouse_path(warehouse_id), parse=WarehouseInfo.from_api
        )

    def rename_warehouse(self, warehouse_id: str, new_name: str) -> WarehouseInfo:
        # Setting a name is idempotent: a repeated rename to the same name changes nothing.
        return self._call(
            "rename_warehouse",
            "POST",
            _warehouse_path(warehouse_id, "rename"),
            json={"new-name": new_name},
            parse=WarehouseInfo.from_api,
        )

    def update_storage_credential(
        self, warehouse_id: str, credential: S3AccessKeyCredential
    ) -> WarehouseInfo:
        """Rotate the key Lakekeeper uses for the warehouse's bucket (validated like on create)."""
        return self._call(
            "update_storage_credential",
            "POST",
            _warehouse_path(warehouse_id, "storage-credential"),
            json={"new-storage-credential": credential.to_api()},
            secrets=_secrets_of(credential),
            parse=WarehouseInfo.from_api,
        )

    def deactivate_warehouse(self, warehouse_id: str) -> None:
        self._call("deactivate_warehouse", "POST", _warehouse_path(warehouse_id, "deactivate"))

    def activate_warehouse(self, warehouse_id: str) -> None:
        self._call("activate_warehouse", "POST", _warehouse_path(warehouse_id, "activate"))

    def set_delete_profile(self, warehouse_id: str, delete_profile: DeleteProfile) -> WarehouseInfo:
        return self._call(
            "set_delete_profile",
            "POST",
            _warehouse_path(warehouse_id, "delete-profile"),
            json={"delete-profile": delete_profile.to_api()},
            parse=WarehouseInfo.from_api,
        )

    def delete_warehouse(self, warehouse_id: str) -> None:
        """Delete an empty warehouse. While purges of its dropped tables still run, Lakekeeper
        answers `WarehouseHasUnfinishedTasks`; call again later."""
        self._call("delete_warehouse", "DELETE", _warehouse_path(warehouse_id))

    # --- Management API: users and warehouse grants (OpenFGA authorizer) ---

    def whoami(self, token: str | None = None) -> CatalogUser:
        """Who Lakekeeper takes the caller to be: the service identity, or the holder of `token`."""
        return self._call(
            "whoami", "GET", "/management/v1/whoami", token=token, parse=CatalogUser.from_api
        )

    def provision_user(self, user_token: str) -> CatalogUser:
        """Register (or refresh) the holder of `user_token` in Lakekeeper, name and email taken
        from the token. Self-provisioning: Lakekeeper lets every user register themself, while
        registering others needs a server-level right the portal's project-admin identity lacks.
        Setting the user's details is idempotent."""
        return self._call(
            "provision_user",
            "POST",
            "/management/v1/user",
            json={"update-if-exists": True},
            token=user_token,
            parse=CatalogUser.from_api,
        )

    def warehouse_assignments(self, warehouse_id: str) -> list[WarehouseAssignment]:
        return self._call(
            "warehouse_assignments",
            "GET",
            _permissions_path(warehouse_id),
            parse=lambda body: [WarehouseAssignment.from_api(item) for item in body["assignments"]],
        )

    def update_warehouse_assignments(
        self,
        warehouse_id: str,
        writes: list[WarehouseAssignment] = (),
        deletes: list[WarehouseAssignment] = (),
    ) -> None:
        """Add `writes` and remove `deletes` (an absolute change: safe to repeat), in one call when
        they fit Lakekeeper's one OpenFGA write, else deletes first, then writes, in turns."""
        changes = [("deletes", a) for a in deletes] + [("writes", a) for a in writes]
        for start in range(0, max(len(changes), 1), MAX_ASSIGNMENT_CHANGES):
            turn = changes[start : start + MAX_ASSIGNMENT_CHANGES]
            self._call(
                "update_warehouse_assignments",
                "POST",
                _permissions_path(warehouse_id),
                json={
                    "writes": [a.to_api() for kind, a in turn if kind == "writes"],
                    "deletes": [a.to_api() for kind, a in turn if kind == "deletes"],
                },
            )

    def set_warehouse_assignments(
        self, warehouse_id: str, wanted: list[WarehouseAssignment]
    ) -> None:
        """Make `wanted` the warehouse's only grants: write what is missing, delete the rest
        (e.g. the ownership Lakekeeper gives the creator, here the portal's service identity)."""
        current = set(self.warehouse_assignments(warehouse_id))
        writes = [a for a in wanted if a not in current]
        deletes = [a for a in current if a not in set(wanted)]
        if writes or deletes:
            self.update_warehouse_assignments(warehouse_id, writes, deletes)

    def grant_sole_ownership(self, warehouse_id: str, user_id: str) -> None:
        """`ownership` of the warehouse for `user_id`, and no grant for anyone else."""
        self.set_warehouse_assignments(
            warehouse_id, [WarehouseAssignment("ownership", user=user_id)]
        )

    # --- Management API: roles (a group's members hold what its role is granted) ---

    def create_role(self, name: str, description: str = "") -> CatalogRole:
        """A new role in the project (never retried: a retry could make a second one)."""
        return self._call(
            "create_role",
            "POST",
            "/management/v1/role",
            idempotent=False,
            json={"name": name, "description": description or None},
            parse=CatalogRole.from_api,
        )

    def delete_role(self, role_id: str) -> None:
        self._call("delete_role", "DELETE", f"/management/v1/role/{_segment(role_id)}")

    def role_members(self, role_id: str) -> set[str]:
        """The users assigned to the role (`assignee`).

        Every relation is asked for and the assignees picked here: Lakekeeper 0.13.x reads query
        strings with axum's `Query` (serde_urlencoded), which fills no `Vec` field, so any
        `?relations=` answers 400 (lakekeeper/lakekeeper crates/authz-openfga/src/api.rs,
        `GetRoleAssignmentsQuery`, at v0.13.3; fixed on `main` only:
        crates/lakekeeper-integration-tests/tests/management_query_arrays.rs)."""
        return self._call(
            "role_members",
            "GET",
            _role_permissions_path(role_id),
            parse=lambda body: {
                item["user"]
                for item in body["assignments"]
                if item.get("type") == "assignee" and item.get("user")
            },
        )

    def update_role_members(
        self, role_id: str, add: set[str] = frozenset(), remove: set[str] = frozenset()
    ) -> None:
        """Add and remove assignee users in one call (an absolute change: safe to repeat)."""
        if add or remove:
            self._call(
                "update_role_members",
                "POST",
                _role_permissions_path(role_id),
                json={
                    "writes": [{"type": "assignee", "user": user} for user in sorted(add)],
                    "deletes": [{"type": "assignee", "user": user} for user in sorted(remove)],
                },
            )

    # --- Iceberg REST catalog ---

    def catalog_prefix(self, warehouse_name: str) -> str:
        """The URL prefix of the warehouse in the Iceberg REST API (Lakekeeper: its id)."""
        # Overrides win over defaults, as for every Iceberg catalog property.
        return self._call(
            "catalog_prefix",
            "GET",
            "/catalog/v1/config",
            params={"warehouse": warehouse_name},
            parse=lambda config: config["overrides"].get("prefix") or config["defaults"]["prefix"],
        )

    def list_namespaces(self, prefix: str, parent: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        """The namespaces directly under `parent` (top level when empty)."""
        params = {"parent": NAMESPACE_SEPARATOR.join(parent)} if parent else {}
        return self._paged(
            "list_namespaces",
            f"/catalog/v1/{_segment(prefix)}/namespaces",
            params,
            lambda page: [tuple(namespace) for namespace in page.get("namespaces", [])],
        )

    def list_tables(self, prefix: str, namespace: tuple[str, ...]) -> list[TableIdentifier]:
        return self._paged(
            "list_tables",
            f"{_namespace_path(prefix, namespace)}/tables",
            {},
            lambda page: [
                TableIdentifier(tuple(i["namespace"]), i["name"])
                for i in page.get("identifiers", [])
            ],
        )

    def load_table(self, prefix: str, table: TableIdentifier) -> TableSummary:
        # Only the snapshots that refs point at: the current one is all the summary needs.
        return self._call(
            "load_table",
            "GET",
            _table_path(prefix, table),
            params={"snapshots": "refs"},
            parse=lambda result: TableSummary.from_load_table(table, result),
        )

    def drop_table(self, prefix: str, table: TableIdentifier, purge: bool = True) -> None:
        """Drop a table; with `purge`, Lakekeeper also deletes its data and metadata files."""
        self._call(
            "drop_table",
            "DELETE",
            _table_path(prefix, table),
            params={"purgeRequested": "true" if purge else "false"},
        )

    def drop_namespace(self, prefix: str, namespace: tuple[str, ...]) -> None:
        """Drop an empty namespace."""
        self._call("drop_namespace", "DELETE", _namespace_path(prefix, namespace))

    def purge_warehouse_contents(self, warehouse_name: str) -> PurgeResult:
        """Drop every table (purging its files) and every namespace of the warehouse,
        innermost first, so that the warehouse can then be deleted.

        Under a soft-delete profile Lakekeeper keeps dropped tables until they expire, and
        they block deleting the warehouse; warehouses created without a delete profile use
        hard deletion."""
        prefix = self.catalog_prefix(warehouse_name)
        tables = namespaces = 0

        def purge(namespace: tuple[str, ...]) -> None:
            nonlocal tables, namespaces
            for child in self.list_namespaces(prefix, namespace):
                purge(child)
            if namespace:
                for table in self.list_tables(prefix, namespace):
                    self.drop_table(prefix, table, purge=True)
                    tables += 1
                self.drop_namespace(prefix, namespace)
                namespaces += 1

        purge(())
        return PurgeResult(tables_dropped=tables, namespaces_dropped=namespaces)

    # --- Transport ---

    def _paged(
        self,
        operation: str,
        path: str,
        params: dict[str, str],
        items_of: Callable[[dict[str, Any]], list[T]],
    ) -> list[T]:
        """All items of an Iceberg listing, following `next-page-token`."""
        items: list[T] = []
        page_token = None
        while True:
            query = {**params, "pageToken": page_token} if page_token else params
            page_items, page_token = self._call(
                operation,
                "GET",
                path,
                params=query,
                parse=lambda page: (items_of(page), page.get("next-page-token")),
            )
            items.extend(page_items)
            if not page_token:
                return items

    def _call(
        self,
        operation: str,
        method: str,
        path: str,
        *,
        params: Any = None,
        json: Any = None,
        idempotent: bool = True,
        secrets: tuple[str, ...] = (),
        token: str | None = None,
        parse: Callable[[Any], T] | None = None,
    ) -> T | None:
        """Send one logical request, retrying where that is safe, and return `parse` of the
        JSON answer (None without `parse`). `token` replaces the service identity's bearer
        token (a user's). Every failure raises LakekeeperError."""
        if self.check_version and operation != "server_info":
            self._require_supported_version(operation)
        response = self._send(operation, method, path, params, json, idempotent, secrets, token)
        if parse is None or response is None:
            return None
        try:
            return parse(response.json())
        except (ValueError, LookupError, TypeError, AttributeError) as error:
            raise LakekeeperError(
                response.status_code,
                "UnexpectedResponse",
                f"answer does not match the API ({type(error).__name__}: {error})",
                operation,
            ) from None

    def _send(
        self,
        operation: str,
        method: str,
        path: str,
        params: Any,
        json: Any,
        idempotent: bool,
        secrets: tuple[str, ...],
        token: str | None = None,
    ) -> httpx.Response | None:
        """The successful response, or None for a DELETE that an earlier attempt whose
        answer was lost had already carried out."""
        attempts = 1 + (self.retries if idempotent else 0)
        attempt = 0
        token_renewed = False
        earlier_attempt_may_have_acted = False
        while True:
            attempt += 1
            started = time.monotonic()
            try:
                headers = self._headers(operation, token)
                response = self._http.request(
                    method, path, params=params, json=json, headers=headers
                )
            except httpx.TransportError as error:
                # A refused connection never reached Lakekeeper; anything later may have.
                reached = not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))
                if attempt < attempts:
                    earlier_attempt_may_have_acted |= reached
                    self._pause_before_retry(
                        operation, method, path, type(error).__name__, attempt, attempts
                    )
                    continue
                raise LakekeeperUnavailable(
                    f"{type(error).__name__}: {error}",
                    operation,
                    outcome_unknown=reached and not idempotent,
                ) from None
            logger.debug(
                "Lakekeeper %s %s -> %s in %.0f ms",
                method,
                path,
                response.status_code,
                (time.monotonic() - started) * 1000,
            )
            if response.status_code == 401 and not token_renewed and token is None:
                # The token may have been revoked or have expired early: one more try with a
                # fresh one, not counted as an attempt. Lakekeeper did nothing on a 401.
                self.token_source.invalidate()
                token_renewed = True
                attempt -= 1
                continue
            if response.status_code in _RETRY_STATUSES and attempt < attempts:
                earlier_attempt_may_have_acted = True
                self._pause_before_retry(
                    operation, method, path, f"HTTP {response.status_code}", attempt, attempts
                )
                continue
            if (
                response.status_code == 404
                and method == "DELETE"
                and earlier_attempt_may_have_acted
            ):
                return None
            if response.is_error:
                raise _error_from(response, operation, secrets)
            return response

    def _require_supported_version(self, operation: str) -> None:
        seen = self._version_seen
        if seen is None or time.monotonic() - seen[0] > VERSION_RECHECK_SECONDS:
            seen = self._version_seen = (time.monotonic(), self.server_info().version)
        require_supported(seen[1], operation)

    def _headers(self, operation: str, token: str | None = None) -> dict[str, str]:
        try:
            token = token or self.token_source.token()
        except ServiceTokenError as error:
            error.operation = operation
            raise
        return {"Authorization": f"Bearer {token}", "x-project-id": self.project_id}

    def _pause_before_retry(
        self,
        operation: str,
        method: str,
        path: str,
        reason: str,
        attempt: int,
        attempts: int,
    ) -> None:
        delay = self.backoff * (2 ** (attempt - 1))
        logger.warning(
            "Lakekeeper %s (%s %s) failed with %s; retry %d of %d in %.1f s",
            operation,
            method,
            path,
            reason,
            attempt,
            attempts - 1,
            delay,
        )
        time.sleep(delay)


def _error_from(
    response: httpx.Response, operation: str, secrets: tuple[str, ...]
) -> LakekeeperError:
    try:
        error = response.json()["error"]
        error_type, message = str(error["type"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        error_type, message = f"HTTP{response.status_code}", response.reason_phrase
    for secret in secrets:
        # Lakekeeper does not echo secrets; this makes sure of it.
        message = message.replace(secret, "***")
    return LakekeeperError(response.status_code, error_type, message, operation)


def _secrets_of(credential: S3AccessKeyCredential | None) -> tuple[str, ...]:
    return (credential.secret_access_key,) if credential else ()


def _segment(value: str) -> str:
    return quote(value, safe="")


def _warehouse_path(warehouse_id: str, action: str | None = None) -> str:
    path = f"/management/v1/warehouse/{_segment(warehouse_id)}"
    return f"{path}/{action}" if action else path


def _permissions_path(warehouse_id: str) -> str:
    return f"/management/v1/permissions/warehouse/{_segment(warehouse_id)}/assignments"


def _role_permissions_path(role_id: str) -> str:
    return f"/management/v1/permissions/role/{_segment(role_id)}/assignments"


def _namespace_path(prefix: str, namespace: tuple[str, ...]) -> str:
    return (
        f"/catalog/v1/{_segment(prefix)}/namespaces/{_segment(NAMESPACE_SEPARATOR.join(namespace))}"
    )


def _table_path(prefix: str, table: TableIdentifier) -> str:
    return f"{_namespace_path(prefix, table.namespace)}/tables/{_segment(table.name)}"
