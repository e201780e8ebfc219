"""The Lakekeeper-compatible dev catalog, run as the stack runs it (the session's `devcatalog`
fixture, tests/services.py): gunicorn in front of a real SeaweedFS, tokens from the real OpenID
Connect provider, every management exchange checked against Lakekeeper's OpenAPI documents, and
pyiceberg as the Iceberg client. User and execution tokens come from the portal's own client,
`ClientCredentialsTokenSource.user_token` (a token exchange at the provider).

The tests work in a project of their own, so other tests' warehouses in the shared catalog
(names, overlapping locations) cannot meet theirs."""

from __future__ import annotations

import sqlite3
import uuid
from urllib.parse import urlsplit

import httpx
import jwt
import pyarrow as pa
import pytest
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives.asymmetric import rsa
from pyiceberg.exceptions import RESTError

from app.lakekeeper.resources import (
    S3AccessKeyCredential,
    S3StorageProfile,
    WarehouseAssignment,
)
from app.storage_probe import S3Credentials, probe_storage
from devstack.oidc_provider import SERVICE_CLIENT_ID
from tests.catalogs import (
    ALICE,
    ALICE_USER,
    BOB,
    BOB_USER,
    OTHER_PROJECT,
    PROJECT,
    access_key,
    checked_client,
    checked_portal,
    iceberg_catalog,
    s3_client,
    s3_profile,
    vended_session,
)
from tests.services import LOOPBACK_ALLOWED


@pytest.fixture
def api(devcatalog, service_token):
    with checked_client(devcatalog, service_token) as client:
        yield client


def create_warehouse(
    api,
    seaweedfs,
    name: str,
    key_prefix: str,
    *,
    credentials=ALICE.credentials,
    sts_enabled=False,
    headers=None,
) -> httpx.Response:
    return api.post(
        "/management/v1/warehouse",
        headers=headers or {},
        json={
            "warehouse-name": name,
            "storage-profile": s3_profile(seaweedfs, key_prefix, sts_enabled=sts_enabled),
            "storage-credential": access_key(credentials),
            "delete-profile": {"type": "hard"},
        },
    )


def error_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["type"]


# Lakekeeper v0.13.3 (crates/lakekeeper/src/service/authz/warehouse.rs, `require_warehouse_action`):
# a warehouse the caller cannot see answers as one that does not exist; an action refused on a
# warehouse the caller sees is 403.
HIDDEN = (404, "NoSuchWarehouseException")
FORBIDDEN = (403, "WarehouseActionForbidden")


def warehouse_names(api, headers=None) -> set[str]:
    """The active warehouses' names: Lakekeeper 0.13.x lists no other and answers 400 to a
    `warehouseStatus` filter (see tests/lakekeeper_contract.py)."""
    answer = api.get("/management/v1/warehouse", headers=headers or {}).raise_for_status()
    return {warehouse["name"] for warehouse in answer.json()["warehouses"]}


def test_server_info_says_it_is_a_stand_in(api):
    info = api.get("/management/v1/info").raise_for_status().json()
    assert "dev-catalog" in info["lakekeeper-version"]
    assert "development stand-in" in info["description"]
    assert info["default-project-id"] == "00000000-0000-0000-0000-000000000000"


