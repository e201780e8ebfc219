"""The local stack's OpenID Connect provider (node-oidc-provider, devstack/oidc/server.mjs).

It signs in the test users with a real password form, serves the portal's authorization-code
flow (PKCE S256) and the service client's client-credentials grant, and issues JWT access
tokens whose audience is the catalog's (default `lakekeeper`). The service client may also
exchange its own token for one acting as a user (OAuth 2.0 Token Exchange, RFC 8693:
`subject_token` = its client-credentials token, `requested_subject` = the user's `sub`,
`audience` = the catalog's), one per execution: `sub` is the user's, `act.sub` the service
client's, valid `user_token_ttl` seconds, optionally narrowed by one `warehouse:<uuid>` scope
that the dev catalog enforces on top of the user's grants. Unknown subjects are refused.
The portal's client gets refresh tokens that live as long as the provider session; a refresh
grant's ID token carries the user's groups as they are at that moment. While it runs, a user's
groups can be changed, and the user disabled (then every grant of theirs, a refresh included, is
refused), through an administration endpoint only holders of `admin_secret` may call
(`change_user`), as an administrator changes a user at Keycloak.
The helpers at the end drive its pages with httpx, the way a browser would, for tests that need
a signed-in user.
"""

from __future__ import annotations

import json
import secrets
import uuid
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx

from devstack.process import ManagedProcess, http_ok

SERVER_SCRIPT = Path(__file__).parent / "oidc" / "server.mjs"

PORTAL_CLIENT_ID = "lakeport-portal"
SERVICE_CLIENT_ID = "lakeport-service"
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
# The OpenID scopes the portal may ask for; the catalog's `lakekeeper` scope is a resource
# scope, which client metadata does not list.
PORTAL_SCOPES = "openid profile email"

# Subjects derive from user names so that a user keeps the same `sub` across restarts.
_SUBJECT_NAMESPACE = uuid.UUID("3f0c5f9e-8a5e-4c1b-9a51-6d2f1f7c9b10")


@dataclass(frozen=True)
class TestUser:
    __test__ = False  # not a pytest test class, despite the name

    username: str
    password: str
    name: str
    email: str
    groups: tuple[str, ...] = ()  # sent as the `groups` claim (profile scope), as Keycloak can

    @property
    def sub(self) -> str:
        return str(uuid.uuid5(_SUBJECT_NAMESPACE, self.username))


TEST_USERS: dict[str, TestUser] = {
    user.username: user
    for user in (
        TestUser("alice", "wonderland", "Alice Liddell", "alice@example.test", ("analytics",)),
        TestUser("bob", "builder", "Bob Builder", "bob@example.test", ("analytics",)),
        TestUser("carol", "singer", "Carol Singer", "carol@example.test"),
        TestUser("olive", "operator", "Olive Operator", "olive@example.test", ("lakeport-admins",)),
    )
}


def portal_redirect_uri(portal_base_url: str) -> str:
    return f"{portal_base_url.rstrip('/')}/auth/callback"


def portal_post_logout_redirect_uri(portal_base_url: str) -> str:
    return f"{portal_base_url.rstrip('/')}/auth/logged-out"


@dataclass
class OidcProviderConfig:
    port: int
    portal_base_urls: list[str]
    portal_client_secret: str
    service_client_secret: str
    audience: str = "lakekeeper"
    # Lifetime of tokens exchanged for a user (other tokens live an hour).
    user_token_ttl: int = 3600
    # Subjects of users who cannot sign in (no password) but exist for token exchange: tests
    # that create users straight in the database run executions as them.
    passwordless_subjects: list[str] = field(default_factory=list)
    # Signs the provider's cookies; fresh per run since its sessions live in memory anyway.
    cookie_keys: list[str] = field(default_factory=lambda: [secrets.token_urlsafe(32)])
    # Opens the administration endpoint (`change_user`); fresh per run, known only to the stack.
    admin_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def server_config(self) -> dict:
        """The JSON document server.mjs reads from LAKEPORT_OIDC_CONFIG."""
        portal = {
            "client_id": PORTAL_CLIENT_ID,
            "client_secret": self.portal_client_secret,
            "client_name": "Lakeport",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "scope": PORTAL_SCOPES,
            "redirect_uris": [portal_redirect_uri(url) for url in self.portal_base_urls],
            "post_logout_redirect_uris": [
                portal_post_logout_redirect_uri(url) for url in self.portal_base_urls
            ],
            "token_endpoint_auth_method": "client_secret_basic",
        }
        service = {
            "client_id": SERVICE_CLIENT_ID,
            "client_secret": self.service_client_secret,
            "client_name": "Lakeport services",
            "grant_types": ["client_credentials", TOKEN_EXCHANGE_GRANT],
            "response_types": [],
            "redirect_uris": [],
            # Iceberg's REST clients (Spark, pyiceberg) send the secret in the form body.
            "token_endpoint_auth_method": "client_secret_post",
        }
        users = [
            {
                "sub": u.sub,
                "username": u.username,
                "password": u.password,
                "name": u.name,
                "email": u.email,
                "groups": list(u.groups),
            }
            for u in TEST_USERS.values()
        ] + [
            {
                "sub": sub,
                "username": sub,
                "password": None,
                "name": sub,
                "email": f"{sub}@example.test",
                "groups": [],
            }
            for sub in self.passwordless_subjects
        ]
        return {
            "port": self.port,
            "issuer": self.issuer,
            "audience": self.audience,
            "user_token_ttl": self.user_token_ttl,
            "token_exchange_clients": [SERVICE_CLIENT_ID],
            "cookie_keys": self.cookie_keys,
            "admin_secret": self.admin_secret,
            "clients": [portal, service],
            "users": users,
        }


