"""One test per row of the dev catalog's behaviour table (devstack/devcatalog/README.md): the
dev catalog as the stack runs it (the session's `devcatalog` fixture with its SeaweedFS),
checked against what Lakekeeper v0.13.3 does. Each docstring names the Lakekeeper source
(lakekeeper/lakekeeper, tag v0.13.3) the row was read from.

Requests go out unchecked by the OpenAPI contract here: some rows are about answers Lakekeeper
gives to requests its document allows but its server refuses (array query parameters)."""

from __future__ import annotations

import re
import threading
import uuid

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError

from devstack.oidc_provider import TEST_USERS
from devstack.seaweedfs import warehouse_table_bucket
from tests.catalogs import ALICE, access_key, s3_profile

PROJECT = str(uuid.uuid4())
ALICE_USER = TEST_USERS["alice"]
VENDED = {"X-Iceberg-Access-Delegation": "vended-credentials"}


def client(devcatalog, token: str, project: str | None = PROJECT) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    if project is not None:
        headers["x-project-id"] = project
    return httpx.Client(base_url=devcatalog.url, timeout=30, headers=headers)


@pytest.fixture
def api(devcatalog, service_token):
    with client(devcatalog, service_token) as api:
        yield api


def create_warehouse(api, seaweedfs, *, delete_profile=None) -> dict:
    name = f"behaviour-{uuid.uuid4().hex[:8]}"
    created = api.post(
        "/management/v1/warehouse",
        json={
            "warehouse-name": name,
            "storage-profile": s3_profile(seaweedfs, name),
            "storage-credential": access_key(ALICE.credentials),
            "delete-profile": delete_profile or {"type": "hard"},
        },
    )
    assert created.status_code == 201, created.text
    return created.json()


@pytest.fixture
def warehouse(api, seaweedfs):
    created = create_warehouse(api, seaweedfs)
    yield created
    api.delete(f"/management/v1/warehouse/{created['warehouse-id']}")


def iceberg(devcatalog, warehouse: dict, token: str):
    return load_catalog(
        "behaviour",
        type="rest",
        uri=f"{devcatalog.url}/catalog",
        token=token,
        warehouse=f"{PROJECT}/{warehouse['name']}",
    )


def envelope(response: httpx.Response) -> dict:
    """Lakekeeper's (Iceberg's) error model, checked to have exactly its fields."""
    error = response.json()["error"]
    assert {"message", "type", "code"} <= set(error) <= {"message", "type", "code", "stack"}
    assert error["code"] == response.status_code
    return error


def test_array_query_parameters_answer_400_as_axum_query_does(api, warehouse):
    """lakekeeper v0.13.3 crates/lakekeeper/src/api/management/mod.rs (`Query<ListWarehousesRequest>`,
    `warehouse_status: Option<Vec<_>>` in api/management/v1/warehouse/mod.rs) and
    crates/authz-openfga/src/api.rs (`Get{Warehouse,Role}AssignmentsQuery.relations`): axum's
    `Query` cannot fill a `Vec` from any form, so every value answers axum's plain-text 400
    (tokio-rs/axum axum/src/extract/rejection.rs); fixed on main only (management_query_arrays.rs)."""
    role = (
        api.post("/management/v1/role", json={"name": f"r-{uuid.uuid4().hex[:6]}"})
        .raise_for_status()
        .json()
    )
    refused = [
        ("/management/v1/warehouse", [("warehouseStatus", "active")]),
        (
            "/management/v1/warehouse",
            [("warehouseStatus", "active"), ("warehouseStatus", "inactive")],
        ),
        (
            f"/management/v1/permissions/warehouse/{warehouse['warehouse-id']}/assignments",
            [("relations", "ownership")],
        ),
        (f"/management/v1/permissions/role/{role['id']}/assignments", [("relations", "assignee")]),
    ]
    for path, query in refused:
        answer = api.get(path, params=query)
        assert answer.status_code == 400, (path, query, answer.text)
        assert answer.headers["content-type"].startswith("text/plain")
        assert (
            answer.text
            == f'Failed to deserialize query string: invalid type: string "{query[0][1]}", expected a sequence'
        )
        assert (
            api.get(path).status_code == 200
        )  # without the filter: the default (active, every relation)
    api.delete(f"/management/v1/role/{role['id']}")