def test_requests_without_a_valid_bearer_token_are_refused(devcatalog, service_token):
    foreign_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        jwt.decode(service_token, options={"verify_signature": False}),
        foreign_key,
        algorithm="RS256",
        headers={"kid": jwt.get_unverified_header(service_token).get("kid")},
    )
    for headers in (
        {},
        {"Authorization": "Bearer not-a-jwt"},
        {"Authorization": f"Bearer {forged}"},
        {"Authorization": f"Basic {service_token}"},
    ):
        for path in (
            "/management/v1/info",
            "/management/v1/warehouse",
            "/catalog/v1/config?warehouse=x",
        ):
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

    renamed = api.post(
        f"/management/v1/warehouse/{warehouse_id}/rename", json={"new-name": "renamed"}
    )
    assert renamed.raise_for_status().json()["name"] == "renamed"

    assert api.post(f"/management/v1/warehouse/{warehouse_id}/deactivate").status_code == 200
    assert "renamed" not in warehouse_names(api)
    assert api.get(f"/management/v1/warehouse/{warehouse_id}").json()["status"] == "inactive"
    assert error_of(api.get("/catalog/v1/config", params={"warehouse": "renamed"})) == (
        404,
        "NoSuchWarehouseException",
    )
    assert api.post(f"/management/v1/warehouse/{warehouse_id}/activate").status_code == 200
    assert api.get(f"/management/v1/warehouse/{warehouse_id}").json()["status"] == "active"

    soft = {"type": "soft", "expiration-seconds": 3600}
    updated = api.post(
        f"/management/v1/warehouse/{warehouse_id}/delete-profile", json={"delete-profile": soft}
    )
    assert updated.raise_for_status().json()["delete-profile"] == soft

    rotated = api.post(
        f"/management/v1/warehouse/{warehouse_id}/storage-credential",
        json={"new-storage-credential": access_key(ALICE.credentials)},
    )
    assert rotated.raise_for_status().json()["updated-at"]

    assert api.delete(f"/management/v1/warehouse/{warehouse_id}").status_code == 204
    assert error_of(api.get(f"/management/v1/warehouse/{warehouse_id}")) == (
        404,
        "NoSuchWarehouseException",
    )
    assert error_of(api.delete(f"/management/v1/warehouse/{warehouse_id}")) == (
        404,
        "NoSuchWarehouseException",
    )


def test_a_wrong_secret_is_refused_and_creates_no_warehouse(api, seaweedfs):
    wrong = S3Credentials(ALICE.access_key_id, "not-alices-secret")
    response = create_warehouse(api, seaweedfs, "wrong-secret", "wrong-secret", credentials=wrong)

    assert error_of(response) == (400, "IoOperationFailed")
    assert "signature does not match" in response.json()["error"]["message"]
    assert "not-alices-secret" not in response.text
    assert "wrong-secret" not in warehouse_names(api)


def test_keys_of_another_bucket_are_refused(api, seaweedfs):
    response = create_warehouse(api, seaweedfs, "bobs-keys", "x", credentials=BOB.credentials)
    assert error_of(response) == (400, "IoOperationFailed")
    assert "Access denied" in response.json()["error"]["message"]


def test_overlapping_locations_are_refused(api, seaweedfs):
    first = create_warehouse(api, seaweedfs, "overlap-a", "shared/a").raise_for_status().json()
    try:
        overlapping = (
            ("overlap-same", "shared/a"),
            ("overlap-inside", "shared/a/b"),
            ("overlap-outer", "shared"),
        )
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
        assert error_of(create_warehouse(api, seaweedfs, "unique", "unique/two")) == (
            409,
            "WarehouseAlreadyExists",
        )

        elsewhere = create_warehouse(api, seaweedfs, "unique", "unique/two", headers=other_project)
        assert elsewhere.status_code == 201, elsewhere.text
        assert elsewhere.json()["project-id"] == OTHER_PROJECT
        assert warehouse_names(api, headers=other_project) == {"unique"}
        config = api.get(
            "/catalog/v1/config", params={"warehouse": f"{OTHER_PROJECT}/unique"}
        ).json()
        assert config["defaults"]["prefix"] == elsewhere.json()["warehouse-id"]
        renamed = api.post(
            f"/management/v1/warehouse/{first['warehouse-id']}/rename", json={"new-name": "unique"}
        )
        assert renamed.status_code == 200  # its own name
        api.delete(
            f"/management/v1/warehouse/{elsewhere.json()['warehouse-id']}"
        ).raise_for_status()
    finally:
        api.delete(f"/management/v1/warehouse/{first['warehouse-id']}").raise_for_status()


