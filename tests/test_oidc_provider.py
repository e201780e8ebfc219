"""The local OpenID Connect provider, driven over HTTP as the portal and the catalog use it."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import uuid
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest

from devstack.oidc_provider import (
    PORTAL_CLIENT_ID,
    SERVICE_CLIENT_ID,
    TEST_USERS,
    TOKEN_EXCHANGE_GRANT,
    OidcProviderConfig,
    cancel_login_via_form,
    login_via_form,
    logout_via_provider,
    oidc_provider_process,
    open_via_provider,
    portal_post_logout_redirect_uri,
    portal_redirect_uri,
)
from devstack.process import free_port

PORTAL_SECRET = "portal-secret-for-tests"
SERVICE_SECRET = "service-secret-for-tests"
PORTAL_BASE_URL = "http://127.0.0.1:5999"  # never contacted: the flows stop at the redirect to it
REDIRECT_URI = portal_redirect_uri(PORTAL_BASE_URL)
USER_TOKEN_TTL = 900  # not the default, to show it is configurable
PASSWORDLESS_SUBJECT = "tester-without-password"


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> OidcProviderConfig:
    config = OidcProviderConfig(
        port=free_port(),
        portal_base_urls=[PORTAL_BASE_URL],
        portal_client_secret=PORTAL_SECRET,
        service_client_secret=SERVICE_SECRET,
        user_token_ttl=USER_TOKEN_TTL,
        passwordless_subjects=[PASSWORDLESS_SUBJECT],
    )
    provider = oidc_provider_process(config, tmp_path_factory.mktemp("oidc-logs"))
    provider.start(timeout=20)
    try:
        yield config
    finally:
        provider.stop()


@pytest.fixture(scope="module")
def discovery(config) -> dict:
    return httpx.get(config.discovery_url).raise_for_status().json()


@pytest.fixture(scope="module")
def signing_keys(discovery) -> jwt.PyJWKClient:
    return jwt.PyJWKClient(discovery["jwks_uri"])


@pytest.fixture
def user_agent():
    """A cookie-keeping client in the role of the user's browser (pytest-playwright owns `browser`)."""
    with httpx.Client() as client:
        yield client


def verify(token: str, keys: jwt.PyJWKClient, config: OidcProviderConfig, audience: str) -> dict:
    return jwt.decode(
        token,
        keys.get_signing_key_from_jwt(token).key,
        algorithms=["RS256"],
        audience=audience,
        issuer=config.issuer,
    )


@dataclass
class AuthorizationRequest:
    url: str
    state: str
    nonce: str
    code_verifier: str


def authorization_request(
    discovery: dict,
    pkce: bool = True,
    scope: str = "openid profile email",
) -> AuthorizationRequest:
    state, nonce, verifier = (
        secrets.token_urlsafe(16),
        secrets.token_urlsafe(16),
        secrets.token_urlsafe(48),
    )
    params = {
        "client_id": PORTAL_CLIENT_ID,
        "response_type": "code",
        "redirect_uri": REDIRECT_URI,
        "scope": scope,
        "state": state,
        "nonce": nonce,
    }
    if pkce:
        challenge = (
            base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
            .rstrip(b"=")
            .decode()
        )
        params |= {"code_challenge": challenge, "code_challenge_method": "S256"}
    return AuthorizationRequest(
        f"{discovery['authorization_endpoint']}?{urlencode(params)}", state, nonce, verifier
    )


def redirect_params(response: httpx.Response, expected_target: str) -> dict[str, str]:
    assert response.is_redirect, (
        f"expected a redirect to {expected_target}, got HTTP {response.status_code}"
    )
    location = response.headers["location"]
    assert location.split("?")[0] == expected_target
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


def exchange_code(discovery: dict, request: AuthorizationRequest, code: str) -> httpx.Response:
    return httpx.post(
        discovery["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT_URI,
            "code_verifier": request.code_verifier,
        },
        auth=(PORTAL_CLIENT_ID, PORTAL_SECRET),
    )


