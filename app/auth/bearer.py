"""Bearer tokens from the identity provider, for the API: a JWT the provider signed (checked
against its published keys), from the configured issuer, for the portal's audience (its client
id), unexpired, naming a user who has signed in to Lakeport before."""

from __future__ import annotations

import logging
import threading

import httpx
import jwt
from flask import current_app
from sqlmodel import select

from app.db import get_db
from app.models import User

logger = logging.getLogger(__name__)

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]
_clients: dict[str, jwt.PyJWKClient] = {}
_clients_lock = threading.Lock()


def _keys() -> jwt.PyJWKClient:
    """The provider's signing keys (cached; fetched again for a key id not seen yet)."""
    issuer = current_app.config["OIDC_ISSUER"].rstrip("/")
    with _clients_lock:
        if issuer not in _clients:
            timeout = current_app.config["OIDC_TIMEOUT_SECONDS"]
            discovery = httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=timeout)
            discovery.raise_for_status()
            _clients[issuer] = jwt.PyJWKClient(
                discovery.json()["jwks_uri"], cache_keys=True, timeout=int(timeout)
            )
        return _clients[issuer]


TOKEN_ERRORS = (jwt.PyJWTError, httpx.HTTPError, KeyError, ValueError)


def verified_claims(text: str, require: tuple[str, ...] = ("exp", "iat", "sub")) -> dict:
    """The claims of a JWT the provider signed for this portal (issuer, audience, expiry checked);
    raises one of TOKEN_ERRORS otherwise."""
    key = _keys().get_signing_key_from_jwt(text)
    return jwt.decode(
        text,
        key.key,
        algorithms=ALGORITHMS,
        audience=current_app.config["OIDC_CLIENT_ID"],
        issuer=current_app.config["OIDC_ISSUER"],
        options={"require": list(require)},
        leeway=30,
    )


def user_for(text: str) -> User | None:
    """The user a provider's token names, if it is valid for this portal; None otherwise. The
    user's groups are those Lakeport holds (app/roles.py), not the token's; a suspended user is
    refused by the API (app/api/auth.py)."""
    try:
        claims = verified_claims(text)
    except TOKEN_ERRORS as error:
        logger.info("a bearer token was refused: %s", type(error).__name__)
        return None
    return (
        get_db()
        .exec(
            select(User).where(
                User.issuer == current_app.config["OIDC_ISSUER"], User.subject == claims["sub"]
            )
        )
        .first()
    )