def test_credentials_are_encrypted_at_rest_and_never_returned(api, seaweedfs, devcatalog):
    created = create_warehouse(api, seaweedfs, "sealed", "sealed").raise_for_status()
    warehouse_id = created.json()["warehouse-id"]
    try:
        answers = [
            created,
            api.get(f"/management/v1/warehouse/{warehouse_id}"),
            api.get("/management/v1/warehouse"),
        ]
        assert not any(ALICE.secret_access_key in answer.text for answer in answers)

        assert ALICE.secret_access_key.encode() not in devcatalog.store_path.read_bytes()
        with sqlite3.connect(devcatalog.store_path) as connection:
            (ciphertext,) = connection.execute(
                "SELECT ciphertext FROM storage_secret WHERE warehouse_id = ?",
                (warehouse_id,),
            ).fetchone()
        assert (
            ALICE.secret_access_key
            in Fernet(devcatalog.encryption_key).decrypt(ciphertext).decode()
        )

        # A rotation that fails validation keeps the stored credential.
        refused = api.post(
            f"/management/v1/warehouse/{warehouse_id}/storage-credential",
            json={"new-storage-credential": access_key(BOB.credentials)},
        )
        assert error_of(refused) == (400, "IoOperationFailed")
        with sqlite3.connect(devcatalog.store_path) as connection:
            (kept,) = connection.execute(
                "SELECT ciphertext FROM storage_secret WHERE warehouse_id = ?",
                (warehouse_id,),
            ).fetchone()
        assert kept == ciphertext
    finally:
        api.delete(f"/management/v1/warehouse/{warehouse_id}").raise_for_status()


def test_invalid_requests_are_refused_in_lakekeepers_terms(api, seaweedfs):
    no_credential = {"warehouse-name": "x", "storage-profile": s3_profile(seaweedfs, "x")}
    assert error_of(api.post("/management/v1/warehouse", json=no_credential)) == (
        400,
        "MissingCredentialError",
    )
    slash = create_warehouse(api, seaweedfs, "a/b", "slash")
    assert error_of(slash) == (400, "InvalidWarehouseName")
    unknown = uuid.uuid4()
    assert error_of(
        api.post(f"/management/v1/warehouse/{unknown}/rename", json={"new-name": "y"})
    ) == (404, "NoSuchWarehouseException")
    assert error_of(api.get("/catalog/v1/config")) == (400, "GetConfigNoWarehouseProvided")
    assert error_of(api.get("/catalog/v1/config", params={"warehouse": "nowhere"})) == (
        404,
        "NoSuchWarehouseException",
    )


@pytest.fixture
def warehouse(api, seaweedfs):
    """A warehouse on alice's bucket, removed afterwards (its tables included)."""
    created = (
        create_warehouse(api, seaweedfs, "iceberg", "iceberg", sts_enabled=True)
        .raise_for_status()
        .json()
    )
    yield created
    api.delete(f"/management/v1/warehouse/{created['warehouse-id']}")


def test_catalog_config_answers_as_lakekeeper(api, warehouse, devcatalog):
    config = (
        api.get("/catalog/v1/config", params={"warehouse": "iceberg"}).raise_for_status().json()
    )
    assert config["defaults"]["prefix"] == warehouse["warehouse-id"]
    assert config["overrides"]["uri"] == f"{devcatalog.url}/catalog"

    prefix = f"/catalog/v1/{warehouse['warehouse-id']}"
    api.post(
        f"{prefix}/namespaces", json={"namespace": ["checked"], "properties": {}}
    ).raise_for_status()
    assert api.get(f"{prefix}/namespaces").json()["namespaces"] == [["checked"]]
    assert api.delete(f"{prefix}/namespaces/checked").status_code == 204


