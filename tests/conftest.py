"""The fixtures tests/ shares, flaskr-style: `app`, `client` and `auth`, and the users, units,
catalogs and servers several test modules use, on top of the service fixtures in services.py
(database, identity provider, dev catalog, SeaweedFS). Plain helpers are in tests/factories.py,
tests/catalogs.py and tests/stand_ins.py.

What a fixture needs of the portal's features it imports inside: a feature module that does not
import fails the tests that use it, not the collection of every test."""

from __future__ import annotations

import secrets
import socket
import ssl
import threading
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from app import create_app
from app.lakekeeper.client import LakekeeperClient
from app.lakekeeper.resources import S3AccessKeyCredential, S3StorageProfile
from app.lakekeeper.tokens import ClientCredentialsTokenSource, lakekeeper_user_id
from app.models import ComputeUnit, User, Warehouse
from devstack.oidc_provider import (
    SERVICE_CLIENT_ID,
    TEST_USERS,
)
from tests.catalogs import (
    ALICE,
    ALICE_USER,
    BOB_USER,
    ExecutionGrants,
    catalog_warehouse,
    checked_portal,
    reader,
)
from tests.factories import (
    AuthActions,
    lakehouse_config,
    make_user,
    register_warehouse,
    reload,
    set_groups,
    sign_in_as,
    start_unit,
)
from tests.stand_ins import RecordingServer


@pytest.fixture(scope="module", autouse=True)
def no_worker_outlives_its_module(request):
    """Every in-process worker a module starts is stopped by the module's end. One left running
    shares the test database with later modules: it fires their schedules on the real clock and
    delivers their notifications under its own settings."""
    before = {thread for thread in threading.enumerate() if thread.name.startswith("worker-")}
    yield
    left = [
        thread
        for thread in threading.enumerate()
        if thread.name.startswith("worker-") and thread not in before
    ]
    deadline = time.monotonic() + 15
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    running = [thread.name for thread in left if thread.is_alive()]
    assert not running, f"{request.module.__name__} left workers running: {running}"


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
    from app.compute_units import handles
    from app.compute_units import service as unit_service
    from app.ray_clusters.local import cluster_pids
    from app.worker import Worker

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


# ---------------------------------------------------------------------- the dev catalog's own tests
@pytest.fixture(scope="module")
def service_token(lakehouse) -> str:
    """A client-credentials token of the portal's service client (audience `lakekeeper`)."""
    return lakehouse.service_token()


@pytest.fixture(scope="module")
def portal_tokens(oidc_provider):
    """The portal's own client of the identity provider (the service client's credentials)."""
    with ClientCredentialsTokenSource(
        client_id=SERVICE_CLIENT_ID,
        client_secret=oidc_provider.service_client_secret,
        issuer=oidc_provider.issuer,
    ) as tokens:
        yield tokens


@pytest.fixture(scope="module")
def execution(devcatalog, seaweedfs, portal_tokens):
    """Warehouses of alice and bob in the dev catalog's tests' project, with their grants, and the
    tokens an execution and each of them get (tests/catalogs.py ExecutionGrants)."""
    portal = checked_portal(devcatalog, portal_tokens)
    keys = S3AccessKeyCredential(ALICE.access_key_id, ALICE.secret_access_key)
    own, other, bobs = (
        portal.create_warehouse(
            name,
            S3StorageProfile(
                bucket=ALICE.bucket,
                region=seaweedfs.region,
                key_prefix=name,
                endpoint=seaweedfs.s3_endpoint,
                path_style_access=True,
                flavor="s3-compat",
            ),
            keys,
        )
        for name in ("exec-own", "exec-other", "exec-bobs")
    )
    for warehouse, user in ((own, ALICE_USER), (other, ALICE_USER), (bobs, BOB_USER)):
        portal.grant_sole_ownership(warehouse.id, lakekeeper_user_id(user.sub))
    yield ExecutionGrants(
        own,
        other,
        bobs,
        portal.user_token(ALICE_USER.sub, own.id).access_token,
        portal.user_token(ALICE_USER.sub).access_token,
        portal.user_token(BOB_USER.sub).access_token,
    )
    for warehouse in (own, other, bobs):
        portal.purge_warehouse_contents(warehouse.name)
        portal.delete_warehouse(warehouse.id)
    portal.close()


# ------------------------------------------------------------------------ pipelines on a Spark host
@pytest.fixture(scope="module")
def host(lakehouse):
    """The Spark host of a two-node local cluster (one CPU, 3 GB each), started without the
    portal; a client of it."""
    from app.ray_clusters.base import ClusterSpec
    from app.ray_clusters.local import LocalClusterBackend, allowed_endpoints
    from app.spark_host.client import SparkHostClient, with_spark_host_secret

    backend = LocalClusterBackend(
        endpoints=allowed_endpoints(lakehouse.catalog_url, lakehouse.cu_allowed_endpoints)
    )
    handle = backend.start(
        ClusterSpec(
            cu_id="test-pipeline",
            name="pipeline",
            cpus_per_node=1,
            memory_gb_per_node=3,
            worker_nodes=1,
        )
    )
    client = SparkHostClient(with_spark_host_secret(handle, "test-portal-key"), timeout=30)
    try:
        info = client.bootstrap(executors=2, executor_cores=1, executor_memory="1g")
        assert info["state"] == "ready", info["error"]
        yield client
    finally:
        client.close()
        backend.terminate(handle)


@pytest.fixture(scope="module")
def catalog_admin(lakehouse):
    tokens = ClientCredentialsTokenSource(
        client_id=SERVICE_CLIENT_ID,
        issuer=lakehouse.oidc.issuer,
        client_secret=lakehouse.oidc.service_client_secret,
    )
    with tokens, LakekeeperClient(lakehouse.catalog_url, tokens) as client:
        yield client


@pytest.fixture(scope="module")
def warehouses(catalog_admin, lakehouse):
    """Two of alice's warehouses; the first holds `datasets.orders`."""
    first, second = (
        catalog_warehouse(catalog_admin, lakehouse, "sales"),
        catalog_warehouse(catalog_admin, lakehouse, "lab"),
    )
    orders = reader(lakehouse, first)
    orders.create_namespace("datasets")
    orders.create_table(
        "datasets.orders", schema=pa.schema([("id", pa.int64()), ("amount", pa.int64())])
    ).append(pa.table({"id": [1, 2, 3, 4], "amount": [5, 20, 7, 40]}))
    return first, second


# ----------------------------------------------------------------------- connections a test watches
@pytest.fixture
def listen():
    servers = []

    def start(
        host: str = "127.0.0.1", tls: ssl.SSLContext | None = None, redirect_to: str | None = None
    ) -> RecordingServer:
        server = RecordingServer(host, tls, redirect_to)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def attempts(monkeypatch):
    """Every (host, port) httpx tries to connect to, whether or not anything listens there."""
    tried: list[tuple[str, int]] = []
    create_connection = socket.create_connection

    def spy(address, *args, **kwargs):
        tried.append((address[0], address[1]))
        return create_connection(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", spy)
    return tried
