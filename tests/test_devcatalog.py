"""The Lakekeeper-compatible dev catalog, run as the stack runs it (the session's `devcatalog`
fixture, tests/services.py): gunicorn in front of a real SeaweedFS, tokens from the real OpenID
Connect provider, every management exchange checked against Lakekeeper's OpenAPI documents, and
pyiceberg as the Iceberg client.

The tests work in a project of their own, so other tests' warehouses in the shared catalog
(names, overlapping locations) cannot meet theirs."""
from __future__ import annotations

import sqlite3
import uuid

import httpx
import jwt
import pyarrow as pa
import pytest
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives.asymmetric import rsa
from pyiceberg.catalog import load_catalog

from app.storage_probe import S3Credentials, probe_storage
from devstack.oidc_provider import SERVICE_CLIENT_ID
from devstack.seaweedfs import TEST_USER_KEYS
from tests.lakekeeper_contract import ContractCheckingTransport

ALICE, BOB = TEST_USER_KEYS["alice"], TEST_USER_KEYS["bob"]
PROJECT, OTHER_PROJECT = str(uuid.uuid4()), str(uuid.uuid4())


@pytest.fixture(scope="module")
def service_token(lakehouse) -> str:
    """A client-credentials token of the portal's service client (audience `lakekeeper`)."""
    return lakehouse.service_token()


@pytest.fixture
def api(devcatalog, service_token):
    """A client in this module's project whose every request and answer must conform to
    Lakekeeper's documents."""
    with httpx.Client(
        base_url=devcatalog.url, timeout=30, transport=ContractCheckingTransport(httpx.HTTPTransport()),
        headers={"Authorization": f"Bearer {service_token}", "x-project-id": PROJECT},
    ) as client:
        yield client


def iceberg_catalog(devcatalog, warehouse_name: str, **properties):
    """pyiceberg on the dev catalog; Iceberg clients name the project in the warehouse argument."""
    return load_catalog("lake", type="rest", uri=f"{devcatalog.url}/catalog",
                        warehouse=f"{PROJECT}/{warehouse_name}", **properties)


def s3_profile(seaweedfs, key_prefix: str, *, sts_enabled: bool = False) -> dict:
    """A profile for alice's bucket."""
    return {
        "type": "s3", "bucket": ALICE.bucket, "key-prefix": key_prefix, "region": seaweedfs.region,
        "endpoint": seaweedfs.s3_endpoint, "path-style-access": True, "flavor": "s3-compat",
        "sts-enabled": sts_enabled,
    }


def access_key(credentials: S3Credentials) -> dict:
    return {
        "type": "s3", "credential-type": "access-key",
        "access-key-id": credentials.access_key_id, "secret-access-key": credentials.secret_access_key,
    }


def create_warehouse(api, seaweedfs, name: str, key_prefix: str, *, credentials=ALICE.credentials,
                     sts_enabled=False, headers=None) -> httpx.Response:
    return api.post("/management/v1/warehouse", headers=headers or {}, json={
        "warehouse-name": name,
        "storage-profile": s3_profile(seaweedfs, key_prefix, sts_enabled=sts_enabled),
        "storage-credential": access_key(credentials),
        "delete-profile": {"type": "hard"},
    })


def error_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["type"]


def warehouse_names(api, *statuses: str, headers=None) -> set[str]:
    params = [("warehouseStatus", status) for status in statuses]
    answer = api.get("/management/v1/warehouse", params=params, headers=headers or {}).raise_for_status()
    return {warehouse["name"] for warehouse in answer.json()["warehouses"]}


def test_server_info_says_it_is_a_stand_in(api):
    info = api.get("/management/v1/info").raise_for_status().json()
    assert "dev-catalog" in info["lakekeeper-version"]
    assert "development stand-in" in info["description"]
    assert info["default-project-id"] == "00000000-0000-0000-0000-000000000000"


def test_requests_without_a_valid_bearer_token_are_refused(devcatalog, service_token):
    foreign_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        jwt.decode(service_token, options={"verify_signature": False}), foreign_key, algorithm="RS256",
        headers={"kid": jwt.get_unverified_header(service_token).get("kid")},
    )
    for headers in ({}, {"Authorization": "Bearer not-a-jwt"}, {"Authorization": f"Bearer {forged}"},
                    {"Authorization": f"Basic {service_token}"}):
        for path in ("/management/v1/info", "/management/v1/warehouse", "/catalog/v1/config?warehouse=x"):
            response = httpx.get(devcatalog.url + path, headers=headers)
            assert error_of(response) == (401, "UnauthorizedError"), (path, headers.keys())
            assert response.headers["WWW-Authenticate"] == "Bearer"


