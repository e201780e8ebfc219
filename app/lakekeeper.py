"""Lakeport's client for Lakekeeper: its Management API and the few Iceberg REST catalog
calls the portal needs to browse and purge a warehouse.

Requests and responses follow Lakekeeper's published OpenAPI documents
(`management-open-api.yaml`, `rest-catalog-open-api.yaml`); the tests check every request
this module sends against them.

Identity: the portal manages Lakekeeper as one service client (OAuth2 client-credentials
grant, `ClientCredentialsTokenSource`), never with the signed-in user's token: a user's
access token can expire in the middle of a long purge, and background work would force the
portal to store user tokens. With Lakekeeper's OpenFGA authorizer that service identity is a
project admin: it creates warehouses and manages their grants, and gives `ownership` of each
warehouse to its Lakeport owner's Lakekeeper identity (`lakekeeper_user_id`, `oidc~<subject>`)
and to nobody else (`grant_sole_ownership`).
An execution acts as its user instead (`LakekeeperClient.user_token`): the service client
exchanges its own token at the identity provider (OAuth 2.0 Token Exchange, RFC 8693) for a
short-lived token whose subject is the executing user, optionally narrowed further by a
`warehouse:<id>` scope. It is minted fresh for each run, never cached or reused.

Errors: every failure is a `LakekeeperError` whose `user_message` can be shown to users;
`str(error)` is the technical account for logs. Neither ever contains a secret.

Retries: only calls that are safe to repeat are retried (GETs, DELETEs, and POSTs that
set an absolute state: rename, credential rotation, (de)activation, delete profile, grant
changes, a user's registration), on connection failures, timeouts and 502/503/504.
Creating a warehouse is never retried.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import httpx

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Lakekeeper's default project.
DEFAULT_PROJECT_ID = "00000000-0000-0000-0000-000000000000"
# Separates the parts of a multi-level namespace in Iceberg REST paths and queries.
NAMESPACE_SEPARATOR = "\x1f"
# Scope of a token that may reach only one warehouse: `warehouse:<Lakekeeper warehouse id>`. A
# second narrowing layer that Lakeport's dev catalog enforces; Lakekeeper ignores it (its
# OpenFGA grants decide).
WAREHOUSE_SCOPE_PREFIX = "warehouse:"
# OAuth 2.0 Token Exchange (RFC 8693): the grant, and the token type asked for and presented.
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
# Lakekeeper names a user `<identity provider id>~<subject>`; its primary OpenID provider is `oidc`.
LAKEKEEPER_OIDC_PROVIDER_ID = "oidc"
# Relations of a warehouse (management-open-api.yaml, WarehouseRelation).
WAREHOUSE_RELATIONS = frozenset({
    "ownership", "pass_grants", "manage_grants", "describe", "select", "create", "modify", "manage_tags",
})

_RETRY_STATUSES = frozenset({502, 503, 504})
# Lakekeeper's error types for a storage location it could not write, read and delete with
# the credentials given (storage validation on create and on credential rotation).
_STORAGE_VALIDATION_TYPES = frozenset({
    "IoOperationFailed", "ValidationFailedError", "IcebergFileIOError", "ShortTermCredentialError",
    "InitializeClientError", "MissingCredentialError", "InvalidLocation", "StorageValidationFailed",
})
_USER_MESSAGES = {
    "WarehouseAlreadyExists": "A warehouse with this name already exists in the catalog. Choose another name.",
    "CreateWarehouseStorageProfileOverlap": (
        "This bucket location overlaps an existing warehouse. Use another bucket, or a key prefix "
        "that no other warehouse uses."
    ),
    "WarehouseNotFound": "This warehouse no longer exists in the catalog.",
    "WarehouseHasUnfinishedTasks": (
        "The catalog is still purging this warehouse's dropped tables. Try again in a minute."
    ),
    "WarehouseNotEmpty": (
        "The warehouse still holds namespaces or tables (dropped tables awaiting deletion count too). "
        "Empty it before deleting it."
    ),
    "WarehouseProtected": "The warehouse is protected against deletion in the catalog.",
}
_STORAGE_VALIDATION_MESSAGE = (
    "Lakekeeper could not write to the bucket with these credentials. Check the bucket name, region, "
    "endpoint and key prefix, and that the access key may write, read and delete objects there."
)
_UNEXPECTED_ANSWER_MESSAGE = (
    "The catalog (Lakekeeper) gave an answer the portal does not understand. Contact the operators."
)
_UNREACHABLE_MESSAGE = (
    "The catalog (Lakekeeper) is unreachable. Try again in a moment; if this persists, contact the operators."
)


# --- Errors ---------------------------------------------------------------------------


class LakekeeperError(Exception):
    """Lakekeeper answered with an error (or, for subclasses, could not be asked).

    `status` is the HTTP status (None when there was no answer), `type` Lakekeeper's error
    type (e.g. `WarehouseNotFound`), `message` its technical message, `operation` the
    client method that failed.
    """

    def __init__(self, status: int | None, type: str, message: str, operation: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.operation = operation

    def __str__(self) -> str:
        status = f"HTTP {self.status} " if self.status is not None else ""
        return f"{self.operation or 'Lakekeeper call'}: {status}{self.type}: {self.message}"

    @property
    def is_storage_refusal(self) -> bool:
        """Lakekeeper could not use the storage (bucket, keys, endpoint...) it was given."""
        return self.type in _STORAGE_VALIDATION_TYPES

    @property
    def user_message(self) -> str:
        """What went wrong, in words for the portal's users."""
        if self.type in _USER_MESSAGES:
            if self.operation == "rename_warehouse" and self.type == "WarehouseNotFound":
                # Lakekeeper renames active warehouses only.
                return "Only active warehouses can be renamed; this one is deactivated or no longer exists."
            return _USER_MESSAGES[self.type]
        if self.type in _STORAGE_VALIDATION_TYPES:
            return _STORAGE_VALIDATION_MESSAGE
        if self.type == "UnexpectedResponse":
            return _UNEXPECTED_ANSWER_MESSAGE
        if "AlreadyExists" in self.type or (
            self.status == 409 and self.operation in ("create_warehouse", "rename_warehouse")
        ):
            return "This name is already taken in the catalog. Choose another name."
        if self.status == 401:
            return "The catalog did not accept the portal's credentials. Contact the operators."
        if self.status == 403:
            return "The catalog refused this operation to the portal. Contact the operators."
        if self.status == 404:
            return "The catalog no longer has this item; it may have been deleted meanwhile."
        if self.status == 503:
            return "The catalog (Lakekeeper) is temporarily unavailable. Try again in a moment."
        if self.status is not None and self.status >= 500:
            return (
                "The catalog (Lakekeeper) failed to process the request. Try again later; "
                "if this persists, contact the operators."
            )
        return f"The catalog rejected the request: {self.message}"