def test_pyiceberg_round_trip_with_vended_credentials(
    api, warehouse, devcatalog, service_token, seaweedfs
):
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
    for key in (
        "s3.access-key-id",
        "s3.secret-access-key",
        "s3.session-token",
        "s3.endpoint",
        "s3.path-style-access",
        "client.region",
    ):
        assert vended.get(key), key
    assert vended["s3.access-key-id"] != ALICE.access_key_id
    assert loaded.location().startswith(f"s3://{ALICE.bucket}-wh-")

    # The vended session reaches the warehouse's table bucket only: not the warehouse's own bucket.
    session = vended_session(vended)
    assert (
        probe_storage(
            seaweedfs.s3_location(ALICE.bucket, "iceberg"), session, policy=LOOPBACK_ALLOWED
        ).first_failure.name
        == "write"
    )

    warehouse_path = f"/management/v1/warehouse/{warehouse['warehouse-id']}"
    assert error_of(api.delete(warehouse_path)) == (409, "WarehouseNotEmpty")

    catalog.purge_table("sales.orders")
    catalog.drop_namespace("sales")
    assert catalog.list_namespaces() == []
    assert api.delete(warehouse_path).status_code == 204


def test_pyiceberg_with_client_credentials_from_the_provider(
    api, warehouse, devcatalog, oidc_provider
):
    token_endpoint = (
        httpx.get(oidc_provider.discovery_url).raise_for_status().json()["token_endpoint"]
    )
    catalog = iceberg_catalog(
        devcatalog,
        "iceberg",
        credential=f"{SERVICE_CLIENT_ID}:{oidc_provider.service_client_secret}",
        **{"oauth2-server-uri": token_endpoint},
    )
    catalog.create_namespace("ops")
    assert catalog.list_namespaces() == [("ops",)]
    catalog.drop_namespace("ops")


def test_vending_does_not_depend_on_sts_enabled_and_clients_may_bring_their_own_keys(
    api, seaweedfs, devcatalog, service_token
):
    warehouse = (
        create_warehouse(api, seaweedfs, "no-sts", "no-sts", sts_enabled=False)
        .raise_for_status()
        .json()
    )
    vending = iceberg_catalog(devcatalog, "no-sts", token=service_token)
    vending.create_namespace("raw")
    events = pa.table({"event": ["signup", "login"]})
    vending.create_table("raw.events", schema=events.schema).append(events)

    # A client that asks for remote signing (not offered) gets no credentials and uses its own.
    own_keys = iceberg_catalog(
        devcatalog,
        "no-sts",
        token=service_token,
        **{
            "header.X-Iceberg-Access-Delegation": "remote-signing",
            "s3.access-key-id": ALICE.access_key_id,
            "s3.secret-access-key": ALICE.secret_access_key,
            "s3.endpoint": seaweedfs.s3_endpoint,
            "s3.region": seaweedfs.region,
        },
    )
    table = own_keys.load_table("raw.events")
    assert table.io.properties["s3.access-key-id"] == ALICE.access_key_id
    table.append(events)
    assert own_keys.load_table("raw.events").scan().to_arrow().num_rows == 4

    vending.purge_table("raw.events")
    vending.drop_namespace("raw")
    assert api.delete(f"/management/v1/warehouse/{warehouse['warehouse-id']}").status_code == 204


# --- Users, grants and execution tokens ------------------------------------------------


def test_the_portal_is_project_admin_and_makes_the_user_the_only_grantee(
    execution, devcatalog, portal_tokens
):
    with checked_portal(devcatalog, portal_tokens) as portal:
        assert portal.whoami().id == f"oidc~{SERVICE_CLIENT_ID}"
        for warehouse, user in ((execution.own, ALICE_USER), (execution.bobs, BOB_USER)):
            # The creator's ownership (the portal's) is gone; the portal keeps its project-admin role.
            assert portal.warehouse_assignments(warehouse.id) == [
                WarehouseAssignment("ownership", user=f"oidc~{user.sub}")
            ]
            assert portal.get_warehouse(warehouse.id).name == warehouse.name


def test_a_user_provisions_itself_and_no_one_else(execution, devcatalog, portal_tokens):
    with checked_portal(devcatalog, portal_tokens) as portal:
        alice = portal.provision_user(execution.alice_token)
        assert (alice.id, alice.name, alice.email, alice.user_type) == (
            f"oidc~{ALICE_USER.sub}",
            ALICE_USER.name,
            ALICE_USER.email,
            "human",
        )
        assert portal.provision_user(execution.alice_token) == alice  # idempotent
        assert portal.whoami(execution.token).id == alice.id  # an execution acts as its user
    with checked_client(devcatalog, execution.alice_token) as as_alice:
        other = as_alice.post(
            "/management/v1/user", json={"id": f"oidc~{BOB_USER.sub}", "name": "Mallory"}
        )
        assert other.status_code == 403


