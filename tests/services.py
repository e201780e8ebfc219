"""Service fixtures shared by tests/ and e2e/ (registered in the top-level conftest.py):
a fresh PostgreSQL database per run, the real local identity provider, and the lakehouse
(real SeaweedFS behind the Lakekeeper-compatible dev catalog).

Fixtures are session-scoped and lazy, so a run that needs a service starts it once and
a run that needs none starts none.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography.fernet import Fernet

from app.config import PROJECT_ROOT, Config
from app.db import make_engine, upgrade_database
from app.network_policy import NetworkPolicy
from devstack.database import drop_postgres_database, fresh_postgres_database_with_roles
from devstack.devcatalog import DevCatalogConfig, devcatalog_process
from devstack.oidc_provider import SERVICE_CLIENT_ID, OidcProviderConfig, oidc_provider_process
from devstack.process import free_port
from devstack.seaweedfs import SeaweedConfig, start_seaweedfs_on_free_ports

# Users that tests create straight in the database (no sign-in) still need a subject the identity
# provider knows: registering a warehouse and running an execution exchange a token for them.
TEST_SUBJECTS = [f"tester-{number:03d}" for number in range(400)]
_unused_test_subjects = iter(TEST_SUBJECTS)


def known_test_subject() -> str:
    """A subject of the session's identity provider that no other user of this run has."""
    return next(_unused_test_subjects)


# The in-process portal (Flask test client) pretends to live here; the provider
# redirects there, and the tests hand the redirect to the test client.
IN_PROCESS_PORTAL_URL = "http://127.0.0.1:5999"
# The tests' storage (SeaweedFS) is on loopback.
LOOPBACK_ALLOWED = NetworkPolicy(allow_loopback=True)


@pytest.fixture(scope="session")
def project_root() -> Path:
    return PROJECT_ROOT


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lakeport-run")


@pytest.fixture(scope="session")
def database_urls():
    """A fresh PostgreSQL database for this test run with its two roles, as deployed, migrated by
    its owner: (the portal's URL, the owner's URL). Dropped afterwards, with its roles."""
    name, portal_url, owner_url = fresh_postgres_database_with_roles("lakeport_test")
    upgrade_database(owner_url, portal_url=portal_url)
    yield portal_url, owner_url
    drop_postgres_database(name)


@pytest.fixture(scope="session")
def database_url(database_urls):
    """The portal's role (app/database_roles.py): the tests' portals, workers and rows use it."""
    return database_urls[0]


@pytest.fixture(scope="session")
def owner_database_url(database_urls):
    """The role that owns the tables, for what only a migration may do."""
    return database_urls[1]


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
        passwordless_subjects=TEST_SUBJECTS,
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
        # Most tests' units never run Spark: they would only load the two cores. Tests that
        # run executions turn it on.
        CU_WARM_SPARK_ON_START=False,
        OUTBOUND_ALLOW_LOOPBACK=True,
        # The in-process worker (the `worker` fixture) reacts fast; a dead one's work is taken over soon.
        WORKER_POLL_SECONDS=0.2,
        WORKER_LEASE_SECONDS=10.0,
        TESTING=True,
    )


@pytest.fixture(scope="session")
def seaweedfs(run_dir):
    """Real SeaweedFS: S3 with SigV4 identities, and its Iceberg REST catalog."""
    config, process = start_seaweedfs_on_free_ports(run_dir / "seaweedfs", run_dir / "logs")
    yield config
    process.stop()


@pytest.fixture(scope="session")
def devcatalog(seaweedfs, oidc_provider, run_dir):
    """The Lakekeeper-compatible dev catalog (a development stand-in for Lakekeeper)."""
    config = DevCatalogConfig.for_seaweedfs(
        seaweedfs,
        port=free_port(),
        oidc_issuer=oidc_provider.issuer,
        data_dir=run_dir / "devcatalog",
        encryption_key=Fernet.generate_key().decode(),
    )
    process = devcatalog_process(config, run_dir / "logs").start(timeout=60)
    yield config
    process.stop()


@dataclass
class Lakehouse:
    """The storage side of a test run: where warehouses live and how to reach their catalog."""

    seaweed: SeaweedConfig
    catalog: DevCatalogConfig
    oidc: OidcProviderConfig

    @property
    def catalog_url(self) -> str:
        return self.catalog.url

    @property
    def s3_endpoint(self) -> str:
        return self.seaweed.s3_endpoint

    @property
    def cu_allowed_endpoints(self) -> str:
        """`LAKEPORT_CU_ALLOWED_ENDPOINTS` for this lakehouse: local units must reach its S3."""
        return urlsplit(self.s3_endpoint).netloc

    def service_token(self) -> str:
        """A client-credentials token (audience lakekeeper) for an independent catalog client."""
        response = httpx.post(
            f"{self.oidc.issuer}/token",
            timeout=10,
            data={
                "grant_type": "client_credentials",
                "client_id": SERVICE_CLIENT_ID,
                "client_secret": self.oidc.service_client_secret,
            },
        )
        response.raise_for_status()
        return response.json()["access_token"]


@pytest.fixture(scope="session")
def lakehouse(seaweedfs, devcatalog, oidc_provider) -> Lakehouse:
    return Lakehouse(seaweedfs, devcatalog, oidc_provider)