def test_errors_have_lakekeepers_envelope(api):
    """lakekeeper v0.13.3 crates/iceberg-ext/src/catalog/rest/error.rs (`IcebergErrorResponse`
    {error: ErrorModel{message, type, code, stack}}); type names from the handlers, e.g.
    `NoSuchWarehouseException` of `WarehouseIdNotFound` / `WarehouseNameNotFound`
    (crates/lakekeeper/src/service/catalog_store/warehouse.rs), which the portal's messages key on."""
    unknown = uuid.uuid4()
    missing = api.get(f"/management/v1/warehouse/{unknown}")
    assert missing.status_code == 404
    assert envelope(missing) | {"stack": None} == {
        "type": "NoSuchWarehouseException",
        "code": 404,
        "stack": None,
        "message": f"A warehouse with id '{unknown}' does not exist",
    }
    by_name = api.get("/catalog/v1/config", params={"warehouse": f"{PROJECT}/nowhere"})
    assert (by_name.status_code, envelope(by_name)["type"]) == (404, "NoSuchWarehouseException")
    unknown_route = api.get("/management/v1/no-such-thing")
    assert unknown_route.status_code == 404 and envelope(unknown_route)["message"]
    bad_body = api.post(
        "/management/v1/warehouse",
        content=b"not json",
        headers={"Content-Type": "application/json"},
    )
    assert bad_body.status_code == 400 and envelope(bad_body)["type"]


def test_an_unseen_warehouse_is_not_found_and_a_refused_action_on_a_seen_one_is_403(
    api, warehouse, devcatalog, portal_tokens
):
    """lakekeeper v0.13.3 crates/lakekeeper/src/service/authz/warehouse.rs (`require_warehouse_action`,
    `AuthZCannotUseWarehouseId`): a caller who cannot see the warehouse (`can_use` = `describe`,
    authz/openfga/v4.7/components/warehouse.fga, the model crates/authz-openfga/src/migration.rs
    makes active) gets 404 `NoSuchWarehouseException` with the detail "Warehouse not found or
    access denied", exactly as for a warehouse that does not exist; by name,
    crates/lakekeeper/src/server/config.rs (`get_config`) answers the name-keyed 404 to both. One
    who sees it but may not act gets 403 `WarehouseActionForbidden`."""
    warehouse_id = warehouse["warehouse-id"]
    token = portal_tokens.user_token(ALICE_USER.sub).access_token
    with client(devcatalog, token) as as_alice:
        unseen = as_alice.get(f"/management/v1/warehouse/{warehouse_id}")
        missing_id = uuid.uuid4()
        missing = as_alice.get(f"/management/v1/warehouse/{missing_id}")
        for answer, named in ((unseen, warehouse_id), (missing, missing_id)):
            assert answer.status_code == 404
            assert envelope(answer) == {
                "type": "NoSuchWarehouseException",
                "code": 404,
                "message": f"A warehouse with id '{named}' does not exist",
                "stack": ["Warehouse not found or access denied"],
            }
        for name in (warehouse["name"], "nowhere"):
            by_name = as_alice.get("/catalog/v1/config", params={"warehouse": f"{PROJECT}/{name}"})
            assert (by_name.status_code, envelope(by_name)["message"]) == (
                404,
                f"A warehouse '{name}' does not exist",
            )
        api.post(
            f"/management/v1/permissions/warehouse/{warehouse_id}/assignments",
            json={"writes": [{"type": "select", "user": f"oidc~{ALICE_USER.sub}"}]},
        ).raise_for_status()
        assert as_alice.get(f"/management/v1/warehouse/{warehouse_id}").status_code == 200
        config = as_alice.get(
            "/catalog/v1/config", params={"warehouse": f"{PROJECT}/{warehouse['name']}"}
        )
        assert config.status_code == 200
        rename = as_alice.post(
            f"/management/v1/warehouse/{warehouse_id}/rename", json={"new-name": "taken-over"}
        )
        assert (rename.status_code, envelope(rename)["type"]) == (403, "WarehouseActionForbidden")