def test_grants_confine_a_users_token_to_the_users_own_warehouses(execution, devcatalog, seaweedfs):
    """What Lakekeeper with OpenFGA decides: no scope, only the grants."""
    own, other, bobs = execution.own.id, execution.other.id, execution.bobs.id
    with checked_client(devcatalog, execution.alice_token) as alice:
        assert warehouse_names(alice) == {"exec-own", "exec-other"}
        for mine in (own, other):
            assert alice.get(f"/management/v1/warehouse/{mine}").status_code == 200
            assert alice.get(f"/catalog/v1/{mine}/namespaces").status_code == 200
        # Bob's warehouse and one that does not exist answer alike: nothing tells them apart.
        for elsewhere in (bobs, uuid.uuid4()):
            assert error_of(alice.get(f"/management/v1/warehouse/{elsewhere}")) == HIDDEN
            assert error_of(alice.get(f"/catalog/v1/{elsewhere}/namespaces")) == HIDDEN
            assert (
                error_of(alice.get(f"/management/v1/permissions/warehouse/{elsewhere}/assignments"))
                == HIDDEN
            )
        for name in ("exec-bobs", "nowhere"):
            assert error_of(alice.get("/catalog/v1/config", params={"warehouse": name})) == HIDDEN
        intruder = alice.post(
            f"/management/v1/permissions/warehouse/{bobs}/assignments",
            json={"writes": [{"type": "select", "user": f"oidc~{ALICE_USER.sub}"}]},
        )
        assert error_of(intruder) == HIDDEN
        assert error_of(create_warehouse(alice, seaweedfs, "alices-own", "alices-own")) == (
            403,
            "ProjectActionForbidden",
        )
    with checked_client(devcatalog, execution.bob_token) as bob:
        assert warehouse_names(bob) == {"exec-bobs"}
        assert error_of(bob.get(f"/management/v1/warehouse/{own}")) == HIDDEN


def test_read_grants_read_and_no_grants_reach_nothing(
    devcatalog, seaweedfs, portal_tokens, oidc_provider
):
    """Archiving leaves the owner `describe` and `select`; purging revokes every grant."""
    alice_id = f"oidc~{ALICE_USER.sub}"
    with checked_portal(devcatalog, portal_tokens) as portal:
        warehouse = portal.create_warehouse(
            "exec-archived",
            S3StorageProfile(
                bucket=ALICE.bucket,
                region=seaweedfs.region,
                key_prefix="exec-archived",
                endpoint=seaweedfs.s3_endpoint,
                path_style_access=True,
                flavor="s3-compat",
            ),
            S3AccessKeyCredential(ALICE.access_key_id, ALICE.secret_access_key),
        )
        portal.set_warehouse_assignments(
            warehouse.id,
            [
                WarehouseAssignment("describe", user=alice_id),
                WarehouseAssignment("select", user=alice_id),
            ],
        )
        token = portal.user_token(ALICE_USER.sub, warehouse.id).access_token
        try:
            with checked_client(devcatalog, token) as alice:
                assert alice.get(f"/catalog/v1/{warehouse.id}/namespaces").status_code == 200
                created = alice.post(
                    f"/catalog/v1/{warehouse.id}/namespaces", json={"namespace": ["late"]}
                )
                assert error_of(created) == FORBIDDEN  # she sees it, and may not write
                portal.set_warehouse_assignments(warehouse.id, [])
                assert portal.warehouse_assignments(warehouse.id) == []
                assert error_of(alice.get(f"/catalog/v1/{warehouse.id}/namespaces")) == HIDDEN
                assert warehouse_names(alice) == set()
        finally:
            portal.delete_warehouse(warehouse.id)