def client_credentials(
    discovery: dict, secret: str = SERVICE_SECRET, **form: str
) -> httpx.Response:
    return httpx.post(
        discovery["token_endpoint"],
        data={
            "grant_type": "client_credentials",
            "client_id": SERVICE_CLIENT_ID,
            "client_secret": secret,
            **form,
        },
    )


ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


def exchange(
    discovery: dict, subject_token: str, requested_subject: str, **form: str
) -> httpx.Response:
    """The service client's token exchange (RFC 8693) for a token acting as `requested_subject`."""
    return httpx.post(
        discovery["token_endpoint"],
        data={
            "grant_type": TOKEN_EXCHANGE_GRANT,
            "client_id": SERVICE_CLIENT_ID,
            "client_secret": SERVICE_SECRET,
            "subject_token": subject_token,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            "requested_subject": requested_subject,
            "audience": "lakekeeper",
            **form,
        },
    )


@pytest.fixture(scope="module")
def service_token(discovery) -> str:
    return client_credentials(discovery).raise_for_status().json()["access_token"]


def refresh(discovery: dict, refresh_token: str) -> httpx.Response:
    return httpx.post(
        discovery["token_endpoint"],
        data={"grant_type": "refresh_token", "refresh_token": refresh_token},
        auth=(PORTAL_CLIENT_ID, PORTAL_SECRET),
    )


def sign_in(user_agent: httpx.Client, discovery: dict, username: str):
    request = authorization_request(discovery)
    response = login_via_form(user_agent, request.url, username, TEST_USERS[username].password)
    params = redirect_params(response, REDIRECT_URI)
    assert params["state"] == request.state
    return request, params["code"]


def test_discovery_describes_the_provider(config, discovery):
    assert discovery["issuer"] == config.issuer
    assert discovery["code_challenge_methods_supported"] == ["S256"]
    assert {"authorization_code", "client_credentials", "refresh_token"} <= set(
        discovery["grant_types_supported"]
    )
    assert {"openid", "profile", "email"} <= set(discovery["scopes_supported"])
    assert discovery["end_session_endpoint"].startswith(config.issuer)


def test_client_credentials_issue_a_signed_jwt_for_the_catalog(config, discovery, signing_keys):
    response = client_credentials(discovery)
    assert response.status_code == 200, response.text

    claims = verify(response.json()["access_token"], signing_keys, config, audience="lakekeeper")
    assert claims["aud"] == "lakekeeper"
    assert claims["sub"] == SERVICE_CLIENT_ID
    assert "scope" not in claims  # reaches every warehouse: the portal's own service token
    assert claims["exp"] - claims["iat"] == 3600


def test_client_credentials_with_a_wrong_secret_are_refused(discovery):
    response = client_credentials(discovery, secret="wrong")
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


@pytest.mark.parametrize("subject", [TEST_USERS["alice"].sub, PASSWORDLESS_SUBJECT])
def test_the_service_client_exchanges_its_token_for_one_acting_as_a_user(
    config, discovery, signing_keys, service_token, subject
):
    warehouse = uuid.uuid4()
    response = exchange(discovery, service_token, subject, scope=f"warehouse:{warehouse}")
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["issued_token_type"] == ACCESS_TOKEN_TYPE and answer["token_type"] == "Bearer"

    claims = verify(answer["access_token"], signing_keys, config, audience="lakekeeper")
    assert claims["sub"] == subject != SERVICE_CLIENT_ID
    assert claims["act"] == {"sub": SERVICE_CLIENT_ID} and claims["client_id"] == SERVICE_CLIENT_ID
    assert claims["scope"] == answer["scope"] == f"warehouse:{warehouse}"
    assert answer["expires_in"] == claims["exp"] - claims["iat"] == USER_TOKEN_TTL

    unnarrowed = exchange(discovery, service_token, subject).raise_for_status().json()
    assert "scope" not in verify(
        unnarrowed["access_token"], signing_keys, config, audience="lakekeeper"
    )