def oidc_provider_process(config: OidcProviderConfig, log_dir: Path) -> ManagedProcess:
    """The provider as a not-yet-started process; ready once its discovery document answers."""
    return ManagedProcess(
        "oidc-provider",
        ["node", str(SERVER_SCRIPT)],
        log_dir=log_dir,
        env={"LAKEPORT_OIDC_CONFIG": json.dumps(config.server_config())},
        ready=http_ok(config.discovery_url),
    )


def change_user(
    config: OidcProviderConfig,
    username: str,
    *,
    groups: list[str] | None = None,
    enabled: bool | None = None,
    groups_claim: bool | None = None,
) -> dict:
    """Change a user at the running provider (their groups, whether they may sign in and be
    granted anything, whether their tokens carry the `groups` claim at all: False is a provider
    without the group-membership mapper); returns the user as the provider holds them now
    (`groups_claim` only while it is off)."""
    change = {
        key: value
        for key, value in (("groups", groups), ("enabled", enabled), ("groups_claim", groups_claim))
        if value is not None
    }
    response = httpx.put(
        f"{config.issuer}/lakeport-admin/users/{username}",
        json=change,
        timeout=10,
        headers={"Authorization": f"Bearer {config.admin_secret}"},
    )
    response.raise_for_status()
    return response.json()


# --- Driving the provider's pages with httpx -------------------------------------------


class ProviderPageError(RuntimeError):
    """The provider did not show the page the caller expected (e.g. no login form)."""


@dataclass
class _Form:
    id: str | None
    action: str
    fields: dict[str, str]


class _FormParser(HTMLParser):
    """Collects each form's id, action and named input values."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[_Form] = []
        self._current: _Form | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "form":
            self._current = _Form(attributes.get("id"), attributes.get("action") or "", {})
            self.forms.append(self._current)
        elif tag == "input" and self._current is not None and attributes.get("name"):
            self._current.fields[attributes["name"]] = attributes.get("value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def _form(page: httpx.Response, form_id: str | None = None) -> _Form:
    parser = _FormParser()
    parser.feed(page.text)
    for form in parser.forms:
        if form_id is None or form.id == form_id:
            return form
    raise ProviderPageError(
        f"no form {form_id or ''} on {page.url} (HTTP {page.status_code}):\n{page.text[:500]}"
    )


def _origin(url: str | httpx.URL) -> tuple[str, str]:
    parts = urlsplit(str(url))
    return parts.scheme, parts.netloc


def _follow_within_provider(client: httpx.Client, response: httpx.Response) -> httpx.Response:
    """Follow redirects while they stay on the provider's origin; stop at one that leaves it."""
    provider = _origin(response.request.url)
    while response.is_redirect:
        target = urljoin(str(response.request.url), response.headers["location"])
        if _origin(target) != provider:
            break
        response = client.get(target, follow_redirects=False)
    return response


def open_via_provider(client: httpx.Client, url: str) -> httpx.Response:
    """GET a provider URL (e.g. an authorization request) as a browser would, up to the page the
    provider shows or the redirect that sends the browser back to the client."""
    return _follow_within_provider(client, client.get(url, follow_redirects=False))


def _submit(
    client: httpx.Client, page: httpx.Response, form: _Form, fields: dict[str, str]
) -> httpx.Response:
    response = client.post(urljoin(str(page.url), form.action), data=fields, follow_redirects=False)
    return _follow_within_provider(client, response)


def login_via_form(
    client: httpx.Client, authorize_url: str, username: str, password: str
) -> httpx.Response:
    """Open `authorize_url`, sign in through the provider's login form, and return either the
    redirect back to the client (its Location holds `code` and `state`) or, if the credentials
    were refused, the re-rendered login page. The cookies stay in `client`."""
    page = open_via_provider(client, authorize_url)
    form = _form(page, "login-form")
    return _submit(client, page, form, {**form.fields, "username": username, "password": password})


def sign_in_portal_client(portal, username: str, password: str, next_path: str | None = None):
    """Sign a Flask test client of the portal in as a browser does: the portal sends it to this
    provider, it logs in on the provider's form, and the provider sends it back with a code.
    Returns the portal's answer to that callback (302 to the page asked for, when it worked)."""
    start = portal.get("/auth/login/start", query_string={"next": next_path} if next_path else {})
    if start.status_code != 302:
        raise RuntimeError(f"sign-in did not start: HTTP {start.status_code}")
    with httpx.Client(timeout=10) as browser:
        landing = login_via_form(browser, start.headers["Location"], username, password)
    if "Location" not in landing.headers:
        raise RuntimeError(f"the provider refused {username}'s sign-in")
    back = urlsplit(landing.headers["Location"])
    return portal.get(f"{back.path}?{back.query}")


def cancel_login_via_form(client: httpx.Client, authorize_url: str) -> httpx.Response:
    """Open `authorize_url` and press Cancel on the login page; returns the redirect back to the
    client, whose Location carries `error=access_denied`."""
    page = open_via_provider(client, authorize_url)
    form = _form(page, "cancel-form")
    return _submit(client, page, form, form.fields)


def logout_via_provider(client: httpx.Client, end_session_url: str) -> httpx.Response:
    """Open an RP-initiated logout URL and submit the confirmation a browser submits by itself;
    returns the redirect to the client's post_logout_redirect_uri (or the provider's
    signed-out page when none was given)."""
    page = open_via_provider(client, end_session_url)
    form = _form(page)
    return _submit(client, page, form, form.fields)