def test_warehouse_lifecycle(api, seaweedfs):
    created = create_warehouse(api, seaweedfs, "lifecycle", "lifecycle")
    assert created.status_code == 201, created.text
    warehouse = created.json()
    warehouse_id = warehouse["warehouse-id"]
    assert warehouse["storage-profile"]["key-prefix"] == "lifecycle"
    assert warehouse["storage-credential-type"] == {"type": "s3", "credential-type": "access-key"}
    assert api.get(f"/management/v1/warehouse/{warehouse_id}").json()["name"] == "lifecycle"
    assert "lifecycle" in warehouse_names(api)

    renamed = api.post(f"/management/v1/warehouse/{warehouse_id}/rename", json={"new-name": "renamed"})
    assert renamed.raise_for_status().json()["name"] == "renamed"

    assert api.post(f"/management/v1/warehouse/{warehouse_id}/deactivate").status_code == 200
    assert "renamed" not in warehouse_names(api)
    assert "renamed" in warehouse_names(api, "inactive")
    assert error_of(api.get("/catalog/v1/config", params={"warehouse": "renamed"})) == (404, "WarehouseNotFound")
    assert api.post(f"/management/v1/warehouse/{warehouse_id}/activate").status_code == 200
    assert api.get(f"/management/v1/warehouse/{warehouse_id}").json()["status"] == "active"

    soft = {"type": "soft", "expiration-seconds": 3600}
    updated = api.post(f"/management/v1/warehouse/{warehouse_id}/delete-profile", json={"delete-profile": soft})
    assert updated.raise_for_status().json()["delete-profile"] == soft

    rotated = api.post(f"/management/v1/warehouse/{warehouse_id}/storage-credential",
                       json={"new-storage-credential": access_key(ALICE.credentials)})
    assert rotated.raise_for_status().json()["updated-at"]

    assert api.delete(f"/management/v1/warehouse/{warehouse_id}").status_code == 204
    assert error_of(api.get(f"/management/v1/warehouse/{warehouse_id}")) == (404, "WarehouseNotFound")
    assert error_of(api.delete(f"/management/v1/warehouse/{warehouse_id}")) == (404, "WarehouseNotFound")


def test_a_wrong_secret_is_refused_and_creates_no_warehouse(api, seaweedfs):
    wrong = S3Credentials(ALICE.access_key_id, "not-alices-secret")
    response = create_warehouse(api, seaweedfs, "wrong-secret", "wrong-secret", credentials=wrong)

    assert error_of(response) == (400, "IoOperationFailed")
    assert "signature does not match" in response.json()["error"]["message"]
    assert "not-alices-secret" not in response.text
    assert "wrong-secret" not in warehouse_names(api, "active", "inactive")


def test_keys_of_another_bucket_are_refused(api, seaweedfs):
    response = create_warehouse(api, seaweedfs, "bobs-keys", "x", credentials=BOB.credentials)
    assert error_of(response) == (400, "IoOperationFailed")
    assert "Access denied" in response.json()["error"]["message"]


def test_overlapping_locations_are_refused(api, seaweedfs):
    first = create_warehouse(api, seaweedfs, "overlap-a", "shared/a").raise_for_status().json()
    try:
        overlapping = (("overlap-same", "shared/a"), ("overlap-inside", "shared/a/b"), ("overlap-outer", "shared"))
        for name, prefix in overlapping:
            response = create_warehouse(api, seaweedfs, name, prefix)
            assert error_of(response) == (400, "CreateWarehouseStorageProfileOverlap"), prefix
            assert "overlap-a" in response.json()["error"]["message"]
        sibling = create_warehouse(api, seaweedfs, "overlap-sibling", "shared/ab")
        assert sibling.status_code == 201, sibling.text
        api.delete(f"/management/v1/warehouse/{sibling.json()['warehouse-id']}").raise_for_status()
    finally:
        api.delete(f"/management/v1/warehouse/{first['warehouse-id']}").raise_for_status()