def test_deleting_a_role_takes_its_grants_and_members_with_it(api, warehouse):
    """lakekeeper v0.13.3 crates/lakekeeper/src/api/management/v1/role.rs (`delete_role`) and
    crates/authz-openfga/src/authorizer.rs (`delete_role` -> `delete_all_relations`): every tuple
    naming the role goes, its assignees and its grants on warehouses."""
    warehouse_id = warehouse["warehouse-id"]
    role = (
        api.post("/management/v1/role", json={"name": f"analysts-{uuid.uuid4().hex[:6]}"})
        .raise_for_status()
        .json()
    )
    member = f"oidc~{ALICE_USER.sub}"
    api.post(
        f"/management/v1/permissions/role/{role['id']}/assignments",
        json={"writes": [{"type": "assignee", "user": member}]},
    ).raise_for_status()
    api.post(
        f"/management/v1/permissions/warehouse/{warehouse_id}/assignments",
        json={"writes": [{"type": "select", "role": role["id"]}]},
    ).raise_for_status()
    grants = f"/management/v1/permissions/warehouse/{warehouse_id}/assignments"
    assert {"type": "select", "role": role["id"]} in api.get(grants).json()["assignments"]

    assert api.delete(f"/management/v1/role/{role['id']}").status_code == 204

    assert all(a.get("role") != role["id"] for a in api.get(grants).json()["assignments"])
    gone = api.get(f"/management/v1/permissions/role/{role['id']}/assignments")
    assert gone.status_code == 404 and envelope(gone)["type"] == "RoleNotFound"


def test_a_users_exchanged_token_is_that_user_and_no_token_is_401(devcatalog, portal_tokens):
    """lakekeeper v0.13.3 crates/lakekeeper/src/service/authn.rs: a token's subject of the
    primary provider is the user `oidc~<sub>`; a request without a bearer token answers 401."""
    token = portal_tokens.user_token(ALICE_USER.sub).access_token  # the portal's token exchange
    with client(devcatalog, token) as as_alice:
        assert (
            as_alice.get("/management/v1/whoami").raise_for_status().json()["id"]
            == f"oidc~{ALICE_USER.sub}"
        )
    anonymous = httpx.get(f"{devcatalog.url}/management/v1/whoami", timeout=30)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith(
        "Bearer"
    )
    assert envelope(anonymous)["code"] == 401


def test_vended_credentials_are_scoped_to_the_table_and_name_their_renewal(
    api, warehouse, devcatalog, service_token
):
    """lakekeeper v0.13.3 crates/lakekeeper/src/service/storage/s3.rs (`generate_table_config`,
    `get_sts_policy_string`), crates/lakekeeper/src/request_metadata.rs
    (`refresh_client_credentials_endpoint_for_table`); the rules table in the README above."""
    catalog = iceberg(devcatalog, warehouse, service_token)
    catalog.create_namespace("vend")
    table = catalog.create_table("vend.t", schema=pa.schema([("id", pa.int64())]))
    prefix = f"/catalog/v1/{warehouse['warehouse-id']}/namespaces/vend/tables/t"
    loaded = api.get(prefix, headers=VENDED).raise_for_status().json()
    [credential] = loaded["storage-credentials"]
    assert credential["prefix"].rstrip("/") == table.location().rstrip("/")
    assert credential["config"]["s3.session-token"]
    assert credential["config"]["client.refresh-credentials-endpoint"].endswith(
        f"{prefix}/credentials"
    )
    renewed = api.get(f"{prefix}/credentials", headers=VENDED).raise_for_status().json()
    assert [c["prefix"] for c in renewed["storage-credentials"]] == [credential["prefix"]]
    catalog.purge_table("vend.t")
    catalog.drop_namespace("vend")


def test_a_soft_delete_profile_is_kept_but_tables_drop_at_once_and_undrop_is_absent(
    api, seaweedfs, devcatalog, service_token
):
    """lakekeeper v0.13.3 crates/lakekeeper/src/api/management/v1/warehouse/mod.rs
    (`TabularDeleteProfile::Soft{expiration_seconds}`: a dropped table is kept until expiry) and
    crates/lakekeeper/src/api/management/mod.rs (`/warehouse/{id}/deleted-tabulars/undrop`). The
    dev catalog keeps the profile but SeaweedFS drops at once: no undrop."""
    soft = {"type": "soft", "expiration-seconds": 3600}
    warehouse = create_warehouse(api, seaweedfs, delete_profile=soft)
    try:
        assert warehouse["delete-profile"] == soft
        catalog = iceberg(devcatalog, warehouse, service_token)
        catalog.create_namespace("gone")
        table = catalog.create_table("gone.t", schema=pa.schema([("id", pa.int64())]))
        catalog.drop_table("gone.t")
        with pytest.raises(NoSuchTableError):
            catalog.load_table("gone.t")
        undrop = api.post(
            f"/management/v1/warehouse/{warehouse['warehouse-id']}/deleted-tabulars/undrop",
            json={"targets": [table.metadata.table_uuid.hex]},
        )
        assert undrop.status_code == 404 and envelope(undrop)
        catalog.drop_namespace("gone")
    finally:
        api.delete(f"/management/v1/warehouse/{warehouse['warehouse-id']}")