class LakekeeperUnavailable(LakekeeperError):
    """No answer: connection refused or reset, or a timeout.

    `outcome_unknown` is True when a request that is not safe to repeat may have reached
    Lakekeeper before the connection failed (e.g. a create that timed out).
    """

    def __init__(self, message: str, operation: str = "", outcome_unknown: bool = False) -> None:
        super().__init__(None, "Unavailable", message, operation)
        self.outcome_unknown = outcome_unknown

    @property
    def user_message(self) -> str:
        if self.outcome_unknown:
            return (
                "The catalog (Lakekeeper) did not answer in time, so it is unknown whether the change "
                "was made. Refresh the page to check before trying again."
            )
        return _UNREACHABLE_MESSAGE


class ServiceTokenError(LakekeeperError):
    """The identity provider did not issue the portal's service token."""

    @property
    def user_message(self) -> str:
        if self.status is None or self.status >= 500:
            return (
                "The portal could not sign in to the catalog because the identity provider is unreachable. "
                "Try again in a moment."
            )
        if self.operation == "user_token":
            return (
                "The identity provider refused the portal a catalog token acting as this user for one "
                "warehouse. Contact the operators."
            )
        return "The identity provider refused the portal's catalog credentials. Contact the operators."


# --- Request and response types -----------------------------------------------------


