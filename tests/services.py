"""Service fixtures shared by tests/ and e2e/ (registered in the top-level conftest.py):
a fresh PostgreSQL database per run and the real local identity provider.

Fixtures are session-scoped and lazy, so a run that needs a service starts it once and
a run that needs none starts none.
"""
from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from app.config import PROJECT_ROOT, Config
from app.db import make_engine, upgrade_database
from devstack.oidc_provider import OidcProviderConfig, oidc_provider_process
from devstack.database import drop_postgres_database, fresh_postgres_database
from devstack.process import free_port

# The in-process portal (Flask test client) pretends to live here; the provider
# redirects there, and the tests hand the redirect to the test client.
IN_PROCESS_PORTAL_URL = "http://127.0.0.1:5999"


@pytest.fixture(scope="session")
def project_root() -> Path:
    return PROJECT_ROOT


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lakeport-run")


@pytest.fixture(scope="session")
def database_url():
    """A fresh, migrated PostgreSQL database for this test run, dropped afterwards."""
    name, url = fresh_postgres_database("lakeport_test")
    upgrade_database(url)
    yield url
    drop_postgres_database(name)


@pytest.fixture(scope="session")
def db_engine(database_url):
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def oidc_provider(run_dir):
    """The real OpenID Connect provider (npm oidc-provider) with test users alice and bob."""
    config = OidcProviderConfig(
        port=free_port(),
        portal_base_urls=[IN_PROCESS_PORTAL_URL],
        portal_client_secret=secrets.token_urlsafe(24),
        service_client_secret=secrets.token_urlsafe(24),
    )
    process = oidc_provider_process(config, run_dir / "logs").start()
    yield config
    process.stop()


@pytest.fixture(scope="session")
def portal_config(database_url, oidc_provider) -> Config:
    return Config(
        SECRET_KEY=secrets.token_hex(16),
        DATABASE_URL=database_url,
        PUBLIC_URL=IN_PROCESS_PORTAL_URL,
        OIDC_ISSUER=oidc_provider.issuer,
        OIDC_CLIENT_SECRET=oidc_provider.portal_client_secret,
        LAKEKEEPER_CLIENT_SECRET=oidc_provider.service_client_secret,
        TESTING=True,
    )