def test_an_execution_token_sees_only_its_warehouse_and_changes_nothing(
    execution, devcatalog, seaweedfs, api
):
    own, other = execution.own.id, execution.other.id
    with checked_client(devcatalog, execution.token) as scoped:
        assert (
            scoped.get(f"/management/v1/warehouse/{own}").raise_for_status().json()["name"]
            == "exec-own"
        )
        # The narrowing scope, second layer: even the user's other warehouse is out of reach.
        for elsewhere in (other, execution.bobs.id, uuid.uuid4()):
            assert error_of(scoped.get(f"/management/v1/warehouse/{elsewhere}")) == HIDDEN
        assert warehouse_names(scoped) == {"exec-own"}

        assert error_of(scoped.post(f"/management/v1/warehouse/{other}/deactivate")) == HIDDEN
        # Managing warehouses is the portal's: even its own warehouse is read-only to an execution.
        assert (
            error_of(scoped.post(f"/management/v1/warehouse/{own}/rename", json={"new-name": "x"}))
            == FORBIDDEN
        )
        assert error_of(scoped.delete(f"/management/v1/warehouse/{own}")) == FORBIDDEN
        revoke = scoped.post(
            f"/management/v1/permissions/warehouse/{own}/assignments",
            json={"deletes": [{"type": "ownership", "user": f"oidc~{ALICE_USER.sub}"}]},
        )
        assert error_of(revoke) == (403, "WarehouseActionForbidden")
        assert error_of(create_warehouse(scoped, seaweedfs, "exec-new", "exec-new")) == (
            403,
            "ProjectActionForbidden",
        )

    # The portal's own token is unchanged.
    assert {"exec-own", "exec-other", "exec-bobs"} <= warehouse_names(api)
    assert api.get(f"/management/v1/warehouse/{other}").json()["status"] == "active"
    assert "exec-new" not in warehouse_names(api)


def test_an_execution_token_reaches_only_its_warehouse_in_the_catalog(execution, devcatalog):
    own, other = execution.own.id, execution.other.id
    with checked_client(devcatalog, execution.token) as scoped:
        config = (
            scoped.get("/catalog/v1/config", params={"warehouse": "exec-own"})
            .raise_for_status()
            .json()
        )
        assert config["defaults"]["prefix"] == own
        # Names outside the scope are refused alike, existing or not: as not found.
        for name in ("exec-other", f"{PROJECT}/exec-other", "exec-bobs", "nowhere"):
            refused = scoped.get("/catalog/v1/config", params={"warehouse": name})
            assert error_of(refused) == HIDDEN, name
            assert refused.json()["error"]["message"] == (
                f"A warehouse '{name.removeprefix(PROJECT + '/')}' does not exist"
            )

        assert scoped.get(f"/catalog/v1/{own}/namespaces").status_code == 200
        for elsewhere in (other, execution.bobs.id):
            assert error_of(scoped.get(f"/catalog/v1/{elsewhere}/namespaces")) == HIDDEN
            created = scoped.post(
                f"/catalog/v1/{elsewhere}/namespaces", json={"namespace": ["intruder"]}
            )
            assert error_of(created) == HIDDEN
            # The multi-table commit an execution ends with (compute/iceberg_rest.commit_together) too.
            committed = scoped.post(
                f"/catalog/v1/{elsewhere}/transactions/commit",
                json={
                    "table-changes": [
                        {
                            "identifier": {"namespace": ["results"], "name": "e1_small"},
                            "requirements": [],
                            "updates": [
                                {
                                    "action": "set-properties",
                                    "updates": {"lakeport.status": "complete"},
                                }
                            ],
                        }
                    ]
                },
            )
            assert error_of(committed) == HIDDEN

    with pytest.raises(RESTError, match="does not exist"):
        iceberg_catalog(devcatalog, "exec-other", token=execution.token)