def test_names_are_unique_within_a_project(api, seaweedfs):
    first = create_warehouse(api, seaweedfs, "unique", "unique/one").raise_for_status().json()
    other_project = {"x-project-id": OTHER_PROJECT}
    try:
        assert error_of(create_warehouse(api, seaweedfs, "unique", "unique/two")) == (409, "WarehouseAlreadyExists")

        elsewhere = create_warehouse(api, seaweedfs, "unique", "unique/two", headers=other_project)
        assert elsewhere.status_code == 201, elsewhere.text
        assert elsewhere.json()["project-id"] == OTHER_PROJECT
        assert warehouse_names(api, headers=other_project) == {"unique"}
        config = api.get("/catalog/v1/config", params={"warehouse": f"{OTHER_PROJECT}/unique"}).json()
        assert config["defaults"]["prefix"] == elsewhere.json()["warehouse-id"]
        renamed = api.post(f"/management/v1/warehouse/{first['warehouse-id']}/rename", json={"new-name": "unique"})
        assert renamed.status_code == 200  # its own name
        api.delete(f"/management/v1/warehouse/{elsewhere.json()['warehouse-id']}").raise_for_status()
    finally:
        api.delete(f"/management/v1/warehouse/{first['warehouse-id']}").raise_for_status()


def test_credentials_are_encrypted_at_rest_and_never_returned(api, seaweedfs, devcatalog):
    created = create_warehouse(api, seaweedfs, "sealed", "sealed").raise_for_status()
    warehouse_id = created.json()["warehouse-id"]
    try:
        answers = [created, api.get(f"/management/v1/warehouse/{warehouse_id}"), api.get("/management/v1/warehouse")]
        assert not any(ALICE.secret_access_key in answer.text for answer in answers)

        assert ALICE.secret_access_key.encode() not in devcatalog.store_path.read_bytes()
        with sqlite3.connect(devcatalog.store_path) as connection:
            (ciphertext,) = connection.execute(
                "SELECT ciphertext FROM storage_secret WHERE warehouse_id = ?", (warehouse_id,),
            ).fetchone()
        assert ALICE.secret_access_key in Fernet(devcatalog.encryption_key).decrypt(ciphertext).decode()

        # A rotation that fails validation keeps the stored credential.
        refused = api.post(f"/management/v1/warehouse/{warehouse_id}/storage-credential",
                           json={"new-storage-credential": access_key(BOB.credentials)})
        assert error_of(refused) == (400, "IoOperationFailed")
        with sqlite3.connect(devcatalog.store_path) as connection:
            (kept,) = connection.execute(
                "SELECT ciphertext FROM storage_secret WHERE warehouse_id = ?", (warehouse_id,),
            ).fetchone()
        assert kept == ciphertext
    finally:
        api.delete(f"/management/v1/warehouse/{warehouse_id}").raise_for_status()


def test_invalid_requests_are_refused_in_lakekeepers_terms(api, seaweedfs):
    no_credential = {"warehouse-name": "x", "storage-profile": s3_profile(seaweedfs, "x")}
    assert error_of(api.post("/management/v1/warehouse", json=no_credential)) == (400, "MissingCredentialError")
    slash = create_warehouse(api, seaweedfs, "a/b", "slash")
    assert error_of(slash) == (400, "InvalidWarehouseName")
    unknown = uuid.uuid4()
    assert error_of(api.post(f"/management/v1/warehouse/{unknown}/rename", json={"new-name": "y"})) == (
        404, "WarehouseNotFound")
    assert error_of(api.get("/catalog/v1/config")) == (400, "GetConfigNoWarehouseProvided")
    assert error_of(api.get("/catalog/v1/config", params={"warehouse": "nowhere"})) == (404, "WarehouseNotFound")


@pytest.fixture
def warehouse(api, seaweedfs):
    """A warehouse on alice's bucket, removed afterwards (its tables included)."""
    created = create_warehouse(api, seaweedfs, "iceberg", "iceberg", sts_enabled=True).raise_for_status().json()
    yield created
    api.delete(f"/management/v1/warehouse/{created['warehouse-id']}")


