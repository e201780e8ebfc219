"""Tokens for Lakekeeper: the portal's service token (OAuth2 client credentials) and the
short-lived tokens an execution acts with (OAuth 2.0 Token Exchange, RFC 8693, narrowed to a
warehouse by scope).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from app.lakekeeper.errors import ServiceTokenError

logger = logging.getLogger(__name__)

# Scope of a token that may reach only one warehouse: `warehouse:<Lakekeeper warehouse id>`. A
# second narrowing layer that Lakeport's dev catalog enforces; Lakekeeper ignores it (its
# OpenFGA grants decide).
WAREHOUSE_SCOPE_PREFIX = "warehouse:"
# OAuth 2.0 Token Exchange (RFC 8693): the grant, and the token type asked for and presented.
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
# Lakekeeper names a user `<identity provider id>~<subject>`; its primary OpenID provider is `oidc`.
LAKEKEEPER_OIDC_PROVIDER_ID = "oidc"


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
        narrowing = (
            warehouse_scope(warehouse_id) if warehouse_id and self.narrow_to_warehouse else None
        )
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
                200,
                "ScopeNotGranted",
                f"the identity provider did not grant scope {narrowing} (granted: {granted or 'none'})",
                "user_token",
            )
        return ScopedToken(
            payload["access_token"], granted, float(payload.get("expires_in") or 300)
        )

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
        auth = None
        if self.auth_method == "client_secret_basic":
            auth = httpx.BasicAuth(self.client_id, self._client_secret)
        else:
            form = {**form, "client_id": self.client_id, "client_secret": self._client_secret}
        response = self._call_provider(
            operation, "POST", self._resolve_token_url(operation), data=form, auth=auth
        )
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
                    response.status_code,
                    "DiscoveryFailed",
                    f"{discovery_url} answered {response.status_code}",
                    operation,
                )
            self._token_url = response.json()["token_endpoint"]
        return self._token_url

    def _call_provider(
        self, operation: str, method: str, url: str, **kwargs: Any
    ) -> httpx.Response:
        try:
            return self._http.request(method, url, **kwargs)
        except httpx.TransportError as error:
            raise ServiceTokenError(
                None,
                "IdentityProviderUnreachable",
                f"{type(error).__name__}: {error}",
                operation,
            ) from None


def _oauth_error(response: httpx.Response) -> tuple[str, str]:
    try:
        payload = response.json()
        return str(payload.get("error", "TokenRequestFailed")), str(
            payload.get("error_description", "")
        )
    except ValueError:
        return "TokenRequestFailed", f"HTTP {response.status_code}"
