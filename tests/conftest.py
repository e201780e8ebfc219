"""flaskr-style fixtures: `app`, `client` and `auth`, on top of the service fixtures in services.py."""

from __future__ import annotations

import secrets
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from app import create_app
from app.compute_units import handles
from app.compute_units import service as unit_service
from app.models import ComputeUnit, User, Warehouse
from app.ray_clusters.local import cluster_pids
from app.worker import Worker
from devstack.oidc_provider import TEST_USERS, login_via_form, sign_in_portal_client
from tests.factories import (
    lakehouse_config,
    make_user,
    register_warehouse,
    reload,
    set_groups,
    sign_in_as,
    start_unit,
)


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


# --------------------------------------------------------------------------- users and their units
@pytest.fixture
def lakehouse_app(portal_config, lakehouse):
    """The portal on the dev catalog and SeaweedFS (tests/factories.py: lakehouse_config); a
    module whose tests all need that overrides `app` with it."""
    return create_app(lakehouse_config(portal_config, lakehouse))


@pytest.fixture
def newcomer(client, db_engine) -> User:
    """A user made for the test, signed in to `client`; they start with nothing."""
    user = make_user(db_engine)
    sign_in_as(client, user)
    return user


@pytest.fixture(scope="module")
def e2e(portal_config, lakehouse, db_engine):
    """A newcomer with a real local compute unit and a real warehouse, both made through the
    portal, and a worker in this process: (app, client, user, unit id, warehouse id)."""
    app = create_app(lakehouse_config(portal_config, lakehouse, CU_WARM_SPARK_ON_START=True))
    background = Worker(app).start()
    client = app.test_client()
    user = make_user(db_engine)
    sign_in_as(client, user)
    warehouse_id = register_warehouse(client, lakehouse, "e2e")
    cu = start_unit(client, db_engine, "e2e")
    cu_id = cu.id
    with app.app_context():
        pids = cluster_pids(handles.handle_of(cu))
    yield app, client, user, cu_id, warehouse_id
    with app.app_context():
        unit_service.terminate(reload(db_engine, ComputeUnit, cu_id), reason="test over")
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    background.stop()


@pytest.fixture
def team(portal_config, lakehouse, db_engine):
    """An owner with a real warehouse, a member of a fresh group, and carol in no group; each
    with a client of their own: (app, group, {name: (user, client)}, warehouse)."""
    app = create_app(replace(portal_config, LAKEKEEPER_URL=lakehouse.catalog_url))
    group = f"analytics-{secrets.token_hex(3)}"
    people = {}
    for name, groups in (("owner", []), ("member", [group]), ("carol", [])):
        user = set_groups(db_engine, make_user(db_engine), groups)
        client = app.test_client()
        sign_in_as(client, user)
        people[name] = (user, client)
    warehouse_id = register_warehouse(
        people["owner"][1], lakehouse, f"shared-{secrets.token_hex(2)}"
    )
    return app, group, people, reload(db_engine, Warehouse, warehouse_id)