def test_catalog_config_answers_as_lakekeeper(api, warehouse, devcatalog):
    config = api.get("/catalog/v1/config", params={"warehouse": "iceberg"}).raise_for_status().json()
    assert config["defaults"]["prefix"] == warehouse["warehouse-id"]
    assert config["overrides"]["uri"] == f"{devcatalog.url}/catalog"

    prefix = f"/catalog/v1/{warehouse['warehouse-id']}"
    api.post(f"{prefix}/namespaces", json={"namespace": ["checked"], "properties": {}}).raise_for_status()
    assert api.get(f"{prefix}/namespaces").json()["namespaces"] == [["checked"]]
    assert api.delete(f"{prefix}/namespaces/checked").status_code == 204


def test_pyiceberg_round_trip_with_vended_credentials(api, warehouse, devcatalog, service_token, seaweedfs):
    catalog = iceberg_catalog(devcatalog, "iceberg", token=service_token)
    catalog.create_namespace("sales")
    orders = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "item": ["tea", "cake", "jam"]})
    table = catalog.create_table("sales.orders", schema=orders.schema)
    table.append(orders)

    assert catalog.list_namespaces() == [("sales",)]
    assert catalog.list_tables("sales") == [("sales", "orders")]
    loaded = catalog.load_table("sales.orders")
    assert loaded.scan().to_arrow().sort_by("id").to_pylist() == orders.to_pylist()

    vended = loaded.io.properties
    for key in ("s3.access-key-id", "s3.secret-access-key", "s3.session-token", "s3.endpoint",
                "s3.path-style-access", "client.region"):
        assert vended.get(key), key
    assert vended["s3.access-key-id"] != ALICE.access_key_id
    assert loaded.location().startswith(f"s3://{ALICE.bucket}-wh-")

    # The vended session reaches this table's files only: not the warehouse's own bucket.
    session = S3Credentials(vended["s3.access-key-id"], vended["s3.secret-access-key"], vended["s3.session-token"])
    assert probe_storage(seaweedfs.s3_location(ALICE.bucket, "iceberg"), session).first_failure.name == "write"

    warehouse_path = f"/management/v1/warehouse/{warehouse['warehouse-id']}"
    assert error_of(api.delete(warehouse_path)) == (409, "WarehouseNotEmpty")

    catalog.purge_table("sales.orders")
    catalog.drop_namespace("sales")
    assert catalog.list_namespaces() == []
    assert api.delete(warehouse_path).status_code == 204


def test_pyiceberg_with_client_credentials_from_the_provider(api, warehouse, devcatalog, oidc_provider):
    token_endpoint = httpx.get(oidc_provider.discovery_url).raise_for_status().json()["token_endpoint"]
    catalog = iceberg_catalog(
        devcatalog, "iceberg", credential=f"{SERVICE_CLIENT_ID}:{oidc_provider.service_client_secret}",
        **{"oauth2-server-uri": token_endpoint},
    )
    catalog.create_namespace("ops")
    assert catalog.list_namespaces() == [("ops",)]
    catalog.drop_namespace("ops")


def test_vending_does_not_depend_on_sts_enabled_and_clients_may_bring_their_own_keys(
        api, seaweedfs, devcatalog, service_token):
    warehouse = create_warehouse(api, seaweedfs, "no-sts", "no-sts", sts_enabled=False).raise_for_status().json()
    vending = iceberg_catalog(devcatalog, "no-sts", token=service_token)
    vending.create_namespace("raw")
    events = pa.table({"event": ["signup", "login"]})
    vending.create_table("raw.events", schema=events.schema).append(events)

    # A client that asks for remote signing (not offered) gets no credentials and uses its own.
    own_keys = iceberg_catalog(
        devcatalog, "no-sts", token=service_token,
        **{"header.X-Iceberg-Access-Delegation": "remote-signing",
           "s3.access-key-id": ALICE.access_key_id, "s3.secret-access-key": ALICE.secret_access_key,
           "s3.endpoint": seaweedfs.s3_endpoint, "s3.region": seaweedfs.region},
    )
    table = own_keys.load_table("raw.events")
    assert table.io.properties["s3.access-key-id"] == ALICE.access_key_id
    table.append(events)
    assert own_keys.load_table("raw.events").scan().to_arrow().num_rows == 4

    vending.purge_table("raw.events")
    vending.drop_namespace("raw")
    assert api.delete(f"/management/v1/warehouse/{warehouse['warehouse-id']}").status_code == 204
