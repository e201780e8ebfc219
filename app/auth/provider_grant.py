"""The refresh token of a user's last sign-in, and asking the identity provider about the user
again with it (OAuth 2.0 refresh grant, RFC 6749 section 6; OpenID Connect Core 12.2: the answer's
ID token carries the user's claims as the provider sees them now, `groups` included).

The token is a secret: it is kept encrypted (Fernet, under a key derived from the portal's
SECRET_KEY), never logged, never shown, and dropped once it stops working. What a refusal means
is the provider's to say: `invalid_grant` (the user disabled or deleted, the session ended or
revoked, the token expired) is final; a provider that does not answer is not (docs/identity.md).
"""

from __future__ import annotations

import base64
import hashlib
import logging
from dataclasses import dataclass
from urllib.parse import quote

import httpx
import requests
from cryptography.fernet import Fernet, InvalidToken
from flask import current_app

from app.auth import bearer, oidc

logger = logging.getLogger(__name__)

_KEY_PURPOSE = b"lakeport refresh tokens at rest v1\0"


class ProviderRefused(Exception):
    """The provider refused the grant for good (`invalid_grant`): the user must sign in again."""


class ProviderUnavailable(Exception):
    """The provider could not be asked (`answered` False), or answered something unusable:
    nothing is known."""

    def __init__(self, message: str, answered: bool = True) -> None:
        super().__init__(message)
        self.answered = answered


@dataclass(frozen=True)
class Confirmation:
    """The provider's answer to a refresh: the user's claims now, and the refresh token to keep
    (a rotated one, or the same when the provider does not rotate)."""

    claims: dict
    refresh_token: str


def _fernet() -> Fernet:
    secret = str(current_app.config["SECRET_KEY"]).encode()
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(_KEY_PURPOSE + secret).digest()))


def seal(refresh_token: str | None) -> str | None:
    return _fernet().encrypt(refresh_token.encode()).decode() if refresh_token else None


def unseal(sealed: str | None) -> str | None:
    """The token, or None when there is none or it was sealed under another SECRET_KEY."""
    if not sealed:
        return None
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        return None


def _client_auth() -> str:
    # client_secret_basic: id and secret form-encoded before Base64 (RFC 6749 section 2.3.1).
    pair = f"{quote(current_app.config['OIDC_CLIENT_ID'], safe='')}:{quote(current_app.config['OIDC_CLIENT_SECRET'], safe='')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def _token_endpoint() -> str:
    try:
        return oidc.client().load_server_metadata()["token_endpoint"]
    except (requests.RequestException, KeyError, ValueError) as error:
        raise ProviderUnavailable(
            f"no token endpoint: {type(error).__name__}", answered=False
        ) from None


def http_client() -> httpx.Client:
    """One client for a pass's requests (a TLS context is costly to make: ~0.17 s each)."""
    return httpx.Client(timeout=current_app.config["OIDC_TIMEOUT_SECONDS"])


def confirm(subject: str, refresh_token: str, http: httpx.Client) -> Confirmation:
    """Ask the provider about `subject` again with its refresh token. Raises ProviderRefused or
    ProviderUnavailable."""
    try:
        answer = http.post(
            _token_endpoint(),
            headers={"Authorization": _client_auth(), "Accept": "application/json"},
            data={"grant_type": "refresh_token", "refresh_token": refresh_token},
        )
    except httpx.HTTPError as error:
        raise ProviderUnavailable(type(error).__name__, answered=False) from None
    try:
        body = answer.json()
    except ValueError:
        body = {}
    if (
        answer.status_code == 400
        and isinstance(body, dict)
        and body.get("error") == "invalid_grant"
    ):
        raise ProviderRefused("invalid_grant")
    if answer.status_code != 200 or not isinstance(body, dict):
        error = body.get("error") if isinstance(body, dict) else None
        raise ProviderUnavailable(f"HTTP {answer.status_code} {error or ''}".strip())
    if not isinstance(body.get("id_token"), str):
        # Without an ID token nothing says who the groups are of (scope `openid` was asked at sign-in).
        raise ProviderUnavailable("the refresh answered no ID token")
    try:
        claims = bearer.verified_claims(body["id_token"], require=("exp", "iat", "sub"))
    except bearer.TOKEN_ERRORS as error:
        raise ProviderUnavailable(f"its ID token was refused: {type(error).__name__}") from None
    if claims.get("sub") != subject:  # OpenID Connect Core 12.2: the same subject as at sign-in
        raise ProviderUnavailable("its ID token names another subject")
    rotated = body.get("refresh_token")
    return Confirmation(claims, rotated if isinstance(rotated, str) and rotated else refresh_token)