def test_x_project_id_names_the_project_and_defaults_to_the_nil_uuid(
    devcatalog, service_token, warehouse
):
    """lakekeeper v0.13.3 crates/lakekeeper/src/request_metadata.rs (`X_PROJECT_ID_HEADER`,
    trimmed and parsed as a `ProjectId`; `preferred_project_id` falls back to `DEFAULT_PROJECT_ID`)
    and crates/lakekeeper/src/service/identifier/project.rs (`ProjectId::try_new`: letters, digits,
    '-' and '_', not only UUIDs; anything else 400 `MalformedProjectID`)."""

    def names(project):
        with client(devcatalog, service_token, project) as api:
            return {
                w["name"]
                for w in api.get("/management/v1/warehouse").raise_for_status().json()["warehouses"]
            }

    assert warehouse["name"] in names(PROJECT)
    assert warehouse["name"] not in names(str(uuid.uuid4()))
    assert warehouse["name"] not in names(None)  # the default project
    assert warehouse["name"] not in names("not_a-uuid")  # a project of its own
    with client(devcatalog, service_token, "a/b") as api:
        invalid = api.get("/management/v1/warehouse")
    assert (invalid.status_code, envelope(invalid)["type"]) == (400, "MalformedProjectID")


def test_tables_live_in_the_warehouses_own_table_bucket(api, warehouse, devcatalog, service_token):
    """lakekeeper v0.13.3 crates/lakekeeper/src/service/storage/mod.rs (`default_tabular_location`)
    and storage/s3.rs (`base_location`; test: `s3://test-bucket/test_prefix/<uuid>`): Lakekeeper
    puts tables under the profile's bucket and key prefix. The dev catalog's SeaweedFS keeps them
    in a table bucket `<bucket>-wh-<id>` (devstack/seaweedfs.py `warehouse_table_bucket`)."""
    catalog = iceberg(devcatalog, warehouse, service_token)
    catalog.create_namespace("where")
    table = catalog.create_table("where.t", schema=pa.schema([("id", pa.int64())]))
    bucket = warehouse_table_bucket(ALICE.bucket, uuid.UUID(warehouse["warehouse-id"]))
    assert table.location().startswith(f"s3://{bucket}/")
    assert not table.location().startswith(f"s3://{ALICE.bucket}/{warehouse['name']}")
    catalog.purge_table("where.t")
    catalog.drop_namespace("where")


