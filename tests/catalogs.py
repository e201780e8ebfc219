"""Helpers for tests that work on catalogs directly: the dev catalog's own tests (a project of
their own, alice's and bob's keys and users, clients whose every exchange is checked against
Lakekeeper's documents) and pipelines submitted straight to a unit's Spark host (an execution's
spec, steps, an independent pyiceberg reader). Their fixtures are in tests/conftest.py."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass

import httpx
from pyiceberg.catalog import load_catalog

from app.lakekeeper.client import LakekeeperClient
from app.lakekeeper.resources import S3AccessKeyCredential, S3StorageProfile, WarehouseInfo
from app.storage_probe import S3Credentials, SigV4Auth
from compute.contract import JobKind
from devstack.oidc_provider import TEST_USERS
from devstack.seaweedfs import TEST_USER_KEYS
from tests.lakekeeper_contract import ContractCheckingTransport

# -------------------------------------------------------------------------- the dev catalog's tests
# They work in a project of their own, so other tests' warehouses in the shared catalog (names,
# overlapping locations) cannot meet theirs.
ALICE, BOB = TEST_USER_KEYS["alice"], TEST_USER_KEYS["bob"]


ALICE_USER, BOB_USER = TEST_USERS["alice"], TEST_USERS["bob"]


PROJECT, OTHER_PROJECT = str(uuid.uuid4()), str(uuid.uuid4())


def checked_client(devcatalog, token: str) -> httpx.Client:
    """A client in the dev catalog tests' project (PROJECT) whose every request and answer
    must conform to Lakekeeper's documents."""
    return httpx.Client(
        base_url=devcatalog.url,
        timeout=30,
        transport=ContractCheckingTransport(httpx.HTTPTransport()),
        headers={"Authorization": f"Bearer {token}", "x-project-id": PROJECT},
    )


def iceberg_catalog(devcatalog, warehouse_name: str, **properties):
    """pyiceberg on the dev catalog; Iceberg clients name the project in the warehouse argument."""
    return load_catalog(
        "lake",
        type="rest",
        uri=f"{devcatalog.url}/catalog",
        warehouse=f"{PROJECT}/{warehouse_name}",
        **properties,
    )


def s3_profile(seaweedfs, key_prefix: str, *, sts_enabled: bool = False) -> dict:
    """A profile for alice's bucket."""
    return {
        "type": "s3",
        "bucket": ALICE.bucket,
        "key-prefix": key_prefix,
        "region": seaweedfs.region,
        "endpoint": seaweedfs.s3_endpoint,
        "path-style-access": True,
        "flavor": "s3-compat",
        "sts-enabled": sts_enabled,
    }


def access_key(credentials: S3Credentials) -> dict:
    return {
        "type": "s3",
        "credential-type": "access-key",
        "access-key-id": credentials.access_key_id,
        "secret-access-key": credentials.secret_access_key,
    }


def vended_session(properties: dict) -> S3Credentials:
    """The vended credentials in a table's FileIO properties."""
    return S3Credentials(
        properties["s3.access-key-id"],
        properties["s3.secret-access-key"],
        properties["s3.session-token"],
    )


def s3_client(seaweedfs, credentials: S3Credentials) -> httpx.Client:
    return httpx.Client(
        base_url=seaweedfs.s3_endpoint, auth=SigV4Auth(credentials, seaweedfs.region), timeout=10
    )


def checked_portal(devcatalog, tokens) -> LakekeeperClient:
    """The portal's client in the dev catalog tests' project (PROJECT), every exchange checked
    against Lakekeeper's documents."""
    return LakekeeperClient(
        devcatalog.url,
        tokens,
        project_id=PROJECT,
        transport=ContractCheckingTransport(httpx.HTTPTransport()),
    )


@dataclass
class ExecutionGrants:
    """Alice owns two warehouses, Bob one (the portal's grants); `token` is what an execution in
    alice's first warehouse gets (exchanged for alice, narrowed to that warehouse), `alice_token`
    what Lakekeeper would see without the narrowing scope (grants alone decide)."""

    own: WarehouseInfo
    other: WarehouseInfo
    bobs: WarehouseInfo
    token: str
    alice_token: str
    bob_token: str


# ------------------------------------------------------------------------ pipelines on a Spark host
execution_ids = iter(range(100, 10_000))


def catalog_warehouse(catalog_admin, lakehouse, name: str) -> dict:
    keys = TEST_USER_KEYS["alice"]
    info = catalog_admin.create_warehouse(
        f"u1-{name}-{secrets.token_hex(3)}",
        S3StorageProfile(
            bucket=keys.bucket,
            region="us-east-1",
            key_prefix=f"pipeline/{name}-{secrets.token_hex(3)}",
            endpoint=lakehouse.s3_endpoint,
            path_style_access=True,
            flavor="s3-compat",
        ),
        S3AccessKeyCredential(keys.access_key_id, keys.secret_access_key),
    )
    return {"id": 1, "name": name, "lakekeeper_name": info.name, "lakekeeper_id": info.id}


def reader(lakehouse, warehouse: dict):
    """An independent pyiceberg client on the warehouse."""
    return load_catalog(
        f"reader-{secrets.token_hex(3)}",
        type="rest",
        uri=f"{lakehouse.catalog_url}/catalog",
        warehouse=warehouse["lakekeeper_name"],
        token=lakehouse.service_token(),
        **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )


def step(name: str, code: str, kind: str = "sql", output: bool = False) -> dict:
    return {"name": name, "kind": kind, "code": code, "output": output}


def spec_for(
    warehouse: dict,
    token: str,
    steps: list[dict],
    catalog_uri: str,
    execution_id: int | None = None,
):
    return {
        "execution_id": execution_id if execution_id is not None else next(execution_ids),
        "workflow": {"id": 7, "name": "sales", "version": 3},
        "user": {"id": 1, "email": "alice@example.test"},
        "compute_unit": {"id": 5, "name": "cu-a"},
        "warehouse": {
            "id": warehouse.get("id", 1),
            "name": warehouse.get("name", "w"),
            "lakekeeper_id": warehouse["lakekeeper_id"],
        },
        "catalog": {
            "uri": catalog_uri,
            "warehouse": warehouse["lakekeeper_name"],
            "token": token,
            "access_delegation": "vended-credentials",
        },
        "steps": steps,
    }


def submit(host, lakehouse, warehouse: dict, steps: list[dict], **overrides) -> tuple[str, dict]:
    spec = {
        **spec_for(warehouse, lakehouse.service_token(), steps, f"{lakehouse.catalog_url}/catalog"),
        **overrides,
    }
    submitted = host.submit(JobKind.EXECUTION, spec, name=f"execution-{spec['execution_id']}")
    return submitted["run_id"], spec
