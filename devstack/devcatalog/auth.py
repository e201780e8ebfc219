"""Bearer JWTs checked as Lakekeeper checks them: signed by a key from the issuer's JWKS
(found through OpenID discovery), issued by the configured issuer, for the configured audience.

Like Lakekeeper's default allow-all authorizer, any caller with a valid token may do anything;
ownership is the portal's business.
"""
from __future__ import annotations

import threading

import httpx
import jwt

from devstack.devcatalog.errors import CatalogError

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
