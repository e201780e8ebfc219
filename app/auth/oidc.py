"""The portal's OpenID Connect client (authlib): registration, sign-in and sign-out URLs.

Authorization code flow with PKCE (S256); authlib adds and checks `state` and `nonce`.
Endpoints come from the issuer's discovery document. Of the tokens only the refresh token is
kept, encrypted in the user's row (app/auth/provider_grant.py), so that the worker can ask the
provider about the user again; a signed cookie is not a place for tokens.
"""

from __future__ import annotations

from urllib.parse import urlencode

import requests
from authlib.integrations.base_client import OAuthError
from authlib.integrations.flask_client import OAuth
from flask import Flask, current_app

# What can go wrong talking to the provider, as opposed to a bad answer from it.
PROVIDER_UNREACHABLE = (requests.ConnectionError, requests.Timeout)
UNREACHABLE_TITLE = "Identity provider unreachable"


class SignInError(Exception):
    """Sign-in failed; `title` and `message` are safe to show the user."""

    def __init__(self, title: str, message: str, status: int = 400):
        super().__init__(message)
        self.title, self.message, self.status = title, message, status


def init_app(app: Flask) -> None:
    # One registry per app: authlib caches clients, and each app has its own provider settings.
    oauth = OAuth(app)
    app.extensions["lakeport_oidc"] = oauth
    oauth.register(
        "oidc",
        client_id=app.config["OIDC_CLIENT_ID"],
        client_secret=app.config["OIDC_CLIENT_SECRET"],
        server_metadata_url=discovery_url(app.config["OIDC_ISSUER"]),
        client_kwargs={
            "scope": app.config["OIDC_SCOPES"],
            "code_challenge_method": "S256",
            "timeout": app.config["OIDC_TIMEOUT_SECONDS"],
        },
    )


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def client():
    return current_app.extensions["lakeport_oidc"].create_client("oidc")


def _asking_provider(call):
    try:
        return call()
    except PROVIDER_UNREACHABLE as exc:
        raise SignInError(
            UNREACHABLE_TITLE,
            "The sign-in service is not answering right now. Please try again in a minute.",
            503,
        ) from exc


def provider_metadata() -> dict:
    return _asking_provider(lambda: client().load_server_metadata())


def _portal_url(path: str) -> str:
    return current_app.config["PUBLIC_URL"].rstrip("/") + path


def start_sign_in():
    """The redirect to the provider's authorization endpoint."""
    provider_metadata()
    return _asking_provider(lambda: client().authorize_redirect(_portal_url("/auth/callback")))


CALLBACK_ERRORS = {
    "access_denied": (
        "Sign-in cancelled",
        "You cancelled the sign-in, or did not give consent. Sign in again whenever you are ready.",
    ),
    "login_required": ("Sign-in required", "The identity provider asked you to sign in again."),
}


def finish_sign_in(args) -> tuple[dict, str | None]:
    """Exchange the callback's code for tokens; return the verified ID-token claims and the
    refresh token (None when the provider gave none)."""
    if "error" in args:
        raise SignInError(
            *CALLBACK_ERRORS.get(
                args["error"],
                (
                    "Sign-in failed",
                    "The identity provider reported an error and did not sign you in.",
                ),
            )
        )
    try:
        token = client().authorize_access_token()
    except PROVIDER_UNREACHABLE as exc:
        raise SignInError(
            UNREACHABLE_TITLE,
            "The sign-in service stopped answering while signing you in. Please try again.",
            503,
        ) from exc
    except OAuthError as exc:
        if exc.error == "mismatching_state":
            raise SignInError(
                "Sign-in expired",
                "This sign-in link is no longer valid (it was used already, or it expired). "
                "Please sign in again.",
            ) from exc
        raise SignInError(
            "Sign-in failed",
            "The identity provider did not accept this sign-in "
            f"({exc.error or 'unknown error'}). Please sign in again.",
        ) from exc
    claims = token.get("userinfo")
    if not claims or not claims.get("sub"):
        raise SignInError("Sign-in failed", "The identity provider sent no identity.")
    refresh_token = token.get("refresh_token")
    return dict(claims), refresh_token if isinstance(refresh_token, str) and refresh_token else None


def sign_out_url() -> str | None:
    """The provider's RP-initiated logout URL, or None where the provider has none."""
    try:
        endpoint = provider_metadata().get("end_session_endpoint")
    except SignInError:
        return None
    if not endpoint:
        return None
    query = urlencode(
        {
            "client_id": current_app.config["OIDC_CLIENT_ID"],
            "post_logout_redirect_uri": _portal_url("/auth/logged-out"),
        }
    )
    return f"{endpoint}?{query}"


def provider_reachable() -> bool:
    try:
        response = requests.get(
            discovery_url(current_app.config["OIDC_ISSUER"]),
            timeout=current_app.config["OIDC_TIMEOUT_SECONDS"],
        )
    except requests.RequestException:
        return False
    return response.ok
