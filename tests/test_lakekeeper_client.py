"""The portal's Lakekeeper client against Lakekeeper's OpenAPI contract.

Every request the client sends passes through `ContractCheckingTransport`, which checks it
against Lakekeeper's published documents before a scripted Lakekeeper answers; the scripted
answers are checked against the documents too, so they are answers Lakekeeper may give.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from urllib.parse import parse_qs

import httpx
import jwt
import pytest

from app.lakekeeper.client import DEFAULT_PROJECT_ID, LakekeeperClient
from app.lakekeeper.errors import LakekeeperError, LakekeeperUnavailable, ServiceTokenError
from app.lakekeeper.resources import (
    DeleteProfile,
    PurgeResult,
    S3AccessKeyCredential,
    S3StorageProfile,
    TableIdentifier,
    WarehouseAssignment,
    WarehouseInfo,
)
from app.lakekeeper.tokens import ClientCredentialsTokenSource, lakekeeper_user_id, warehouse_scope
from devstack.oidc_provider import SERVICE_CLIENT_ID, TEST_USERS
from devstack.seaweedfs import TEST_USER_KEYS
from tests.lakekeeper_contract import (
    ContractCheckingTransport,
    ContractViolation,
    validate_request,
    validate_response,
)
from tests.stand_ins import (
    BASE_URL,
    PERMISSIONS_PATH,
    PROJECT_ID,
    TOKEN_URL,
    WAREHOUSE_ID,
    IdentityProvider,
    ScriptedServer,
)

SECRET = "s3cr3t-Key-That-Must-Not-Leak"
CLIENT_SECRET = "service-client-secret-value"


def warehouse_json(name: str = "sales", status: str = "active") -> dict:
    return {
        "id": WAREHOUSE_ID,
        "warehouse-id": WAREHOUSE_ID,
        "name": name,
        "project-id": PROJECT_ID,
        "status": status,
        "protected": False,
        "allowed-format-versions": [1, 2, 3],
        "delete-profile": {"type": "hard"},
        "storage-profile": {
            "type": "s3",
            "bucket": "lake",
            "region": "us-east-1",
            "sts-enabled": False,
            "key-prefix": "sales",
            "endpoint": "http://127.0.0.1:9000/",
            "path-style-access": True,
            "flavor": "s3-compat",
        },
        "storage-credential-type": {"type": "s3", "credential-type": "access-key"},
    }


def error_json(status: int, error_type: str, message: str = "details") -> dict:
    return {"error": {"message": message, "type": error_type, "code": status}}


@pytest.fixture
def idp() -> IdentityProvider:
    return IdentityProvider()


@pytest.fixture
def token_source(idp):
    source = ClientCredentialsTokenSource(
        client_id="lakeport-service",
        client_secret=CLIENT_SECRET,
        token_url=TOKEN_URL,
        scope="lakekeeper",
        transport=httpx.MockTransport(idp),
    )
    yield source
    source.close()


@pytest.fixture
def lakekeeper() -> ScriptedServer:
    return ScriptedServer()


@pytest.fixture
def contract(lakekeeper) -> ContractCheckingTransport:
    return ContractCheckingTransport(httpx.MockTransport(lakekeeper))


@pytest.fixture
def client(token_source, contract):
    with LakekeeperClient(
        BASE_URL, token_source, project_id=PROJECT_ID, transport=contract, backoff=0
    ) as client:
        yield client


def find_warehouse(client: LakekeeperClient, name: str) -> WarehouseInfo | None:
    """The active warehouse called `name` in the project (Lakekeeper 0.13 lists active ones only)."""
    return next((w for w in client.list_warehouses() if w.name == name), None)


def only_request(server: ScriptedServer) -> httpx.Request:
    assert len(server.requests) == 1, [str(r.url) for r in server.requests]
    return server.requests[0]


# --- Request shapes -------------------------------------------------------------------


def test_create_warehouse_sends_the_documented_body_and_headers(client, lakekeeper, contract):
    lakekeeper.on("POST", "/management/v1/warehouse", (201, warehouse_json()))
    profile = S3StorageProfile(
        bucket="lake",
        region="us-east-1",
        key_prefix="sales",
        endpoint="http://127.0.0.1:9000/",
        path_style_access=True,
        flavor="s3-compat",
    )

    warehouse = client.create_warehouse(
        "sales",
        profile,
        S3AccessKeyCredential("AKIA1", SECRET),
        DeleteProfile.soft(3600),
    )

    request = only_request(lakekeeper)
    assert [str(op) for op in contract.operations] == [
        "create_warehouse (POST /management/v1/warehouse)"
    ]
    assert request.headers["authorization"] == "Bearer token-1"
    assert request.headers["x-project-id"] == PROJECT_ID
    assert json.loads(request.content) == {
        "warehouse-name": "sales",
        "storage-profile": {
            "type": "s3",
            "bucket": "lake",
            "region": "us-east-1",
            "sts-enabled": False,
            "key-prefix": "sales",
            "endpoint": "http://127.0.0.1:9000/",
            "path-style-access": True,
            "flavor": "s3-compat",
        },
        "storage-credential": {
            "type": "s3",
            "credential-type": "access-key",
            "access-key-id": "AKIA1",
            "secret-access-key": SECRET,
        },
        "delete-profile": {"type": "soft", "expiration-seconds": 3600},
    }
    assert warehouse.id == WAREHOUSE_ID
    assert warehouse.name == "sales" and warehouse.is_active
    assert warehouse.storage_profile == profile
    assert warehouse.storage_credential_type == "access-key"
    assert warehouse.delete_profile == DeleteProfile.hard()


def test_project_defaults_to_lakekeepers_default_project(token_source, lakekeeper, contract):
    lakekeeper.on("GET", "/management/v1/warehouse", (200, {"warehouses": []}))
    with LakekeeperClient(BASE_URL, token_source, transport=contract) as client:
        assert client.list_warehouses() == []
    assert DEFAULT_PROJECT_ID == "00000000-0000-0000-0000-000000000000"
    assert only_request(lakekeeper).headers["x-project-id"] == DEFAULT_PROJECT_ID


def test_list_warehouses_sends_no_status_filter_which_lakekeeper_013_refuses(client, lakekeeper):
    # Lakekeeper 0.13.x answers 400 to any `warehouseStatus` value (lakekeeper_contract.py says why)
    # and lists active warehouses without one.
    lakekeeper.on("GET", "/management/v1/warehouse", (200, {"warehouses": [warehouse_json()]}))

    warehouses = client.list_warehouses()

    assert only_request(lakekeeper).url.query == b""
    assert [(w.name, w.is_active) for w in warehouses] == [("sales", True)]


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/management/v1/warehouse", [("warehouseStatus", "active")]),
        (
            f"/management/v1/permissions/role/{uuid.UUID(int=7)}/assignments",
            [("relations", "assignee")],
        ),
        (
            f"/management/v1/permissions/warehouse/{uuid.UUID(int=7)}/assignments",
            [("relations", "ownership")],
        ),
    ],
)
def test_the_contract_refuses_array_query_parameters_as_lakekeeper_013_does(path, query):
    headers = {"Authorization": "Bearer t"}
    validate_request("GET", path, headers=headers)
    with pytest.raises(ContractViolation, match="answer 400 on Lakekeeper 0.13"):
        validate_request("GET", path, headers=headers, query=query)


WAREHOUSE_PATH = f"/management/v1/warehouse/{WAREHOUSE_ID}"


@pytest.mark.parametrize(
    ("call", "method", "path", "expected_body", "reply"),
    [
        (
            lambda c: c.get_warehouse(WAREHOUSE_ID),
            "GET",
            WAREHOUSE_PATH,
            None,
            (200, warehouse_json()),
        ),
        (
            lambda c: c.rename_warehouse(WAREHOUSE_ID, "sales-2024"),
            "POST",
            f"{WAREHOUSE_PATH}/rename",
            {"new-name": "sales-2024"},
            (200, warehouse_json("sales-2024")),
        ),
        (
            lambda c: c.update_storage_credential(
                WAREHOUSE_ID, S3AccessKeyCredential("AKIA2", SECRET)
            ),
            "POST",
            f"{WAREHOUSE_PATH}/storage-credential",
            {
                "new-storage-credential": {
                    "type": "s3",
                    "credential-type": "access-key",
                    "access-key-id": "AKIA2",
                    "secret-access-key": SECRET,
                }
            },
            (200, warehouse_json()),
        ),
        (
            lambda c: c.deactivate_warehouse(WAREHOUSE_ID),
            "POST",
            f"{WAREHOUSE_PATH}/deactivate",
            None,
            (200, None),
        ),
        (
            lambda c: c.activate_warehouse(WAREHOUSE_ID),
            "POST",
            f"{WAREHOUSE_PATH}/activate",
            None,
            (200, None),
        ),
        (
            lambda c: c.set_delete_profile(WAREHOUSE_ID, DeleteProfile.hard()),
            "POST",
            f"{WAREHOUSE_PATH}/delete-profile",
            {"delete-profile": {"type": "hard"}},
            (200, warehouse_json()),
        ),
        (lambda c: c.delete_warehouse(WAREHOUSE_ID), "DELETE", WAREHOUSE_PATH, None, (204, None)),
    ],
    ids=[
        "get",
        "rename",
        "rotate-credential",
        "deactivate",
        "activate",
        "delete-profile",
        "delete",
    ],
)
def test_warehouse_operations_send_documented_requests(
    client, lakekeeper, call, method, path, expected_body, reply
):
    lakekeeper.on(method, path, reply)

    result = call(client)

    request = only_request(lakekeeper)
    assert (request.method, request.url.path) == (method, path)
    assert request.headers["authorization"] == "Bearer token-1"
    assert request.headers["x-project-id"] == PROJECT_ID
    assert (json.loads(request.content) if request.content else None) == expected_body
    if reply[1] is not None:
        assert result.id == WAREHOUSE_ID and result.name == reply[1]["name"]
    else:
        assert result is None


def test_server_info(client, lakekeeper):
    lakekeeper.on(
        "GET",
        "/management/v1/info",
        (
            200,
            {
                "version": "0.13.1",
                "lakekeeper-version": "0.13.1",
                "bootstrapped": True,
                "server-id": "01968a3c-0000-7000-8000-000000000001",
                "authz-backend": "allow-all",
                "aws-system-identities-enabled": False,
                "azure-system-identities-enabled": False,
                "gcp-system-identities-enabled": False,
                "queues": ["tabular_expiration", "tabular_purge"],
                "license-status": {"license-type": "Apache-2.0", "valid": True},
                "default-project-id": DEFAULT_PROJECT_ID,
            },
        ),
    )
    info = client.server_info()
    assert (info.version, info.bootstrapped, info.authz_backend) == ("0.13.1", True, "allow-all")


# --- Iceberg REST catalog calls -------------------------------------------------------

PREFIX = WAREHOUSE_ID
LOAD_TABLE_RESULT = {
    "metadata-location": "s3://lake/sales/t/metadata/00001.metadata.json",
    "metadata": {
        "format-version": 2,
        "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
        "location": "s3://lake/sales/t",
        "last-updated-ms": 1700000000000,
        "current-snapshot-id": 2,
        "snapshots": [
            {
                "snapshot-id": 1,
                "timestamp-ms": 1600000000000,
                "manifest-list": "s3://lake/m1.avro",
                "summary": {
                    "operation": "append",
                    "total-records": "10",
                    "total-files-size": "100",
                },
            },
            {
                "snapshot-id": 2,
                "timestamp-ms": 1700000000000,
                "manifest-list": "s3://lake/m2.avro",
                "summary": {
                    "operation": "append",
                    "total-records": "42",
                    "total-files-size": "2048",
                    "total-data-files": "2",
                },
            },
        ],
    },
}


def test_catalog_prefix_comes_from_config_of_the_named_warehouse(client, lakekeeper):
    lakekeeper.on(
        "GET", "/catalog/v1/config", (200, {"defaults": {"prefix": PREFIX}, "overrides": {}})
    )
    assert client.catalog_prefix("sales") == PREFIX
    assert only_request(lakekeeper).url.params["warehouse"] == "sales"


def test_list_namespaces_follows_pages_and_encodes_the_parent(client, lakekeeper):
    path = f"/catalog/v1/{PREFIX}/namespaces"
    lakekeeper.on(
        "GET",
        path,
        (200, {"namespaces": [["raw", "a"]], "next-page-token": "p2"}),
        (200, {"namespaces": [["raw", "b"]], "next-page-token": None}),
    )

    assert client.list_namespaces(PREFIX, ("raw",)) == [("raw", "a"), ("raw", "b")]

    first, second = lakekeeper.requests
    assert b"parent=raw" in first.url.query and b"pageToken" not in first.url.query
    assert parse_qs(second.url.query.decode()) == {"parent": ["raw"], "pageToken": ["p2"]}


def test_tables_of_a_nested_namespace_use_the_unit_separator(client, lakekeeper):
    lakekeeper.on(
        "GET",
        f"/catalog/v1/{PREFIX}/namespaces/raw\x1fsales/tables",
        (
            200,
            {
                "identifiers": [
                    {"namespace": ["raw", "sales"], "name": "orders"},
                ]
            },
        ),
    )

    tables = client.list_tables(PREFIX, ("raw", "sales"))

    assert tables == [TableIdentifier(("raw", "sales"), "orders")]
    assert (
        only_request(lakekeeper).url.raw_path
        == f"/catalog/v1/{PREFIX}/namespaces/raw%1Fsales/tables".encode()
    )


def test_load_table_summarises_the_current_snapshot(client, lakekeeper):
    table = TableIdentifier(("raw",), "orders")
    lakekeeper.on(
        "GET", f"/catalog/v1/{PREFIX}/namespaces/raw/tables/orders", (200, LOAD_TABLE_RESULT)
    )

    summary = client.load_table(PREFIX, table)

    assert (summary.total_records, summary.total_files_size, summary.total_data_files) == (
        42,
        2048,
        2,
    )
    assert summary.current_snapshot_id == 2 and summary.location == "s3://lake/sales/t"
    assert (
        "x-iceberg-access-delegation" not in only_request(lakekeeper).headers
    )  # no vended credentials


def test_load_table_of_an_empty_table_has_no_counts(client, lakekeeper):
    empty = {
        "metadata": {"format-version": 2, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1"}
    }
    lakekeeper.on("GET", f"/catalog/v1/{PREFIX}/namespaces/raw/tables/new", (200, empty))
    summary = client.load_table(PREFIX, TableIdentifier(("raw",), "new"))
    assert (summary.current_snapshot_id, summary.total_records, summary.total_files_size) == (
        None,
        None,
        None,
    )


def test_purge_drops_tables_with_purge_then_namespaces_innermost_first(client, lakekeeper):
    base = f"/catalog/v1/{PREFIX}/namespaces"
    lakekeeper.on(
        "GET", "/catalog/v1/config", (200, {"defaults": {"prefix": PREFIX}, "overrides": {}})
    )
    children = {None: [["raw"]], "raw": [["raw", "deep"]], "raw\x1fdeep": []}
    lakekeeper.on(
        "GET",
        base,
        lambda request: (200, {"namespaces": children[request.url.params.get("parent")]}),
    )
    lakekeeper.on(
        "GET", f"{base}/raw/tables", (200, {"identifiers": [{"namespace": ["raw"], "name": "t1"}]})
    )
    lakekeeper.on(
        "GET",
        f"{base}/raw\x1fdeep/tables",
        (
            200,
            {
                "identifiers": [
                    {"namespace": ["raw", "deep"], "name": "t2"},
                ]
            },
        ),
    )
    for path in (
        f"{base}/raw/tables/t1",
        f"{base}/raw\x1fdeep/tables/t2",
        f"{base}/raw\x1fdeep",
        f"{base}/raw",
    ):
        lakekeeper.on("DELETE", path, (204, None))

    result = client.purge_warehouse_contents("sales")

    deletes = [
        (r.url.path, r.url.params.get("purgeRequested"))
        for r in lakekeeper.requests
        if r.method == "DELETE"
    ]
    assert deletes == [
        (f"{base}/raw\x1fdeep/tables/t2", "true"),
        (f"{base}/raw\x1fdeep", None),
        (f"{base}/raw/tables/t1", "true"),
        (f"{base}/raw", None),
    ]
    assert (result.tables_dropped, result.namespaces_dropped) == (2, 2)


# --- Errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type", "expected"),
    [
        (409, "WarehouseAlreadyExists", "already exists"),
        (400, "CreateWarehouseStorageProfileOverlap", "overlaps an existing warehouse"),
        (400, "IoOperationFailed", "could not write to the bucket with these credentials"),
        (404, "NoSuchWarehouseException", "no longer exists"),
        (409, "WarehouseHasUnfinishedTasks", "still purging"),
        (401, "Unauthorized", "did not accept the portal's credentials"),
        (403, "Forbidden", "refused this operation"),
        (500, "InternalServerError", "failed to process the request"),
        (400, "InvalidWarehouseName", "rejected the request: details"),
    ],
)
def test_errors_map_to_messages_for_users(client, lakekeeper, status, error_type, expected):
    lakekeeper.on("POST", "/management/v1/warehouse", (status, error_json(status, error_type)))

    with pytest.raises(LakekeeperError) as raised:
        client.create_warehouse(
            "sales", S3StorageProfile("lake", "us-east-1"), S3AccessKeyCredential("AKIA", SECRET)
        )

    error = raised.value
    assert (error.status, error.type, error.message) == (status, error_type, "details")
    assert error.operation == "create_warehouse"
    assert expected in error.user_message
    assert not isinstance(error, LakekeeperUnavailable)


def test_rename_of_a_missing_or_inactive_warehouse_says_why(client, lakekeeper):
    lakekeeper.on(
        "POST", f"{WAREHOUSE_PATH}/rename", (404, error_json(404, "NoSuchWarehouseException"))
    )
    with pytest.raises(LakekeeperError) as raised:
        client.rename_warehouse(WAREHOUSE_ID, "new")
    assert "Only active warehouses can be renamed" in raised.value.user_message


def test_an_answer_that_breaks_the_contract_is_an_error_not_a_crash(token_source, lakekeeper):
    # Without the contract-checking transport: the point is an answer Lakekeeper must not give.
    lakekeeper.on("GET", WAREHOUSE_PATH, (200, {"name": "sales"}))
    with LakekeeperClient(
        BASE_URL, token_source, transport=httpx.MockTransport(lakekeeper)
    ) as client:
        with pytest.raises(LakekeeperError) as raised:
            client.get_warehouse(WAREHOUSE_ID)
    assert raised.value.type == "UnexpectedResponse"
    assert "does not understand" in raised.value.user_message


def test_unreachable_catalog(token_source):
    def refuse(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with LakekeeperClient(
        BASE_URL, token_source, transport=httpx.MockTransport(refuse), backoff=0
    ) as client:
        with pytest.raises(LakekeeperUnavailable) as raised:
            client.list_warehouses()
    assert raised.value.user_message.startswith("The catalog (Lakekeeper) is unreachable")
    assert raised.value.status is None and not raised.value.outcome_unknown


# --- Retries --------------------------------------------------------------------------


def test_get_is_retried_after_503(client, lakekeeper):
    lakekeeper.on(
        "GET", WAREHOUSE_PATH, (503, error_json(503, "ServiceUnavailable")), (200, warehouse_json())
    )
    assert client.get_warehouse(WAREHOUSE_ID).id == WAREHOUSE_ID
    assert len(lakekeeper.requests) == 2


def test_get_gives_up_after_the_configured_retries(client, lakekeeper):
    lakekeeper.on("GET", WAREHOUSE_PATH, httpx.ReadTimeout("timed out"))
    with pytest.raises(LakekeeperUnavailable):
        client.get_warehouse(WAREHOUSE_ID)
    assert len(lakekeeper.requests) == 1 + client.retries == 3


def test_create_that_times_out_is_not_retried(client, lakekeeper):
    lakekeeper.on(
        "POST", "/management/v1/warehouse", httpx.ReadTimeout("timed out"), (201, warehouse_json())
    )

    with pytest.raises(LakekeeperUnavailable) as raised:
        client.create_warehouse("sales", S3StorageProfile("lake", "us-east-1"))

    assert len(lakekeeper.requests) == 1
    assert raised.value.outcome_unknown
    assert "unknown whether the change was made" in raised.value.user_message


def test_create_answered_503_is_not_retried(client, lakekeeper):
    lakekeeper.on(
        "POST",
        "/management/v1/warehouse",
        (503, error_json(503, "ServiceUnavailable")),
        (201, warehouse_json()),
    )
    with pytest.raises(LakekeeperError) as raised:
        client.create_warehouse("sales", S3StorageProfile("lake", "us-east-1"))
    assert raised.value.status == 503
    assert len(lakekeeper.requests) == 1


def test_rename_sets_an_absolute_name_and_is_retried(client, lakekeeper):
    lakekeeper.on(
        "POST",
        f"{WAREHOUSE_PATH}/rename",
        httpx.ReadTimeout("timed out"),
        (200, warehouse_json("new")),
    )
    assert client.rename_warehouse(WAREHOUSE_ID, "new").name == "new"
    assert [json.loads(r.content) for r in lakekeeper.requests] == [{"new-name": "new"}] * 2


def test_delete_whose_first_answer_was_lost_counts_404_as_done(client, lakekeeper):
    lakekeeper.on(
        "DELETE",
        WAREHOUSE_PATH,
        httpx.ReadTimeout("timed out"),
        (404, error_json(404, "NoSuchWarehouseException")),
    )
    client.delete_warehouse(WAREHOUSE_ID)
    assert len(lakekeeper.requests) == 2


def test_delete_of_a_missing_warehouse_is_an_error(client, lakekeeper):
    lakekeeper.on("DELETE", WAREHOUSE_PATH, (404, error_json(404, "NoSuchWarehouseException")))
    with pytest.raises(LakekeeperError) as raised:
        client.delete_warehouse(WAREHOUSE_ID)
    assert raised.value.type == "NoSuchWarehouseException"


# --- Tokens ---------------------------------------------------------------------------


def test_token_is_fetched_once_and_reused(client, lakekeeper, idp):
    lakekeeper.on("GET", WAREHOUSE_PATH, (200, warehouse_json()))
    for _ in range(3):
        client.get_warehouse(WAREHOUSE_ID)

    assert len(idp.token_requests) == 1
    form = parse_qs(idp.token_requests[0].content.decode())
    assert form == {
        "grant_type": ["client_credentials"],
        "scope": ["lakekeeper"],
        "client_id": ["lakeport-service"],
        "client_secret": [CLIENT_SECRET],
    }
    assert {r.headers["authorization"] for r in lakekeeper.requests} == {"Bearer token-1"}


def test_token_is_renewed_shortly_before_it_expires(idp):
    now = [1000.0]
    source = ClientCredentialsTokenSource(
        client_id="lakeport-service",
        client_secret=CLIENT_SECRET,
        token_url=TOKEN_URL,
        refresh_margin=60,
        transport=httpx.MockTransport(idp),
        clock=lambda: now[0],
    )
    assert source.token() == "token-1"
    now[0] += 3600 - 61
    assert source.token() == "token-1"
    now[0] += 2
    assert source.token() == "token-2"


def test_concurrent_callers_share_one_token_request():
    requests = []

    def slow_provider(request):
        requests.append(request)
        time.sleep(0.2)
        return httpx.Response(200, json={"access_token": "shared", "expires_in": 3600})

    source = ClientCredentialsTokenSource(
        client_id="lakeport-service",
        client_secret=CLIENT_SECRET,
        token_url=TOKEN_URL,
        transport=httpx.MockTransport(slow_provider),
    )
    tokens = []
    threads = [threading.Thread(target=lambda: tokens.append(source.token())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert tokens == ["shared"] * 8
    assert len(requests) == 1


def test_token_endpoint_is_discovered_from_the_issuer_and_basic_auth_works(idp):
    source = ClientCredentialsTokenSource(
        client_id="lakeport-service",
        client_secret=CLIENT_SECRET,
        issuer="http://idp.test",
        resource="urn:lakeport:lakekeeper",
        auth_method="client_secret_basic",
        transport=httpx.MockTransport(idp),
    )
    assert source.token() == "token-1"
    discovery, token_request = idp.requests
    assert discovery.url.path == "/.well-known/openid-configuration"
    assert (
        token_request.headers["authorization"]
        == httpx.BasicAuth("lakeport-service", CLIENT_SECRET)._auth_header
    )
    assert parse_qs(token_request.content.decode()) == {
        "grant_type": ["client_credentials"],
        "resource": ["urn:lakeport:lakekeeper"],
    }


def test_a_refused_token_is_replaced_once(client, lakekeeper, idp):
    lakekeeper.on(
        "GET", WAREHOUSE_PATH, (401, error_json(401, "Unauthorized")), (200, warehouse_json())
    )
    client.get_warehouse(WAREHOUSE_ID)
    assert [r.headers["authorization"] for r in lakekeeper.requests] == [
        "Bearer token-1",
        "Bearer token-2",
    ]

    lakekeeper.on("GET", WAREHOUSE_PATH, (401, error_json(401, "Unauthorized")))
    with pytest.raises(LakekeeperError) as raised:
        client.get_warehouse(WAREHOUSE_ID)
    assert raised.value.status == 401
    assert len(idp.token_requests) == 3  # one renewal per call, no loop


def test_identity_provider_refusal_and_outage(lakekeeper, contract):
    def refusing(request):
        return httpx.Response(
            401, json={"error": "invalid_client", "error_description": "authentication failed"}
        )

    def down(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    for provider, expected in [
        (refusing, "refused the portal's catalog credentials"),
        (down, "unreachable"),
    ]:
        source = ClientCredentialsTokenSource(
            client_id="lakeport-service",
            client_secret=CLIENT_SECRET,
            token_url=TOKEN_URL,
            transport=httpx.MockTransport(provider),
        )
        with source, LakekeeperClient(BASE_URL, source, transport=contract) as client:
            with pytest.raises(ServiceTokenError) as raised:
                client.list_warehouses()
        assert expected in raised.value.user_message
        assert raised.value.operation == "list_warehouses"
        assert CLIENT_SECRET not in str(raised.value)
    assert lakekeeper.requests == []


def test_service_token_from_the_real_identity_provider(oidc_provider):
    with ClientCredentialsTokenSource(
        client_id=SERVICE_CLIENT_ID,
        client_secret=oidc_provider.service_client_secret,
        issuer=oidc_provider.issuer,
    ) as source:
        token = source.token()
        assert source.token() == token  # cached, not re-issued

    discovery = httpx.get(oidc_provider.discovery_url).json()
    signing_key = jwt.PyJWKClient(discovery["jwks_uri"]).get_signing_key_from_jwt(token)
    claims = jwt.decode(
        token,
        signing_key.key,
        algorithms=["RS256"],
        audience="lakekeeper",
        issuer=oidc_provider.issuer,
    )
    assert claims["sub"] == SERVICE_CLIENT_ID

    with ClientCredentialsTokenSource(
        client_id=SERVICE_CLIENT_ID,
        client_secret="not-the-secret",
        issuer=oidc_provider.issuer,
    ) as refused:
        with pytest.raises(ServiceTokenError) as raised:
            refused.token()
    assert (raised.value.status, raised.value.type) == (401, "invalid_client")


ALICE_SUB = "8d7c54f0-1f0e-4d5a-9a51-6d2f1f7c9b10"


def test_user_tokens_are_exchanged_fresh_for_the_user_and_one_warehouse(client, token_source, idp):
    service_token = token_source.token()
    first = client.user_token(ALICE_SUB, WAREHOUSE_ID)
    second = token_source.user_token(ALICE_SUB, WAREHOUSE_ID)

    assert (first.access_token, second.access_token) == (
        "token-2",
        "token-3",
    )  # never cached or shared
    assert first.scope == f"warehouse:{WAREHOUSE_ID}"
    assert first.expires_in == 3600
    form = {
        key: values[0] for key, values in parse_qs(idp.token_requests[1].content.decode()).items()
    }
    assert form == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": service_token,  # the service client's own token, as RFC 8693 asks
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "requested_subject": ALICE_SUB,
        "audience": "lakekeeper",
        "scope": f"warehouse:{WAREHOUSE_ID}",
        "client_id": "lakeport-service",
        "client_secret": CLIENT_SECRET,
    }
    assert token_source.token() == service_token  # the service token's cache is untouched
    assert "token-2" not in repr(first)


def test_user_tokens_without_the_narrowing_scope_for_providers_without_dynamic_scopes(idp):
    with ClientCredentialsTokenSource(
        client_id="lakeport-service",
        client_secret=CLIENT_SECRET,
        token_url=TOKEN_URL,
        audience="lakekeeper-api",
        narrow_to_warehouse=False,
        transport=httpx.MockTransport(idp),
    ) as keycloak_like:
        token = keycloak_like.user_token(ALICE_SUB, WAREHOUSE_ID)
    form = parse_qs(idp.token_requests[-1].content.decode())
    assert "scope" not in form and token.scope == ""
    assert form["audience"] == ["lakekeeper-api"] and form["requested_subject"] == [ALICE_SUB]


def test_a_narrowed_user_token_is_never_handed_out_without_its_scope():
    def ignoring_scopes(request):
        return httpx.Response(200, json={"access_token": "reaches-everything", "expires_in": 3600})

    def refusing(request):
        if "token-exchange" in request.content.decode():
            return httpx.Response(
                400, json={"error": "invalid_grant", "error_description": "unknown subject"}
            )
        return ignoring_scopes(request)

    for provider, error_type in [(ignoring_scopes, "ScopeNotGranted"), (refusing, "invalid_grant")]:
        with ClientCredentialsTokenSource(
            client_id="lakeport-service",
            client_secret=CLIENT_SECRET,
            token_url=TOKEN_URL,
            transport=httpx.MockTransport(provider),
        ) as source:
            with pytest.raises(ServiceTokenError) as raised:
                source.user_token(ALICE_SUB, WAREHOUSE_ID)
        assert (raised.value.type, raised.value.operation) == (error_type, "user_token")
        assert "reaches-everything" not in str(raised.value)
        assert "acting as this user for one warehouse" in raised.value.user_message
    with pytest.raises(ValueError):
        warehouse_scope("sales-lake")  # a name, not Lakekeeper's id


def test_user_token_from_the_real_identity_provider(oidc_provider):
    alice = TEST_USERS["alice"]
    with ClientCredentialsTokenSource(
        client_id=SERVICE_CLIENT_ID,
        client_secret=oidc_provider.service_client_secret,
        issuer=oidc_provider.issuer,
    ) as source:
        scoped = source.user_token(alice.sub, WAREHOUSE_ID)
        with pytest.raises(ServiceTokenError) as unknown:
            source.user_token("nobody-at-this-provider", WAREHOUSE_ID)
    assert unknown.value.type == "invalid_grant"

    discovery = httpx.get(oidc_provider.discovery_url).json()
    signing_key = jwt.PyJWKClient(discovery["jwks_uri"]).get_signing_key_from_jwt(
        scoped.access_token
    )
    claims = jwt.decode(
        scoped.access_token,
        signing_key.key,
        algorithms=["RS256"],
        audience="lakekeeper",
        issuer=oidc_provider.issuer,
    )
    assert claims["sub"] == alice.sub and claims["act"] == {"sub": SERVICE_CLIENT_ID}
    assert claims["scope"] == scoped.scope == f"warehouse:{WAREHOUSE_ID}"
    assert claims["exp"] - claims["iat"] == scoped.expires_in == oidc_provider.user_token_ttl


# --- Users and grants (OpenFGA authorizer) ----------------------------------------------


def user_json(user_id: str, name: str = "Alice Liddell") -> dict:
    return {
        "id": user_id,
        "name": name,
        "email": "alice@example.test",
        "user-type": "human",
        "last-updated-with": "create-endpoint",
        "created-at": "2026-01-01T00:00:00Z",
    }


def test_lakekeeper_names_users_after_their_subject():
    assert lakekeeper_user_id(ALICE_SUB) == f"oidc~{ALICE_SUB}"
    for bad in ("", " padded "):
        with pytest.raises(ValueError):
            lakekeeper_user_id(bad)


def test_users_provision_themselves_with_their_own_token(client, lakekeeper):
    lakekeeper.on("POST", "/management/v1/user", (201, user_json(f"oidc~{ALICE_SUB}")))
    lakekeeper.on(
        "GET",
        "/management/v1/whoami",
        (200, {**user_json(f"oidc~{ALICE_SUB}"), "is-instance-admin": False}),
    )

    user = client.provision_user("alices-exchanged-token")
    assert client.whoami("alices-exchanged-token") == user
    assert (user.id, user.name, user.user_type) == (f"oidc~{ALICE_SUB}", "Alice Liddell", "human")
    provision, whoami = lakekeeper.requests
    assert json.loads(provision.content) == {"update-if-exists": True}  # no id: the token's holder
    for request in (provision, whoami):
        assert request.headers["authorization"] == "Bearer alices-exchanged-token"
        assert request.headers["x-project-id"] == PROJECT_ID


def test_a_refused_user_token_does_not_renew_the_service_token(client, lakekeeper, idp):
    lakekeeper.on("GET", "/management/v1/whoami", (401, error_json(401, "UnauthorizedError")))
    with pytest.raises(LakekeeperError) as raised:
        client.whoami("expired-user-token")
    assert raised.value.status == 401
    assert len(lakekeeper.requests) == 1 and idp.token_requests == []


def test_warehouse_assignments_are_read_and_changed_as_documented(client, lakekeeper):
    alice, portal = f"oidc~{ALICE_SUB}", "oidc~lakeport-service"
    lakekeeper.on(
        "GET",
        PERMISSIONS_PATH,
        (
            200,
            {
                "assignments": [
                    {"type": "ownership", "user": portal},
                    {"type": "select", "role": "01968a3c-0000-7000-8000-000000000001"},
                ]
            },
        ),
    )
    lakekeeper.on("POST", PERMISSIONS_PATH, (204, None))

    client.grant_sole_ownership(WAREHOUSE_ID, alice)

    read, update = lakekeeper.requests
    assert (read.method, update.method) == ("GET", "POST")
    body = json.loads(update.content)
    assert body["writes"] == [{"type": "ownership", "user": alice}]
    # Nobody else keeps a grant: not the creator (the portal), not a role.
    assert sorted(body["deletes"], key=json.dumps) == sorted(
        [
            {"type": "ownership", "user": portal},
            {"type": "select", "role": "01968a3c-0000-7000-8000-000000000001"},
        ],
        key=json.dumps,
    )


def test_grants_already_in_place_are_not_written_again(client, lakekeeper):
    alice = f"oidc~{ALICE_SUB}"
    lakekeeper.on(
        "GET", PERMISSIONS_PATH, (200, {"assignments": [{"type": "ownership", "user": alice}]})
    )
    client.grant_sole_ownership(WAREHOUSE_ID, alice)
    assert [r.method for r in lakekeeper.requests] == ["GET"]


ROLE_ID = "01968a3c-0000-7000-8000-0000000000aa"
ROLE_PERMISSIONS_PATH = f"/management/v1/permissions/role/{ROLE_ID}/assignments"


def test_a_groups_role_is_made_and_its_assignees_changed_as_documented(
    client, lakekeeper, contract
):
    alice, bob = f"oidc~{ALICE_SUB}", "oidc~bob"
    lakekeeper.on(
        "POST",
        "/management/v1/role",
        (
            201,
            {
                "id": ROLE_ID,
                "ident": f"lakekeeper~{ROLE_ID}",
                "provider-id": "lakekeeper",
                "source-id": ROLE_ID,
                "name": "lakeport-group-analytics",
                "project-id": PROJECT_ID,
                "created-at": "2026-11-25T06:00:00Z",
            },
        ),
    )
    lakekeeper.on(
        "GET",
        ROLE_PERMISSIONS_PATH,
        (
            200,
            {
                "assignments": [
                    {"type": "assignee", "user": alice},
                    {"type": "ownership", "user": bob},
                ]
            },
        ),
    )
    lakekeeper.on("POST", ROLE_PERMISSIONS_PATH, (204, None))

    role = client.create_role("lakeport-group-analytics", "Members of analytics")
    assert (role.id, role.name) == (ROLE_ID, "lakeport-group-analytics")
    assert client.role_members(ROLE_ID) == {alice}  # assignees only
    client.update_role_members(ROLE_ID, add={bob}, remove={alice})
    client.update_role_members(ROLE_ID)  # nothing to change: nothing sent
    made, read, changed = lakekeeper.requests
    assert json.loads(made.content) == {
        "name": "lakeport-group-analytics",
        "description": "Members of analytics",
    }
    assert (
        read.url.query == b""
    )  # every relation, assignees picked by the client (0.13 refuses ?relations=)
    assert json.loads(changed.content) == {
        "writes": [{"type": "assignee", "user": bob}],
        "deletes": [{"type": "assignee", "user": alice}],
    }
    assert [str(op).split(" ")[0] for op in contract.operations] == [
        "create_role",
        "get_role_assignments_by_id",
        "update_role_assignments_by_id",
    ]


def test_grants_are_set_changed_and_a_role_deleted_as_documented(client, lakekeeper, contract):
    alice, bob = f"oidc~{ALICE_SUB}", "oidc~bob"
    lakekeeper.on(
        "GET", PERMISSIONS_PATH, (200, {"assignments": [{"type": "ownership", "user": alice}]})
    )
    lakekeeper.on("POST", PERMISSIONS_PATH, (204, None))
    lakekeeper.on("DELETE", f"/management/v1/role/{ROLE_ID}", (204, None))

    client.set_warehouse_assignments(  # an archive: ownership becomes describe and select
        WAREHOUSE_ID,
        [WarehouseAssignment("describe", user=alice), WarehouseAssignment("select", user=alice)],
    )
    client.update_warehouse_assignments(
        WAREHOUSE_ID, writes=[WarehouseAssignment("select", user=bob)]
    )
    client.delete_role(ROLE_ID)

    assert [op.operation_id for op in contract.operations] == [
        "get_warehouse_assignments_by_id",
        "update_warehouse_assignments_by_id",
        "update_warehouse_assignments_by_id",
        "delete_role",
    ]
    _, archived, shared, _ = lakekeeper.requests
    assert json.loads(archived.content) == {
        "writes": [{"type": "describe", "user": alice}, {"type": "select", "user": alice}],
        "deletes": [{"type": "ownership", "user": alice}],
    }
    assert json.loads(shared.content) == {
        "writes": [{"type": "select", "user": bob}],
        "deletes": [],
    }


def test_every_lakekeeper_operation_of_the_client_is_driven_through_the_contract_here():
    """Each request the client can send is named in `LakekeeperClient._call`; each of those
    methods is called by a test of this module, where every exchange passes the contract."""
    import ast
    import inspect

    from app.lakekeeper import client as client_module

    operations = {
        node.args[0].value
        for node in ast.walk(ast.parse(inspect.getsource(client_module)))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", None) == "_call"
        and isinstance(node.args[0], ast.Constant)
    }
    assert len(operations) >= 20
    assert operations <= set(dir(LakekeeperClient))  # each named after the method sending it
    this_module = inspect.getsource(
        inspect.getmodule(test_warehouse_lifecycle_against_the_dev_catalog)
    )
    called = {name for name in dir(LakekeeperClient) if f".{name}(" in this_module}
    while True:  # and what those methods call in turn (a purge drops tables and namespaces)
        reached = called | {
            name
            for caller in called
            if callable(getattr(LakekeeperClient, caller))
            for name in operations
            if f"self.{name}(" in inspect.getsource(getattr(LakekeeperClient, caller))
        }
        if reached == called:
            break
        called = reached
    assert sorted(operations - called) == []


def test_an_assignment_names_one_known_relation_and_one_holder():
    for relation, holder in (
        ("owner", {"user": "oidc~a"}),
        ("select", {}),
        ("select", {"user": "oidc~a", "role": "01968a3c-0000-7000-8000-000000000001"}),
    ):
        with pytest.raises(ValueError):
            WarehouseAssignment(relation, **holder)


# --- Secrets ----------------------------------------------------------------------------


def test_secrets_stay_out_of_reprs_errors_and_logs(client, lakekeeper, token_source, caplog):
    caplog.set_level(logging.DEBUG)
    credential = S3AccessKeyCredential("AKIA1", SECRET)
    # A server that echoes the secret in its error message (Lakekeeper does not; be sure anyway).
    lakekeeper.on(
        "POST",
        f"{WAREHOUSE_PATH}/storage-credential",
        (503, error_json(503, "ServiceUnavailable")),
        (400, error_json(400, "IoOperationFailed", f"access denied for key {SECRET}")),
    )

    with pytest.raises(LakekeeperError) as raised:
        client.update_storage_credential(WAREHOUSE_ID, credential)

    assert len(lakekeeper.requests) == 2  # the retry was logged too
    texts = [
        repr(credential),
        str(credential),
        repr(token_source),
        repr(client),
        str(raised.value),
        raised.value.user_message,
        caplog.text,
    ]
    for text in texts:
        assert SECRET not in text and CLIENT_SECRET not in text and "token-1" not in text
    assert "AKIA1" in repr(credential)
    assert "retry 1 of 2" in caplog.text


# --- The contract oracle itself -------------------------------------------------------


def test_contract_rejects_what_lakekeeper_would_not_accept():
    headers = {"Authorization": "Bearer t"}
    good = {"warehouse-name": "w", "storage-profile": S3StorageProfile("b", "r").to_api()}
    assert (
        str(validate_request("POST", "/management/v1/warehouse", body=good, headers=headers))
        == "create_warehouse (POST /management/v1/warehouse)"
    )

    snake_case = {"warehouse_name": "w", "storage_profile": good["storage-profile"]}
    with pytest.raises(
        ContractViolation, match=r"(?s)create_warehouse .*'warehouse-name' is a required property"
    ):
        validate_request("POST", "/management/v1/warehouse", body=snake_case, headers=headers)
    with pytest.raises(ContractViolation, match="Authorization"):
        validate_request("POST", "/management/v1/warehouse", body=good)
    with pytest.raises(ContractViolation, match=r"(?s)rename_warehouse .*warehouse_id"):
        validate_request(
            "POST",
            "/management/v1/warehouse/not-a-uuid/rename",
            body={"new-name": "x"},
            headers=headers,
        )
    with pytest.raises(ContractViolation, match="no such operation"):
        validate_request("PUT", "/management/v1/warehouse", headers=headers)


def test_contract_holds_responses_to_the_documents():
    path = f"/management/v1/warehouse/{WAREHOUSE_ID}"
    validate_response("GET", path, 200, body=warehouse_json())
    incomplete = {k: v for k, v in warehouse_json().items() if k != "storage-profile"}
    with pytest.raises(
        ContractViolation, match=r"(?s)get_warehouse .*'storage-profile' is a required property"
    ):
        validate_response("GET", path, 200, body=incomplete)
    with pytest.raises(ContractViolation, match="status 202 is not a documented response"):
        validate_response("GET", path, 202, body=warehouse_json())
    # Error statuses a document does not list still need the error envelope.
    validate_response(
        "GET", "/catalog/v1/config", 404, body=error_json(404, "NoSuchWarehouseException")
    )
    with pytest.raises(ContractViolation, match="not an IcebergErrorResponse"):
        validate_response("GET", "/catalog/v1/config", 404, body={"message": "not found"})


# --- Against the dev catalog, with the real identity provider and SeaweedFS -----------


@pytest.fixture
def service_tokens(oidc_provider):
    with ClientCredentialsTokenSource(
        client_id=SERVICE_CLIENT_ID,
        client_secret=oidc_provider.service_client_secret,
        issuer=oidc_provider.issuer,
    ) as tokens:
        yield tokens


@pytest.fixture
def live_client(devcatalog, service_tokens):
    contract = ContractCheckingTransport(httpx.HTTPTransport())
    with LakekeeperClient(devcatalog.url, service_tokens, transport=contract) as client:
        yield client


def create_table(catalog_url: str, token: str, prefix: str, namespace: str, table: str) -> None:
    """Create a namespace and an empty table the way an Iceberg client does (the portal never
    creates tables; pipelines do), through the contract check as well."""
    with httpx.Client(
        base_url=f"{catalog_url}/catalog/v1/{prefix}",
        headers={"Authorization": f"Bearer {token}"},
        transport=ContractCheckingTransport(httpx.HTTPTransport()),
    ) as iceberg:
        for response in (
            iceberg.post("/namespaces", json={"namespace": [namespace]}),
            iceberg.post(
                f"/namespaces/{namespace}/tables",
                json={
                    "name": table,
                    "schema": {
                        "type": "struct",
                        "schema-id": 0,
                        "fields": [
                            {"id": 1, "name": "id", "type": "long", "required": True},
                        ],
                    },
                },
            ),
        ):
            assert response.is_success, response.text


def delete_when_purges_are_done(
    client: LakekeeperClient, warehouse_id: str, patience: float = 20.0
) -> None:
    deadline = time.monotonic() + patience
    while True:
        try:
            return client.delete_warehouse(warehouse_id)
        except LakekeeperError as error:
            if error.type != "WarehouseHasUnfinishedTasks" or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_warehouse_lifecycle_against_the_dev_catalog(
    live_client, devcatalog, service_tokens, seaweedfs
):
    alice = TEST_USER_KEYS["alice"]
    run = uuid.uuid4().hex[:8]
    profile = S3StorageProfile(
        bucket=alice.bucket,
        region=seaweedfs.region,
        key_prefix=f"client-test/{run}",
        endpoint=seaweedfs.s3_endpoint,
        path_style_access=True,
        flavor="s3-compat",
    )
    keys = S3AccessKeyCredential(alice.access_key_id, alice.secret_access_key)
    name = f"client-test-{run}"
    assert live_client.server_info().bootstrapped

    with pytest.raises(LakekeeperError) as refused:
        live_client.create_warehouse(
            name, profile, S3AccessKeyCredential(alice.access_key_id, "wrong-secret")
        )
    assert refused.value.user_message.startswith("Lakekeeper could not write to the bucket")

    created = live_client.create_warehouse(name, profile, keys)
    assert (created.name, created.storage_profile.bucket, created.storage_credential_type) == (
        name,
        alice.bucket,
        "access-key",
    )

    with pytest.raises(LakekeeperError) as overlap:
        live_client.create_warehouse(f"{name}-2", profile, keys)
    assert "overlaps an existing warehouse" in overlap.value.user_message
    with pytest.raises(LakekeeperError) as taken:
        live_client.create_warehouse(
            name, dataclasses.replace(profile, key_prefix=f"other/{run}"), keys
        )
    assert "already exists" in taken.value.user_message

    owner = [WarehouseAssignment("ownership", user=lakekeeper_user_id(TEST_USERS["alice"].sub))]
    live_client.grant_sole_ownership(created.id, owner[0].user)
    assert live_client.warehouse_assignments(created.id) == owner

    renamed = live_client.rename_warehouse(created.id, f"{name}-renamed")
    assert live_client.get_warehouse(created.id).name == renamed.name == f"{name}-renamed"
    assert (
        live_client.warehouse_assignments(created.id) == owner
    )  # grants follow the id, not the name
    live_client.update_storage_credential(created.id, keys)
    live_client.set_delete_profile(created.id, DeleteProfile.hard())

    live_client.deactivate_warehouse(created.id)
    assert live_client.get_warehouse(created.id).status == "inactive"
    assert renamed.name not in [w.name for w in live_client.list_warehouses()]
    live_client.activate_warehouse(created.id)

    prefix = live_client.catalog_prefix(renamed.name)
    assert prefix == created.id
    create_table(devcatalog.url, service_tokens.token(), prefix, "raw", "orders")
    assert live_client.list_namespaces(prefix) == [("raw",)]
    orders = TableIdentifier(("raw",), "orders")
    assert live_client.list_tables(prefix, ("raw",)) == [orders]
    assert live_client.load_table(prefix, orders).total_records is None  # no snapshot yet

    assert live_client.purge_warehouse_contents(renamed.name) == PurgeResult(1, 1)
    assert live_client.list_namespaces(prefix) == []
    delete_when_purges_are_done(live_client, created.id)
    assert find_warehouse(live_client, renamed.name) is None
