"""Bearer JWTs checked as Lakekeeper checks them: signed by a key from the issuer's JWKS
(found through OpenID discovery), issued by the configured issuer, for the configured audience.

Authorization, a stand-in's own: a token whose `scope` claim names warehouses
(`warehouse:<uuid>`, as the local identity provider issues them for one execution) reaches
only those warehouses, and may read but not change them through the Management API; any other
valid token may do anything, like Lakekeeper's default allow-all authorizer (ownership is then
the portal's business). Lakekeeper itself knows no such scopes: with its OpenFGA authorizer the
equivalent is an identity per user with grants on that user's warehouses.
"""
from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

import httpx
import jwt
from flask import g

from app.lakekeeper import WAREHOUSE_SCOPE_PREFIX
from devstack.devcatalog.errors import CatalogError, warehouse_forbidden

# Asymmetric algorithms only: a token signed with a shared secret cannot be checked against a JWKS.
_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]


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
                    discovery = httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=5.0)
                    jwks_uri = discovery.raise_for_status().json()["jwks_uri"]
                except (httpx.HTTPError, ValueError, KeyError):
                    raise CatalogError(
                        503, "IdentityProviderUnavailable", f"Cannot read the OpenID configuration of {self.issuer}",
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
                token.strip(), signing_key.key, algorithms=_ALGORITHMS,
                audience=self.audience, issuer=self.issuer, options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWKClientConnectionError:
            raise CatalogError(
                503, "IdentityProviderUnavailable", f"Cannot read the signing keys of {self.issuer}",
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
        named = [word.removeprefix(WAREHOUSE_SCOPE_PREFIX) for word in words
                 if word.startswith(WAREHOUSE_SCOPE_PREFIX)]
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


def token_scope() -> TokenScope:
    """The scope of the current request's token (set once the token is verified)."""
    return g.token_scope


def require_warehouse(warehouse_id: uuid.UUID) -> None:
    """Refuse, as Lakekeeper's authorizer would, a warehouse outside the token's scope."""
    if not token_scope().allows(warehouse_id):
        raise warehouse_forbidden(f"Warehouse '{warehouse_id}' is outside the scope of this token")