def test_a_multi_table_commit_publishes_branches_all_at_once_or_not_at_all(
    api, warehouse, devcatalog, service_token
):
    """lakekeeper v0.13.3 crates/lakekeeper/src/server/tables.rs (`commit_transaction` →
    `try_commit_tables`): every table's requirements are checked first (one failing: 409
    `CommitFailedException`, no table changes), then every table's metadata pointer moves in one
    database transaction, so a reader never loads one table new and another old. The dev catalog
    forwards to SeaweedFS and holds loads of the tables while the commit runs
    (devstack/devcatalog/commits.py). Writes land on a branch and reach `main` only by the commit's
    `set-snapshot-ref`, as write-audit-publish does (compute/run/publish.py)."""
    catalog = iceberg(devcatalog, warehouse, service_token)
    catalog.create_namespace("wap")
    names = ("first", "second", "third")
    for name in names:
        table = catalog.create_table(f"wap.{name}", schema=pa.schema([("round", pa.int64())]))
        table.append(pa.table({"round": [0]}))

    def publish_round(number: int, wrong_requirement: bool = False) -> httpx.Response:
        changes = []
        for position, name in enumerate(names):
            table = catalog.load_table(f"wap.{name}")
            main = table.current_snapshot().snapshot_id
            table.manage_snapshots().create_branch(main, f"round-{number}").commit()
            table = catalog.load_table(f"wap.{name}")
            table.append(pa.table({"round": [number]}), branch=f"round-{number}")
            head = catalog.load_table(f"wap.{name}").metadata.refs[f"round-{number}"].snapshot_id
            expected = 1 if wrong_requirement and position == len(names) - 1 else main
            published[head] = number  # known to the readers before they can load it
            changes.append(
                {
                    "identifier": {"namespace": ["wap"], "name": name},
                    "requirements": [
                        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": expected}
                    ],
                    "updates": [
                        {
                            "action": "set-snapshot-ref",
                            "ref-name": "main",
                            "type": "branch",
                            "snapshot-id": head,
                        },
                        {"action": "remove-snapshot-ref", "ref-name": f"round-{number}"},
                    ],
                }
            )
        return api.post(
            f"/catalog/v1/{warehouse['warehouse-id']}/transactions/commit",
            json={"table-changes": changes},
        )

    def rounds_seen() -> list[int]:
        return [
            max(catalog.load_table(f"wap.{name}").scan().to_arrow()["round"].to_pylist())
            for name in names
        ]

    published: dict[int, int] = {
        catalog.load_table(f"wap.{name}").current_snapshot().snapshot_id: 0 for name in names
    }
    # A failed requirement on the last table: no table's main moved; the branches stay.
    refused = publish_round(1, wrong_requirement=True)
    assert refused.status_code == 409 and envelope(refused)["type"] == "CommitFailedException"
    assert rounds_seen() == [0, 0, 0]
    assert all("round-1" in catalog.load_table(f"wap.{n}").metadata.refs for n in names)

    # Readers load the three tables one after another, forwards and backwards, while rounds are
    # published: a table loaded later is never older than one loaded before it.
    seen: list[list[int]] = []
    stop = threading.Event()

    def read() -> None:
        reader = iceberg(devcatalog, warehouse, service_token)
        order = list(names)
        while not stop.is_set():
            snapshots = [
                reader.load_table(f"wap.{name}").current_snapshot().snapshot_id for name in order
            ]
            seen.append([published[snapshot] for snapshot in snapshots])
            order.reverse()

    readers = [threading.Thread(target=read) for _ in range(2)]
    for thread in readers:
        thread.start()
    try:
        for number in range(2, 8):
            answer = publish_round(number)
            assert answer.status_code == 204, answer.text
            for name in names:
                published[catalog.load_table(f"wap.{name}").current_snapshot().snapshot_id] = number
    finally:
        stop.set()
        for thread in readers:
            thread.join()
    assert rounds_seen() == [7, 7, 7]
    assert all(
        set(catalog.load_table(f"wap.{n}").metadata.refs) == {"main", "round-1"} for n in names
    )
    assert len(seen) > 10
    assert all(pass_ == sorted(pass_) for pass_ in seen), [p for p in seen if p != sorted(p)]
    for name in names:
        catalog.purge_table(f"wap.{name}")
    catalog.drop_namespace("wap")


def test_every_row_of_the_behaviour_table_cites_lakekeeper_and_names_its_test_here():
    """The table in devstack/devcatalog/README.md: each row names a file of lakekeeper/lakekeeper
    (tag v0.13.3) for what Lakekeeper does, and one test of this module, which exists; every test
    of this module but this one is a row's."""
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "devstack" / "devcatalog" / "README.md").read_text()
    table = readme[: readme.index("## Vended credentials in the dev catalog")]
    rows = [line for line in table.splitlines() if line.startswith("| ")][2:]  # header, rule
    assert len(rows) >= 10
    named = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert len(cells) == 5, row
        behaviour, lakekeeper, _, _, test = cells
        assert any(
            path.startswith(("crates/", "authz/", "docs/"))
            for path in re.findall(r"`([^`\s]+)`", lakekeeper)
        ), f"no Lakekeeper source for {behaviour}"
        (name,) = re.fullmatch(r"`(test_\w+)`", test).groups()
        named.append(name)
    tests_here = {
        name for name, value in globals().items() if name.startswith("test_") and callable(value)
    }
    assert set(named) <= tests_here, sorted(set(named) - tests_here)
    assert tests_here - set(named) == {
        "test_every_row_of_the_behaviour_table_cites_lakekeeper_and_names_its_test_here"
    }
    assert len(named) == len(set(named))  # a test per row