@dataclass(frozen=True)
class S3StorageProfile:
    """Where a warehouse keeps its data: an S3 (or S3-compatible) bucket and key prefix."""

    bucket: str
    region: str
    key_prefix: str | None = None
    endpoint: str | None = None
    path_style_access: bool | None = None
    flavor: str | None = None  # "aws" or "s3-compat"; Lakekeeper assumes "aws" when absent
    sts_enabled: bool = False

    def to_api(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": "s3", "bucket": self.bucket, "region": self.region, "sts-enabled": self.sts_enabled,
        }
        optional = {
            "key-prefix": self.key_prefix, "endpoint": self.endpoint,
            "path-style-access": self.path_style_access, "flavor": self.flavor,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        return body

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> "S3StorageProfile":
        return cls(
            bucket=data["bucket"],
            region=data["region"],
            key_prefix=data.get("key-prefix"),
            endpoint=data.get("endpoint"),
            path_style_access=data.get("path-style-access"),
            flavor=data.get("flavor"),
            sts_enabled=data.get("sts-enabled", False),
        )


@dataclass(frozen=True)
class S3AccessKeyCredential:
    """An S3 access key pair Lakekeeper uses to reach a warehouse's bucket."""

    access_key_id: str
    secret_access_key: str = field(repr=False)

    def __repr__(self) -> str:
        return f"S3AccessKeyCredential(access_key_id={self.access_key_id!r}, secret_access_key='***')"

    def to_api(self) -> dict[str, Any]:
        return {
            "type": "s3", "credential-type": "access-key",
            "access-key-id": self.access_key_id, "secret-access-key": self.secret_access_key,
        }


@dataclass(frozen=True)
class DeleteProfile:
    """What dropping a table does: delete at once ("hard") or after `expiration_seconds` ("soft")."""

    type: str = "hard"
    expiration_seconds: int | None = None

    @classmethod
    def hard(cls) -> "DeleteProfile":
        return cls("hard")

    @classmethod
    def soft(cls, expiration_seconds: int) -> "DeleteProfile":
        return cls("soft", expiration_seconds)

    def to_api(self) -> dict[str, Any]:
        if self.type == "soft":
            return {"type": "soft", "expiration-seconds": self.expiration_seconds}
        return {"type": "hard"}

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> "DeleteProfile":
        return cls(data["type"], data.get("expiration-seconds"))


@dataclass(frozen=True)
class WarehouseInfo:
    """A warehouse as Lakekeeper describes it. `storage_profile` is None for non-S3 storage."""

    id: str
    name: str
    project_id: str
    status: str  # "active" or "inactive"
    storage_type: str  # "s3", "adls", "gcs", ...
    storage_profile: S3StorageProfile | None
    delete_profile: DeleteProfile
    protected: bool = False
    storage_credential_type: str | None = None  # e.g. "access-key"; never the secret
    updated_at: str | None = None

    @property
    def is_active(self) -> bool:
        return self.status == "active"

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> "WarehouseInfo":
        profile = data["storage-profile"]
        credential_type = data.get("storage-credential-type") or {}
        return cls(
            id=data["warehouse-id"],
            name=data["name"],
            project_id=data["project-id"],
            status=data["status"],
            storage_type=profile["type"],
            storage_profile=S3StorageProfile.from_api(profile) if profile["type"] == "s3" else None,
            delete_profile=DeleteProfile.from_api(data["delete-profile"]),
            protected=data.get("protected", False),
            storage_credential_type=credential_type.get("credential-type"),
            updated_at=data.get("updated-at"),
        )


@dataclass(frozen=True)
class ServerInfo:
    version: str
    bootstrapped: bool
    server_id: str
    authz_backend: str
    default_project_id: str | None = None

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> "ServerInfo":
        return cls(
            version=data["lakekeeper-version"],
            bootstrapped=data["bootstrapped"],
            server_id=data["server-id"],
            authz_backend=data["authz-backend"],
            default_project_id=data.get("default-project-id"),
        )


@dataclass(frozen=True)
class TableIdentifier:
    namespace: tuple[str, ...]
    name: str

    def __str__(self) -> str:
        return ".".join((*self.namespace, self.name))


@dataclass(frozen=True)
class TableSummary:
    """A table's size as of its current snapshot (counts are None before the first write)."""

    identifier: TableIdentifier
    location: str | None
    format_version: int
    current_snapshot_id: int | None
    total_records: int | None
    total_files_size: int | None  # bytes
    total_data_files: int | None
    last_updated_ms: int | None

    @classmethod
    def from_load_table(cls, identifier: TableIdentifier, result: dict[str, Any]) -> "TableSummary":
        metadata = result["metadata"]
        snapshot_id = metadata.get("current-snapshot-id")
        # Iceberg v1 writers mark "no snapshot" with -1.
        if snapshot_id == -1:
            snapshot_id = None
        summary: dict[str, str] = {}
        for snapshot in metadata.get("snapshots") or []:
            if snapshot["snapshot-id"] == snapshot_id:
                summary = snapshot.get("summary", {})

        def count(key: str) -> int | None:
            value = summary.get(key)
            return int(value) if value is not None else None

        return cls(
            identifier=identifier,
            location=metadata.get("location"),
            format_version=metadata["format-version"],
            current_snapshot_id=snapshot_id,
            total_records=count("total-records"),
            total_files_size=count("total-files-size"),
            total_data_files=count("total-data-files"),
            last_updated_ms=metadata.get("last-updated-ms"),
        )


@dataclass(frozen=True)
class PurgeResult:
    tables_dropped: int
    namespaces_dropped: int


@dataclass(frozen=True)
class WarehouseAssignment:
    """One grant on a warehouse (OpenFGA authorizer): `relation` (one of WAREHOUSE_RELATIONS)
    held by a user (Lakekeeper's user id, e.g. `oidc~<sub>`) or a role (its UUID), never both."""

    relation: str
    user: str | None = None
    role: str | None = None

    def __post_init__(self) -> None:
        if self.relation not in WAREHOUSE_RELATIONS:
            raise ValueError(f"unknown warehouse relation {self.relation!r}")
        if (self.user is None) == (self.role is None):
            raise ValueError("a warehouse assignment names exactly one of user and role")

    def to_api(self) -> dict[str, str]:
        holder = {"user": self.user} if self.user is not None else {"role": self.role}
        return {"type": self.relation, **holder}

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> "WarehouseAssignment":
        return cls(data["type"], user=data.get("user"), role=data.get("role"))


@dataclass(frozen=True)
class CatalogUser:
    """A user as Lakekeeper knows it (`id` is `<idp>~<subject>`)."""

    id: str
    name: str
    user_type: str  # "human" or "application"
    email: str | None = None

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> "CatalogUser":
        return cls(id=data["id"], name=data["name"], user_type=data["user-type"], email=data.get("email"))


# --- Tokens ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopedToken:
    """An access token minted for one purpose: its value, the scope the identity provider
    granted (space-separated) and its lifetime in seconds from issue."""

    access_token: str = field(repr=False)
    scope: str
    expires_in: float


def warehouse_scope(warehouse_id: str) -> str:
    """The scope that limits a token to one warehouse (`warehouse_id` is Lakekeeper's id)."""
    return f"{WAREHOUSE_SCOPE_PREFIX}{uuid.UUID(warehouse_id)}"


def lakekeeper_user_id(subject: str) -> str:
    """The id Lakekeeper gives the user whose tokens carry `sub` = `subject` (from its primary
    OpenID provider, `LAKEKEEPER__OPENID_SUBJECT_CLAIM=sub`): `oidc~<subject>`."""
    if not subject or subject != subject.strip():
        raise ValueError("a subject is a non-empty string without surrounding spaces")
    return f"{LAKEKEEPER_OIDC_PROVIDER_ID}~{subject}"


class TokenSource(Protocol):
    def token(self) -> str:
        """A bearer token valid for at least the next few seconds."""

    def invalidate(self) -> None:
        """Forget the cached token (Lakekeeper refused it)."""

    def user_token(self, subject: str, warehouse_id: str | None = None) -> ScopedToken:
        """A new token acting as the user `subject`, for one warehouse (Lakekeeper's id) when given."""


class ClientCredentialsTokenSource:
    """Bearer tokens from an OAuth2 client-credentials grant, cached until shortly before expiry.

    Give `token_url`, or `issuer` to discover it from the OpenID Connect discovery document.
    `scope` and `resource` (RFC 8707) select the audience the token is issued for, as the
    identity provider requires. `audience` is what user tokens are exchanged for (RFC 8693
    `audience`: Lakekeeper's client at the provider); `narrow_to_warehouse` asks for the
    `warehouse:<id>` scope on them too (off for providers without dynamic scopes, e.g. Keycloak).
    Safe to share between threads: concurrent callers wait for one token request.
    """

    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        token_url: str | None = None,
        issuer: str | None = None,
        scope: str | None = None,
        resource: str | None = None,
        audience: str = "lakekeeper",
        narrow_to_warehouse: bool = True,
        auth_method: str = "client_secret_post",
        timeout: float = 10.0,
        refresh_margin: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (token_url or issuer):
            raise ValueError("ClientCredentialsTokenSource needs token_url or issuer")
        if auth_method not in ("client_secret_post", "client_secret_basic"):
            raise ValueError(f"unsupported auth_method {auth_method!r}")
        self.client_id = client_id
        self._client_secret = client_secret
        self._token_url = token_url
        self.issuer = issuer
        self.scope = scope
        self.resource = resource
        self.audience = audience
        self.narrow_to_warehouse = narrow_to_warehouse
        self.auth_method = auth_method
        self.refresh_margin = refresh_margin
        self._clock = clock
        self._http = httpx.Client(timeout=timeout, transport=transport)
        self._lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at = 0.0

    def __repr__(self) -> str:
        return (
            f"ClientCredentialsTokenSource(client_id={self.client_id!r}, "
            f"token_url={self._token_url or self.issuer!r}, client_secret='***')"
        )

    def token(self) -> str:
        with self._lock:
            if self._token is None or self._clock() >= self._refresh_at:
                self._fetch()
            assert self._token is not None
            return self._token

    def invalidate(self) -> None:
        with self._lock:
            self._token = None

    def user_token(self, subject: str, warehouse_id: str | None = None) -> ScopedToken:
        """A new token whose subject is the user `subject` (their `sub` at this identity
        provider), for Lakekeeper (`audience`), e.g. for one execution: neither cached nor
        shared, valid as long as the provider says (`expires_in`).

        OAuth 2.0 Token Exchange (RFC 8693): this client presents its own access token as
        `subject_token` and names the user in `requested_subject` (Keycloak's impersonation
        parameter; the provider must allow this client to impersonate). With `warehouse_id`
        and `narrow_to_warehouse`, also asks for `warehouse:<id>` and refuses a token granted
        without it. Raises ServiceTokenError if the provider refuses."""
        narrowing = warehouse_scope(warehouse_id) if warehouse_id and self.narrow_to_warehouse else None
        form = {
            "grant_type": TOKEN_EXCHANGE_GRANT,
            "subject_token": self.token(),
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            "requested_subject": subject,
            "audience": self.audience,
        }
        if narrowing:
            form["scope"] = narrowing
        payload = self._request_token(form, "user_token")
        granted = str(payload.get("scope") or "")
        if narrowing and narrowing not in granted.split():
            raise ServiceTokenError(
                200, "ScopeNotGranted",
                f"the identity provider did not grant scope {narrowing} (granted: {granted or 'none'})",
                "user_token",
            )
        return ScopedToken(payload["access_token"], granted, float(payload.get("expires_in") or 300))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ClientCredentialsTokenSource":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _fetch(self) -> None:
        started = self._clock()
        form = {"grant_type": "client_credentials"}
        if self.scope:
            form["scope"] = self.scope
        if self.resource:
            form["resource"] = self.resource
        payload = self._request_token(form, "service_token")
        lifetime = float(payload.get("expires_in") or 300)
        # Renew early, but never so early that a short-lived token is not reused at all.
        self._token = payload["access_token"]
        self._refresh_at = started + lifetime - min(self.refresh_margin, lifetime / 2)
        logger.debug("Service token for %s obtained, valid %.0f s", self.client_id, lifetime)

    def _request_token(self, form: dict[str, str], operation: str) -> dict[str, Any]:
        """The token endpoint's answer to `form`, sent with this client's authentication."""
        form = dict(form)
        auth = None
        if self.auth_method == "client_secret_basic":
            auth = httpx.BasicAuth(self.client_id, self._client_secret)
        else:
            form.update(client_id=self.client_id, client_secret=self._client_secret)
        response = self._call_provider(operation, "POST", self._resolve_token_url(operation), data=form, auth=auth)
        if response.status_code != 200:
            error, description = _oauth_error(response)
            raise ServiceTokenError(response.status_code, error, description, operation)
        return response.json()

    def _resolve_token_url(self, operation: str) -> str:
        if self._token_url is None:
            discovery_url = f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"
            response = self._call_provider(operation, "GET", discovery_url)
            if response.status_code != 200:
                raise ServiceTokenError(
                    response.status_code, "DiscoveryFailed", f"{discovery_url} answered {response.status_code}",
                    operation,
                )
            self._token_url = response.json()["token_endpoint"]
        return self._token_url

    def _call_provider(self, operation: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, url, **kwargs)
        except httpx.TransportError as error:
            raise ServiceTokenError(
                None, "IdentityProviderUnreachable", f"{type(error).__name__}: {error}", operation,
            ) from None


def _oauth_error(response: httpx.Response) -> tuple[str, str]:
    try:
        payload = response.json()
        return str(payload.get("error", "TokenRequestFailed")), str(payload.get("error_description", ""))
    except ValueError:
        return "TokenRequestFailed", f"HTTP {response.status_code}"


# --- The client -----------------------------------------------------------------------


class LakekeeperClient:
    """Lakekeeper's Management API and the Iceberg REST calls the portal uses.

    `base_url` is Lakekeeper's root (without `/management` or `/catalog`). Every call names
    the project with `x-project-id` (Lakekeeper's default project when `project_id` is not
    given), so changing Lakekeeper's default project never moves the portal's warehouses.
    `transport` lets tests substitute the HTTP layer (e.g. `httpx.MockTransport`).
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
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.project_id = project_id or DEFAULT_PROJECT_ID
        self.retries = retries
        self.backoff = backoff
        self._token_source = token_source
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport)

    def __repr__(self) -> str:
        return f"LakekeeperClient({self.base_url!r}, project_id={self.project_id!r})"

    @property
    def token_source(self) -> TokenSource:
        """Where this client's bearer tokens come from (the portal's Iceberg reads share it)."""
        return self._token_source

    def user_token(self, subject: str, warehouse_id: str | None = None) -> ScopedToken:
        """A fresh catalog token acting as the user `subject`, for one execution in the
        warehouse `warehouse_id` (Lakekeeper's id); see `ClientCredentialsTokenSource.user_token`."""
        return self._token_source.user_token(subject, warehouse_id)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "LakekeeperClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- Management API: server and warehouses ---

    def server_info(self) -> ServerInfo:
        return self._call("server_info", "GET", "/management/v1/info", parse=ServerInfo.from_api)

    def create_warehouse(
        self,
        name: str,
        storage_profile: S3StorageProfile,
        credential: S3AccessKeyCredential | None = None,
        delete_profile: DeleteProfile | None = None,
    ) -> WarehouseInfo:
        """Register a warehouse. Lakekeeper first checks that it can write, read and delete
        a test object at the location with `credential`, and refuses otherwise."""
        body: dict[str, Any] = {"warehouse-name": name, "storage-profile": storage_profile.to_api()}
        if credential is not None:
            body["storage-credential"] = credential.to_api()
        if delete_profile is not None:
            body["delete-profile"] = delete_profile.to_api()
        return self._call(
            "create_warehouse", "POST", "/management/v1/warehouse", json=body, idempotent=False,
            secrets=_secrets_of(credential), parse=WarehouseInfo.from_api,
        )

    def list_warehouses(self, include_inactive: bool = False) -> list[WarehouseInfo]:
        params = [("warehouseStatus", "active")]
        if include_inactive:
            params.append(("warehouseStatus", "inactive"))
        return self._call(
            "list_warehouses", "GET", "/management/v1/warehouse", params=params,
            parse=lambda body: [WarehouseInfo.from_api(item) for item in body["warehouses"]],
        )

    def get_warehouse(self, warehouse_id: str) -> WarehouseInfo:
        return self._call("get_warehouse", "GET", _warehouse_path(warehouse_id), parse=WarehouseInfo.from_api)

    def find_warehouse(self, name: str) -> WarehouseInfo | None:
        """The warehouse called `name` in the project, active or not (e.g. to learn whether a
        create whose answer was lost went through)."""
        return next((w for w in self.list_warehouses(include_inactive=True) if w.name == name), None)

    def rename_warehouse(self, warehouse_id: str, new_name: str) -> WarehouseInfo:
        # Setting a name is idempotent: a repeated rename to the same name changes nothing.
        return self._call(
            "rename_warehouse", "POST", _warehouse_path(warehouse_id, "rename"), json={"new-name": new_name},
            parse=WarehouseInfo.from_api,
        )

    def update_storage_credential(self, warehouse_id: str, credential: S3AccessKeyCredential) -> WarehouseInfo:
        """Rotate the key Lakekeeper uses for the warehouse's bucket (validated like on create)."""
        return self._call(
            "update_storage_credential", "POST", _warehouse_path(warehouse_id, "storage-credential"),
            json={"new-storage-credential": credential.to_api()}, secrets=_secrets_of(credential),
            parse=WarehouseInfo.from_api,
        )

    def deactivate_warehouse(self, warehouse_id: str) -> None:
        self._call("deactivate_warehouse", "POST", _warehouse_path(warehouse_id, "deactivate"))

    def activate_warehouse(self, warehouse_id: str) -> None:
        self._call("activate_warehouse", "POST", _warehouse_path(warehouse_id, "activate"))

    def set_delete_profile(self, warehouse_id: str, delete_profile: DeleteProfile) -> WarehouseInfo:
        return self._call(
            "set_delete_profile", "POST", _warehouse_path(warehouse_id, "delete-profile"),
            json={"delete-profile": delete_profile.to_api()}, parse=WarehouseInfo.from_api,
        )

    def delete_warehouse(self, warehouse_id: str) -> None:
        """Delete an empty warehouse. While purges of its dropped tables still run, Lakekeeper
        answers `WarehouseHasUnfinishedTasks`; call again later."""
        self._call("delete_warehouse", "DELETE", _warehouse_path(warehouse_id))

    # --- Management API: users and warehouse grants (OpenFGA authorizer) ---

    def whoami(self, token: str | None = None) -> CatalogUser:
        """Who Lakekeeper takes the caller to be: the service identity, or the holder of `token`."""
        return self._call("whoami", "GET", "/management/v1/whoami", token=token, parse=CatalogUser.from_api)

    def provision_user(self, user_token: str) -> CatalogUser:
        """Register (or refresh) the holder of `user_token` in Lakekeeper, name and email taken
        from the token. Self-provisioning: Lakekeeper lets every user register themself, while
        registering others needs a server-level right the portal's project-admin identity lacks.
        Setting the user's details is idempotent."""
        return self._call(
            "provision_user", "POST", "/management/v1/user", json={"update-if-exists": True}, token=user_token,
            parse=CatalogUser.from_api,
        )

    def warehouse_assignments(self, warehouse_id: str) -> list[WarehouseAssignment]:
        return self._call(
            "warehouse_assignments", "GET", _permissions_path(warehouse_id),
            parse=lambda body: [WarehouseAssignment.from_api(item) for item in body["assignments"]],
        )

    def update_warehouse_assignments(
        self, warehouse_id: str, writes: list[WarehouseAssignment] = (), deletes: list[WarehouseAssignment] = (),
    ) -> None:
        """Add `writes` and remove `deletes` in one call (an absolute change: safe to repeat)."""
        self._call(
            "update_warehouse_assignments", "POST", _permissions_path(warehouse_id),
            json={"writes": [a.to_api() for a in writes], "deletes": [a.to_api() for a in deletes]},
        )

    def set_warehouse_assignments(self, warehouse_id: str, wanted: list[WarehouseAssignment]) -> None:
        """Make `wanted` the warehouse's only grants: write what is missing, delete the rest
        (e.g. the ownership Lakekeeper gives the creator, here the portal's service identity)."""
        current = set(self.warehouse_assignments(warehouse_id))
        writes = [a for a in wanted if a not in current]
        deletes = [a for a in current if a not in set(wanted)]
        if writes or deletes:
            self.update_warehouse_assignments(warehouse_id, writes, deletes)

    def grant_sole_ownership(self, warehouse_id: str, user_id: str) -> None:
        """`ownership` of the warehouse for `user_id`, and no grant for anyone else."""
        self.set_warehouse_assignments(warehouse_id, [WarehouseAssignment("ownership", user=user_id)])

    # --- Iceberg REST catalog ---

    def catalog_prefix(self, warehouse_name: str) -> str:
        """The URL prefix of the warehouse in the Iceberg REST API (Lakekeeper: its id)."""
        def prefix_of(config: dict[str, Any]) -> str:
            # Overrides win over defaults, as for every Iceberg catalog property.
            return config["overrides"].get("prefix") or config["defaults"]["prefix"]

        return self._call(
            "catalog_prefix", "GET", "/catalog/v1/config", params={"warehouse": warehouse_name}, parse=prefix_of,
        )

    def list_namespaces(self, prefix: str, parent: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        """The namespaces directly under `parent` (top level when empty)."""
        params = {"parent": NAMESPACE_SEPARATOR.join(parent)} if parent else {}
        return self._paged(
            "list_namespaces", f"/catalog/v1/{_segment(prefix)}/namespaces", params,
            lambda page: [tuple(namespace) for namespace in page.get("namespaces", [])],
        )

    def list_tables(self, prefix: str, namespace: tuple[str, ...]) -> list[TableIdentifier]:
        return self._paged(
            "list_tables", f"{_namespace_path(prefix, namespace)}/tables", {},
            lambda page: [TableIdentifier(tuple(i["namespace"]), i["name"]) for i in page.get("identifiers", [])],
        )

    def load_table(self, prefix: str, table: TableIdentifier) -> TableSummary:
        # Only the snapshots that refs point at: the current one is all the summary needs.
        return self._call(
            "load_table", "GET", _table_path(prefix, table), params={"snapshots": "refs"},
            parse=lambda result: TableSummary.from_load_table(table, result),
        )

    def drop_table(self, prefix: str, table: TableIdentifier, purge: bool = True) -> None:
        """Drop a table; with `purge`, Lakekeeper also deletes its data and metadata files."""
        self._call(
            "drop_table", "DELETE", _table_path(prefix, table),
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
        self, operation: str, path: str, params: dict[str, str], items_of: Callable[[dict[str, Any]], list[T]],
    ) -> list[T]:
        """All items of an Iceberg listing, following `next-page-token`."""
        items: list[T] = []
        page_token = None
        while True:
            query = {**params, "pageToken": page_token} if page_token else params
            page_items, page_token = self._call(
                operation, "GET", path, params=query,
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
        response = self._send(operation, method, path, params, json, idempotent, secrets, token)
        if parse is None or response is None:
            return None
        try:
            return parse(response.json())
        except (ValueError, LookupError, TypeError, AttributeError) as error:
            raise LakekeeperError(
                response.status_code, "UnexpectedResponse",
                f"answer does not match the API ({type(error).__name__}: {error})", operation,
            ) from None

    def _send(
        self, operation: str, method: str, path: str, params: Any, json: Any, idempotent: bool,
        secrets: tuple[str, ...], token: str | None = None,
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
                response = self._http.request(method, path, params=params, json=json, headers=headers)
            except httpx.TransportError as error:
                # A refused connection never reached Lakekeeper; anything later may have.
                reached = not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))
                if attempt < attempts:
                    earlier_attempt_may_have_acted |= reached
                    self._pause_before_retry(operation, method, path, type(error).__name__, attempt, attempts)
                    continue
                raise LakekeeperUnavailable(
                    f"{type(error).__name__}: {error}", operation, outcome_unknown=reached and not idempotent,
                ) from None
            logger.debug(
                "Lakekeeper %s %s -> %s in %.0f ms", method, path, response.status_code,
                (time.monotonic() - started) * 1000,
            )
            if response.status_code == 401 and not token_renewed and token is None:
                # The token may have been revoked or have expired early: one more try with a
                # fresh one, not counted as an attempt. Lakekeeper did nothing on a 401.
                self._token_source.invalidate()
                token_renewed = True
                attempt -= 1
                continue
            if response.status_code in _RETRY_STATUSES and attempt < attempts:
                earlier_attempt_may_have_acted = True
                self._pause_before_retry(operation, method, path, f"HTTP {response.status_code}", attempt, attempts)
                continue
            if response.status_code == 404 and method == "DELETE" and earlier_attempt_may_have_acted:
                return None
            if response.is_error:
                raise _error_from(response, operation, secrets)
            return response

    def _headers(self, operation: str, token: str | None = None) -> dict[str, str]:
        try:
            token = token or self._token_source.token()
        except ServiceTokenError as error:
            error.operation = operation
            raise
        return {"Authorization": f"Bearer {token}", "x-project-id": self.project_id}

    def _pause_before_retry(
        self, operation: str, method: str, path: str, reason: str, attempt: int, attempts: int,
    ) -> None:
        delay = self.backoff * (2 ** (attempt - 1))
        logger.warning(
            "Lakekeeper %s (%s %s) failed with %s; retry %d of %d in %.1f s",
            operation, method, path, reason, attempt, attempts - 1, delay,
        )
        time.sleep(delay)


def _error_from(response: httpx.Response, operation: str, secrets: tuple[str, ...]) -> LakekeeperError:
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


def _namespace_path(prefix: str, namespace: tuple[str, ...]) -> str:
    return f"/catalog/v1/{_segment(prefix)}/namespaces/{_segment(NAMESPACE_SEPARATOR.join(namespace))}"


def _table_path(prefix: str, table: TableIdentifier) -> str:
    return f"{_namespace_path(prefix, table.namespace)}/tables/{_segment(table.name)}"