def test_pyiceberg_runs_with_an_execution_token_and_each_tables_vended_credentials(
    execution, devcatalog, seaweedfs
):
    catalog = iceberg_catalog(
        devcatalog, "exec-own", token=execution.token
    )  # asks for vended credentials
    catalog.create_namespace("results")
    big = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "amount": pa.array([5.0, 20.0, 40.0])})
    small = pa.table({"id": pa.array([7], pa.int64())})
    catalog.create_table("results.e1_big", schema=big.schema).append(big)
    catalog.create_table("results.e1_small", schema=small.schema).append(small)

    assert (
        catalog.load_table("results.e1_big").scan().to_arrow().sort_by("id").to_pylist()
        == big.to_pylist()
    )
    assert catalog.load_table("results.e1_small").scan().to_arrow().to_pylist() == small.to_pylist()

    big_table, small_table = (
        catalog.load_table("results.e1_big"),
        catalog.load_table("results.e1_small"),
    )
    bucket = urlsplit(big_table.location()).netloc
    assert urlsplit(small_table.location()).netloc == bucket
    # Each set reaches its own table only (scope "table", Lakekeeper's): the first table's
    # credentials cannot write into the second, the second's can.
    data_file = f"{urlsplit(small_table.location()).path}/data/written-with-the-other-tables-credentials.parquet"
    with s3_client(seaweedfs, vended_session(big_table.io.properties)) as s3:
        assert s3.put(f"/{bucket}{data_file}", content=b"not really parquet").status_code == 403
    with s3_client(seaweedfs, vended_session(small_table.io.properties)) as s3:
        assert s3.put(f"/{bucket}{data_file}", content=b"not really parquet").status_code == 200
        assert s3.get(f"/{bucket}{data_file}").content == b"not really parquet"
        assert s3.delete(f"/{bucket}{data_file}").status_code == 204

    # loadCredentials vends the same scope: the table's location.
    with checked_client(devcatalog, execution.token) as scoped:
        answer = scoped.get(
            f"/catalog/v1/{execution.own.id}/namespaces/results/tables/e1_small/credentials"
        )
        (credential,) = answer.raise_for_status().json()["storage-credentials"]
        assert credential["prefix"] == f"{small_table.location().rstrip('/')}/"
        assert credential["config"]["s3.session-token"]
        missing = scoped.get(
            f"/catalog/v1/{execution.own.id}/namespaces/results/tables/nope/credentials"
        )
        assert error_of(missing) == (404, "NoSuchTableException")


def test_vended_credentials_cannot_reach_another_warehouse(
    execution, devcatalog, seaweedfs, service_token
):
    scoped = iceberg_catalog(devcatalog, "exec-own", token=execution.token)
    scoped.create_namespace("staging")
    rows = pa.table({"id": pa.array([1], pa.int64())})
    scoped.create_table("staging.rows", schema=rows.schema).append(rows)
    own_session = vended_session(scoped.load_table("staging.rows").io.properties)

    portal = iceberg_catalog(devcatalog, "exec-other", token=service_token)
    portal.create_namespace("raw")
    events = portal.create_table("raw.events", schema=rows.schema)
    events.append(rows)
    events = portal.load_table("raw.events")
    other_session = vended_session(events.io.properties)
    (data_file,) = [task.file.file_path for task in events.scan().plan_files()]
    other_bucket, data_key = urlsplit(data_file).netloc, urlsplit(data_file).path
    foreign_file = f"/{other_bucket}{urlsplit(events.location()).path}/data/intruder.parquet"

    with (
        s3_client(seaweedfs, own_session) as intruder,
        s3_client(seaweedfs, other_session) as owner,
    ):
        assert owner.get(f"/{other_bucket}{data_key}").status_code == 200  # the path is right
        assert intruder.get(f"/{other_bucket}{data_key}").status_code == 403
        assert intruder.get(f"/{other_bucket}", params={"list-type": "2"}).status_code == 403
        assert intruder.put(foreign_file, content=b"x").status_code == 403
        assert intruder.delete(f"/{other_bucket}{data_key}").status_code == 403
        assert owner.get(f"/{other_bucket}{data_key}").status_code == 200  # still there
    # Nor the warehouses' own bucket.
    assert (
        probe_storage(
            seaweedfs.s3_location(ALICE.bucket, "exec-own"), own_session, policy=LOOPBACK_ALLOWED
        ).first_failure.name
        == "write"
    )
