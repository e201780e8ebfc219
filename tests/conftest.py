"""flaskr-style fixtures: `app`, `client` and `auth`, on top of the service fixtures in services.py."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest

from app import create_app
from devstack.oidc_provider import TEST_USERS, login_via_form, sign_in_portal_client


@pytest.fixture
def closed_port():
    """A loopback port that refuses connections for the whole test: bound, never listening, so
    no other process (a Ray worker, a service another test starts) can take it in the meantime,
    as one merely found free could be."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def app(portal_config):
    return create_app(portal_config)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def worker(app):
    """The background work (app/worker.py: unit starts and stops, executions, sample data, the
    supervisor), run in this process for the tests that need it; web requests start none."""
    from app.worker import Worker

    running = Worker(app).start()
    yield running
    running.stop()


@dataclass
class AuthActions:
    """Signs users in and out of the in-process portal through the real provider."""

    client: object
    passwords: dict[str, str]

    def start(self, next_path: str | None = None) -> str:
        """Begin sign-in at the portal; return the provider's authorization URL."""
        query = {"next": next_path} if next_path else {}
        response = self.client.get("/auth/login/start", query_string=query)
        assert response.status_code == 302, response.data[:500]
        return response.headers["Location"]

    def provider_login(self, authorize_url: str, username: str, password: str) -> httpx.Response:
        with httpx.Client(timeout=10) as browser:
            return login_via_form(browser, authorize_url, username, password)

    def callback(self, redirect_url: str):
        parts = urlsplit(redirect_url)
        return self.client.get(f"{parts.path}?{parts.query}")

    def login(self, username: str = "alice", next_path: str | None = None):
        return sign_in_portal_client(self.client, username, self.passwords[username], next_path)

    def logout(self):
        return self.client.post("/auth/logout", data={"csrf_token": self.csrf_token()})

    def csrf_token(self) -> str:
        page = self.client.get("/").get_data(as_text=True)
        marker = '"X-CSRFToken": "'
        start = page.index(marker) + len(marker)
        return page[start : page.index('"', start)]


@pytest.fixture
def auth(client):
    return AuthActions(client, {name: user.password for name, user in TEST_USERS.items()})