def test_exchanged_tokens_carry_the_users_name_for_the_catalog(
    config, discovery, signing_keys, service_token
):
    alice = TEST_USERS["alice"]
    token = exchange(discovery, service_token, alice.sub).raise_for_status().json()["access_token"]
    claims = verify(token, signing_keys, config, audience="lakekeeper")
    assert (claims["name"], claims["email"]) == (alice.name, alice.email)


def test_a_forged_or_foreign_subject_token_is_refused(discovery, service_token, user_agent):
    alice = TEST_USERS["alice"].sub
    header, payload, signature = service_token.split(".")
    claims = jwt.decode(service_token, options={"verify_signature": False})
    extended = {**claims, "exp": claims["exp"] + 86400}  # a longer life, under the old signature
    forged = base64.urlsafe_b64encode(json.dumps(extended).encode()).rstrip(b"=").decode()
    request, code = sign_in(user_agent, discovery, "bob")
    bobs_token = exchange_code(discovery, request, code).raise_for_status().json()["access_token"]
    for subject_token in (f"{header}.{forged}.{signature}", "not-a-jwt", bobs_token):
        response = exchange(discovery, subject_token, alice)
        assert (response.status_code, response.json()["error"]) == (400, "invalid_grant")


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"requested_subject": "nobody-knows-me"}, "invalid_grant"),
        ({"requested_subject": ""}, "invalid_request"),
        ({"audience": "another-service"}, "invalid_target"),
        ({"subject_token_type": "urn:ietf:params:oauth:token-type:id_token"}, "invalid_request"),
        (
            {"requested_token_type": "urn:ietf:params:oauth:token-type:refresh_token"},
            "invalid_request",
        ),
        ({"scope": f"warehouse:{uuid.uuid4()} warehouse:{uuid.uuid4()}"}, "invalid_scope"),
        ({"scope": "warehouse:not-a-uuid"}, "invalid_scope"),
        ({"scope": "openid profile"}, "invalid_scope"),
    ],
    ids=[
        "unknown-subject",
        "no-subject",
        "other-audience",
        "id-token",
        "refresh-token",
        "two-warehouses",
        "malformed-warehouse",
        "other-scopes",
    ],
)
def test_a_token_exchange_is_refused_rather_than_widened(discovery, service_token, form, error):
    response = exchange(
        discovery, service_token, **{"requested_subject": TEST_USERS["alice"].sub, **form}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == error


def test_only_the_service_client_may_exchange_tokens(discovery, service_token):
    response = httpx.post(
        discovery["token_endpoint"],
        auth=(PORTAL_CLIENT_ID, PORTAL_SECRET),
        data={
            "grant_type": TOKEN_EXCHANGE_GRANT,
            "subject_token": service_token,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_subject": TEST_USERS["alice"].sub,
            "audience": "lakekeeper",
        },
    )
    assert response.status_code == 400
    assert "grant type is not allowed for this client" in response.json()["error_description"]
    wrong_secret = exchange(
        discovery, service_token, TEST_USERS["alice"].sub, client_secret="wrong"
    )
    assert wrong_secret.status_code == 401


@pytest.mark.parametrize(
    "scope", [f"warehouse:{uuid.uuid4()}", "warehouse:not-a-uuid", "lakekeeper warehouse:"]
)
def test_service_tokens_never_carry_warehouse_scopes(discovery, scope):
    # Refused, not dropped: a warehouse scope belongs to a token acting as a user.
    response = client_credentials(discovery, scope=scope)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_scope"


def test_users_without_a_password_cannot_sign_in(discovery, user_agent):
    request = authorization_request(discovery)
    response = login_via_form(user_agent, request.url, PASSWORDLESS_SUBJECT, "")
    assert not response.is_redirect
    assert "Invalid username or password" in response.text


def test_users_cannot_ask_for_warehouse_scopes_at_sign_in(discovery, user_agent):
    request = authorization_request(discovery, scope=f"openid warehouse:{uuid.uuid4()}")

    params = redirect_params(open_via_provider(user_agent, request.url), REDIRECT_URI)
    assert params["error"] == "invalid_scope"
    assert "code" not in params


def test_code_flow_with_pkce_signs_alice_in(config, discovery, signing_keys, user_agent):
    alice = TEST_USERS["alice"]
    request, code = sign_in(user_agent, discovery, "alice")

    tokens = exchange_code(discovery, request, code)
    assert tokens.status_code == 200, tokens.text
    tokens = tokens.json()

    identity = verify(tokens["id_token"], signing_keys, config, audience=PORTAL_CLIENT_ID)
    assert identity["sub"] == alice.sub
    assert identity["nonce"] == request.nonce
    assert (identity["name"], identity["email"], identity["preferred_username"]) == (
        alice.name,
        alice.email,
        "alice",
    )

    access = verify(tokens["access_token"], signing_keys, config, audience="lakekeeper")
    assert access["sub"] == alice.sub
    assert access["client_id"] == PORTAL_CLIENT_ID

    refreshed = refresh(discovery, tokens["refresh_token"])
    assert refreshed.status_code == 200, refreshed.text
    assert (
        verify(refreshed.json()["access_token"], signing_keys, config, audience="lakekeeper")["sub"]
        == alice.sub
    )


def test_a_code_is_redeemed_only_with_its_pkce_verifier(discovery, user_agent):
    request, code = sign_in(user_agent, discovery, "bob")
    request.code_verifier = secrets.token_urlsafe(48)

    response = exchange_code(discovery, request, code)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"


def test_authorization_without_pkce_is_refused(discovery, user_agent):
    request = authorization_request(discovery, pkce=False)

    params = redirect_params(open_via_provider(user_agent, request.url), REDIRECT_URI)
    assert params["error"] == "invalid_request"
    assert "code" not in params


def test_wrong_password_shows_the_form_again_and_issues_no_code(discovery, user_agent):
    request = authorization_request(discovery)

    response = login_via_form(user_agent, request.url, "alice", "not-her-password")

    assert not response.is_redirect
    assert "Invalid username or password." in response.text
    assert 'name="password"' in response.text
    assert "not-her-password" not in response.text


def test_cancel_returns_access_denied_to_the_portal(discovery, user_agent):
    request = authorization_request(discovery)

    params = redirect_params(cancel_login_via_form(user_agent, request.url), REDIRECT_URI)

    assert params["error"] == "access_denied"
    assert params["state"] == request.state
    assert "code" not in params


def test_logout_ends_the_provider_session(discovery, user_agent):
    request, code = sign_in(user_agent, discovery, "alice")
    tokens = exchange_code(discovery, request, code).json()
    # While the provider session lives, authorizing again needs no password.
    again = authorization_request(discovery)
    assert "code" in redirect_params(open_via_provider(user_agent, again.url), REDIRECT_URI)

    logged_out_uri = portal_post_logout_redirect_uri(PORTAL_BASE_URL)
    end_session = (
        discovery["end_session_endpoint"]
        + "?"
        + urlencode(
            {
                "id_token_hint": tokens["id_token"],
                "post_logout_redirect_uri": logged_out_uri,
                "state": "bye",
            }
        )
    )
    assert redirect_params(logout_via_provider(user_agent, end_session), logged_out_uri) == {
        "state": "bye"
    }

    page = open_via_provider(user_agent, authorization_request(discovery).url)
    assert page.status_code == 200
    assert 'id="login-form"' in page.text
    # Tokens from the ended session are dead too.
    assert refresh(discovery, tokens["refresh_token"]).json()["error"] == "invalid_grant"
