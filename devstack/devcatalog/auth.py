"""Bearer JWTs checked as Lakekeeper checks them: signed by a key from the issuer's JWKS
(found through OpenID discovery), issued by the configured issuer, for the configured audience.

Authorization follows Lakekeeper's OpenFGA authorizer, reduced to what Lakeport uses:
- the caller is the user `oidc~<sub>` (Lakekeeper's id for a subject of its primary provider);
- project admins (`DevCatalogConfig.project_admins`: the portal's service identity) may do
  everything in the project: create warehouses, manage them and their grants, read and write
  their tables;
- anyone else reaches a warehouse only through their grants on it (`WAREHOUSE_ACTIONS`): its
  owner may use and manage it; `describe` and `select` read; `create` and `modify` write.
  A warehouse the caller holds no grant on answers 404, as one that does not exist; an action
  its grants do not allow 403; the warehouse list shows only warehouses the caller holds a
  grant on.
Second layer, a stand-in's own: a token whose `scope` claim names warehouses
(`warehouse:<uuid>`, as the local identity provider narrows an execution's exchanged token)
reaches only those warehouses, whatever its holder's grants, and may read but not change them
through the Management API. Lakekeeper ignores such scopes; there the grants alone decide.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

import httpx
import jwt
from flask import g

from app.lakekeeper.tokens import WAREHOUSE_SCOPE_PREFIX, lakekeeper_user_id
from devstack.devcatalog.errors import CatalogError, warehouse_forbidden, warehouse_hidden

# Which warehouse grants allow what, as Lakekeeper's OpenFGA model (authz/openfga, warehouse.fga)
# derives them: `describe` is implied by `select`, `create` and `modify`, `select` by `modify`;
# renaming, (de)activating, rotating and deleting need `modify`; ownership implies them all.
WAREHOUSE_ACTIONS = {
    "describe": frozenset({"ownership", "describe", "select", "create", "modify"}),
    "read": frozenset({"ownership", "select", "modify"}),
    "write": frozenset({"ownership", "create", "modify"}),
    "manage": frozenset({"ownership", "modify"}),
    "manage_grants": frozenset({"ownership", "manage_grants"}),
}

# Asymmetric algorithms only: a token signed with a shared secret cannot be checked against a JWKS.
_ALGORITHMS = [
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
]


def unauthorized(message: str) -> CatalogError:
    return CatalogError(401, "UnauthorizedError", message)


class TokenVerifier:
    def __init__(self, issuer: str, audience: str) -> None:
        self.issuer = issuer.rstrip("/")
        self.audience = audience
        self._keys: jwt.PyJWKClient | None = None
        self._lock = threading.Lock()

    def _signing_keys(self) -> jwt.PyJWKClient:
        # Discovered on first use, so the catalog may start before the identity provider.
        with self._lock:
            if self._keys is None:
                try:
                    discovery = httpx.get(
                        f"{self.issuer}/.well-known/openid-configuration", timeout=5.0
                    )
                    jwks_uri = discovery.raise_for_status().json()["jwks_uri"]
                except (httpx.HTTPError, ValueError, KeyError):
                    raise CatalogError(
                        503,
                        "IdentityProviderUnavailable",
                        f"Cannot read the OpenID configuration of {self.issuer}",
                    ) from None
                self._keys = jwt.PyJWKClient(jwks_uri, cache_keys=True, lifespan=300, timeout=5)
            return self._keys

    def verify(self, authorization: str | None) -> dict:
        """The claims of the bearer token in an Authorization header; CatalogError 401 otherwise."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized("A bearer token is required (Authorization: Bearer <token>)")
        keys = self._signing_keys()
        try:
            signing_key = keys.get_signing_key_from_jwt(token.strip())
            return jwt.decode(
                token.strip(),
                signing_key.key,
                algorithms=_ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWKClientConnectionError:
            raise CatalogError(
                503,
                "IdentityProviderUnavailable",
                f"Cannot read the signing keys of {self.issuer}",
            ) from None
        except jwt.PyJWTError as error:
            raise unauthorized(f"Invalid bearer token: {error}") from None


@dataclass(frozen=True)
class TokenScope:
    """The warehouses a caller may reach: every one (`warehouses` is None), or only those its
    token's `warehouse:<uuid>` scopes name."""

    warehouses: frozenset[uuid.UUID] | None

    @classmethod
    def of(cls, claims: dict) -> "TokenScope":
        scope = claims.get("scope") or ""
        words = scope.split() if isinstance(scope, str) else [str(word) for word in scope]
        named = [
            word.removeprefix(WAREHOUSE_SCOPE_PREFIX)
            for word in words
            if word.startswith(WAREHOUSE_SCOPE_PREFIX)
        ]
        if not named:
            return cls(None)
        warehouses = set()
        for text in named:
            try:
                warehouses.add(uuid.UUID(text))
            except ValueError:
                pass  # a malformed one names no warehouse, yet the token stays restricted: fail closed
        return cls(frozenset(warehouses))

    @property
    def restricted(self) -> bool:
        return self.warehouses is not None

    def allows(self, warehouse_id: uuid.UUID) -> bool:
        return self.warehouses is None or warehouse_id in self.warehouses


@dataclass(frozen=True)
class Caller:
    """Who is calling: Lakekeeper's user id, whether a project admin, the token's scope and claims."""

    user_id: str
    project_admin: bool
    scope: TokenScope
    claims: dict

    @classmethod
    def of(cls, claims: dict, project_admins: frozenset[str]) -> "Caller":
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject.strip():
            raise unauthorized("The bearer token names no subject (`sub`)")
        user_id = lakekeeper_user_id(subject)
        return cls(user_id, user_id in project_admins, TokenScope.of(claims), claims)

    def may(self, action: str, relations: set[str]) -> bool:
        """Whether grants `relations` on a warehouse allow `action` (one of WAREHOUSE_ACTIONS)."""
        return self.project_admin or bool(relations & WAREHOUSE_ACTIONS[action])


def caller() -> Caller:
    """The current request's caller (set once the token is verified)."""
    return g.caller


def token_scope() -> TokenScope:
    """The scope of the current request's token."""
    return caller().scope


def may_reach(warehouse_id: uuid.UUID, action: str, relations: set[str]) -> bool:
    """Both layers: the token's warehouse scope, and the caller's grants (`relations`)."""
    return token_scope().allows(warehouse_id) and caller().may(action, relations)


def require_warehouse(warehouse_id: uuid.UUID, action: str, relations: set[str]) -> None:
    """Refuse as Lakekeeper v0.13.3's `require_warehouse_action` does
    (crates/lakekeeper/src/service/authz/warehouse.rs): a caller who cannot see the warehouse
    (its `can_use`, which is `describe` in authz/openfga/v4.7/components/warehouse.fga; here also
    a warehouse outside the token's scope) gets 404 `NoSuchWarehouseException`, whether the
    warehouse exists or not; one who sees it but may not do `action` gets 403
    `WarehouseActionForbidden`."""
    if not may_reach(warehouse_id, "describe", relations):
        raise warehouse_hidden(warehouse_id)
    if not caller().may(action, relations):
        raise warehouse_forbidden(
            f"Warehouse action `{action}` forbidden on warehouse `{warehouse_id}`"
        )
