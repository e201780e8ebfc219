"""Vended storage credentials as Lakekeeper vends them (devstack/devcatalog/README.md), checked
against the real SeaweedFS: what the caller's grants allow (read-only with `select` alone), where
(one table's location with the scope "table", Lakekeeper's; the warehouse's table bucket with
"warehouse", the local stack's), and for how long (15 minutes, or the profile's
`sts-token-validity-seconds`).

Both scopes run: the session's dev catalog (scope "table", Lakekeeper's) and a second one
started here on the same SeaweedFS with scope "warehouse". Users act through tokens the provider exchanges for
them, grants are set by the portal's service identity, as the portal's sharing does."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

import jwt
import pyarrow as pa
import pytest
from cryptography.fernet import Fernet

from app.lakekeeper.resources import WarehouseAssignment
from app.lakekeeper.tokens import lakekeeper_user_id
from app.storage_probe import S3Credentials
from compute.host.catalog_cache import CatalogAccess, CatalogCache
from devstack.devcatalog import DevCatalogConfig, devcatalog_process
from devstack.devcatalog.credential_cache import serve_window
from devstack.devcatalog.vending import (
    DEFAULT_VENDED_CREDENTIALS_SECONDS,
    StoragePermissions,
    load_permissions,
    sts_policy,
)
from devstack.process import free_port
from tests.catalogs import (
    ALICE,
    ALICE_USER,
    BOB_USER,
    access_key,
    checked_client,
    checked_portal,
    iceberg_catalog,
    s3_client,
    s3_profile,
    vended_session,
)

READ = ("describe", "select")
WRITE = ("describe", "select", "create", "modify")
ROWS = pa.table({"id": pa.array([1, 2], pa.int64())})


@pytest.fixture(scope="module")
def warehouse_scoped_catalog(seaweedfs, oidc_provider, tmp_path_factory):
    """A second dev catalog on the session's SeaweedFS that widens credentials to the warehouse
    (the local stack's catalog scopes them to one table, as Lakekeeper does)."""
    run = tmp_path_factory.mktemp("warehouse-scoped-catalog")
    config = replace(
        DevCatalogConfig.for_seaweedfs(
            seaweedfs,
            port=free_port(),
            oidc_issuer=oidc_provider.issuer,
            data_dir=run,
            encryption_key=Fernet.generate_key().decode(),
        ),
        vended_credentials_scope="warehouse",
    )
    process = devcatalog_process(config, run / "logs").start(timeout=60)
    yield config
    process.stop()


@dataclass
class Shared:
    """Alice's warehouse with tables `a` and `b` in namespace `lake`, and Bob, a sharee."""

    catalog: DevCatalogConfig
    warehouse_id: str
    name: str
    portal: object
    scope: str

    def grant_bob(self, relations: tuple[str, ...]) -> None:
        bob = lakekeeper_user_id(BOB_USER.sub)
        self.portal.set_warehouse_assignments(
            self.warehouse_id,
            [
                WarehouseAssignment("ownership", user=lakekeeper_user_id(ALICE_USER.sub)),
                *(WarehouseAssignment(relation, user=bob) for relation in relations),
            ],
        )

    def bobs_table(self, table: str):
        """Table `lake.<table>` loaded by Bob (a fresh token each time, as a new run would get)."""
        token = self.portal.user_token(BOB_USER.sub, self.warehouse_id).access_token
        return iceberg_catalog(self.catalog, self.name, token=token).load_table(f"lake.{table}")


@pytest.fixture(scope="module", params=["table", "warehouse"])
def shared(request, devcatalog, seaweedfs, portal_tokens, lakehouse):
    assert devcatalog.vended_credentials_scope == "table"
    catalog = (
        request.getfixturevalue("warehouse_scoped_catalog")
        if request.param == "warehouse"
        else devcatalog
    )
    name = f"vend-{request.param}-{secrets.token_hex(2)}"
    with checked_client(catalog, lakehouse.service_token()) as api:
        created = (
            api.post(
                "/management/v1/warehouse",
                json={
                    "warehouse-name": name,
                    "storage-profile": s3_profile(seaweedfs, name, sts_enabled=True),
                    "storage-credential": access_key(ALICE.credentials),
                    "delete-profile": {"type": "hard"},
                },
            )
            .raise_for_status()
            .json()
        )
    portal = checked_portal(catalog, portal_tokens)
    as_admin = iceberg_catalog(catalog, name, token=lakehouse.service_token())
    as_admin.create_namespace("lake")
    for table in ("a", "b"):
        as_admin.create_table(f"lake.{table}", schema=ROWS.schema).append(ROWS)
    shared = Shared(catalog, created["warehouse-id"], name, portal, request.param)
    yield shared
    portal.purge_warehouse_contents(name)
    portal.delete_warehouse(shared.warehouse_id)
    portal.close()


def data_file(table) -> str:
    """The S3 path (`/bucket/key`) of one of the table's data files."""
    path = next(iter(table.scan().plan_files())).file.file_path
    return f"/{urlsplit(path).netloc}{urlsplit(path).path}"


def new_object(table) -> str:
    """A new data file's S3 path in the table (SeaweedFS's table buckets take only the files an
    Iceberg table has: a `.bin` is refused whatever the credentials)."""
    return f"/{urlsplit(table.location()).netloc}{urlsplit(table.location()).path}/data/{secrets.token_hex(4)}.parquet"


def writes(seaweedfs, session: S3Credentials, table) -> int:
    with s3_client(seaweedfs, session) as s3:
        return s3.put(new_object(table), content=b"not parquet").status_code


def test_a_read_sharee_gets_credentials_that_read_and_cannot_write(shared, seaweedfs):
    shared.grant_bob(READ)
    table = shared.bobs_table("a")
    session = vended_session(table.io.properties)
    with s3_client(seaweedfs, session) as s3:
        assert s3.get(data_file(table)).status_code == 200
        assert s3.put(new_object(table), content=b"x").status_code == 403
        assert s3.delete(data_file(table)).status_code == 403
    assert table.scan().to_arrow().num_rows == 2  # the file survived
    # loadCredentials vends the same: read only.
    token = shared.portal.user_token(BOB_USER.sub, shared.warehouse_id).access_token
    with checked_client(shared.catalog, token) as bob:
        answer = bob.get(f"/catalog/v1/{shared.warehouse_id}/namespaces/lake/tables/a/credentials")
    (credential,) = answer.raise_for_status().json()["storage-credentials"]
    assert writes(seaweedfs, vended_session(credential["config"]), table) == 403


def test_a_downgraded_sharee_gets_read_only_credentials_and_earlier_ones_end_with_their_lifetime(
    shared, seaweedfs
):
    shared.grant_bob(WRITE)
    vended_at = time.time()
    before = shared.bobs_table("a")
    earlier = vended_session(before.io.properties)
    assert writes(seaweedfs, earlier, before) == 200

    shared.grant_bob(READ)
    after = shared.bobs_table("a")
    assert writes(seaweedfs, vended_session(after.io.properties), after) == 403
    # STS credentials cannot be recalled, with Lakekeeper as here: those vended before the
    # downgrade write until they expire, at most the lifetime after they were vended. Lakeport
    # stops the sharee's runs at the downgrade (tests/test_share_revocation.py).
    assert writes(seaweedfs, earlier, before) == 200
    expires_at = int(before.io.properties["s3.session-token-expires-at-ms"]) / 1000
    assert expires_at <= vended_at + DEFAULT_VENDED_CREDENTIALS_SECONDS + 2

    shared.grant_bob(())
    # Without a grant Bob no longer sees the warehouse: Lakekeeper v0.13.3 answers its name as
    # not found (crates/lakekeeper/src/server/config.rs, `get_config`).
    with pytest.raises(Exception, match="NoSuchWarehouseException"):
        shared.bobs_table("a")


def test_loads_within_half_the_lifetime_get_one_set_per_table_and_privilege(shared):
    """Lakekeeper's short-term-credentials cache (devstack/devcatalog/credential_cache.py): a
    second load of a table by the same privilege gets the first load's keys; another table or
    another privilege gets keys of its own."""
    shared.grant_bob(READ)
    first, again, other = shared.bobs_table("a"), shared.bobs_table("a"), shared.bobs_table("b")
    key = "s3.access-key-id"
    assert again.io.properties[key] == first.io.properties[key]
    assert (
        again.io.properties["s3.session-token-expires-at-ms"]
        == first.io.properties["s3.session-token-expires-at-ms"]
    )
    assert other.io.properties[key] != first.io.properties[key]
    shared.grant_bob(WRITE)
    assert shared.bobs_table("a").io.properties[key] != first.io.properties[key]


def test_credentials_for_one_table_reach_only_its_location(shared, seaweedfs):
    shared.grant_bob(WRITE)
    table_a, table_b = shared.bobs_table("a"), shared.bobs_table("b")
    session_a = vended_session(table_a.io.properties)
    bucket = urlsplit(table_a.location()).netloc
    key_b = urlsplit(table_b.location()).path.lstrip("/")
    with s3_client(seaweedfs, session_a) as s3:
        assert s3.get(data_file(table_a)).status_code == 200
        reach_b = (
            s3.get(data_file(table_b)).status_code,
            s3.get(f"/{bucket}", params={"list-type": "2", "prefix": f"{key_b}/"}).status_code,
            s3.put(new_object(table_b), content=b"x").status_code,
            s3.delete(data_file(table_b)).status_code,
        )
    if shared.scope == "table":  # Lakekeeper's rule
        assert reach_b == (403, 403, 403, 403)
        assert table_b.scan().to_arrow().num_rows == 2
    else:  # the local stack's: one set per warehouse, every table of it (compute/host/catalog_cache.py)
        assert reach_b[:3] == (200, 200, 200)


def test_credentials_live_fifteen_minutes_unless_the_profile_says_otherwise(
    shared, seaweedfs, lakehouse
):
    shared.grant_bob(READ)
    table = shared.bobs_table("a")
    expires_at = int(table.io.properties["s3.session-token-expires-at-ms"]) / 1000
    assert DEFAULT_VENDED_CREDENTIALS_SECONDS == 15 * 60
    # SeaweedFS states the expiry to the second, and signs it into the session token it checks.
    # The set may come from the catalog's cache: vended at most half its lifetime ago.
    now = time.time()
    assert now + 900 - serve_window(900) - 2 <= expires_at <= now + 900 + 1
    session_claims = jwt.decode(
        table.io.properties["s3.session-token"], options={"verify_signature": False}
    )
    assert session_claims["exp"] == expires_at

    name = f"{shared.name}-30m"
    with checked_client(shared.catalog, lakehouse.service_token()) as api:
        profile = {
            **s3_profile(seaweedfs, name, sts_enabled=True),
            "sts-token-validity-seconds": 1800,
        }
        created = (
            api.post(
                "/management/v1/warehouse",
                json={
                    "warehouse-name": name,
                    "storage-profile": profile,
                    "storage-credential": access_key(ALICE.credentials),
                },
            )
            .raise_for_status()
            .json()
        )
        try:
            as_admin = iceberg_catalog(shared.catalog, name, token=lakehouse.service_token())
            as_admin.create_namespace("lake")
            asked_at = time.time()
            made = as_admin.create_table("lake.t", schema=ROWS.schema)
            expires_at = int(made.io.properties["s3.session-token-expires-at-ms"]) / 1000
            assert asked_at + 1800 - 2 <= expires_at <= time.time() + 1800 + 1
        finally:
            shared.portal.purge_warehouse_contents(name)
            api.delete(f"/management/v1/warehouse/{created['warehouse-id']}")


def test_a_units_binding_of_fifteen_minute_credentials_serves_the_next_run(shared):
    """What a unit does with the credentials vended with a run's first table (compute/run/pipeline.py):
    one binding per warehouse, reused by later runs while it stays valid long enough
    (`min_remaining_s`, which must be below the credentials' lifetime)."""
    if shared.scope != "warehouse":
        pytest.skip("units bind the warehouse-scoped credentials of the local stack")
    shared.grant_bob(WRITE)
    token = shared.portal.user_token(BOB_USER.sub, shared.warehouse_id).access_token
    table = iceberg_catalog(shared.catalog, shared.name, token=token).load_table("lake.a")
    cache = CatalogCache()
    access = CatalogAccess.vended(
        f"{shared.catalog.url}/catalog", shared.name, token, table.io.properties
    )
    first = cache.binding(shared.warehouse_id, access)
    assert cache.current(shared.warehouse_id) == first
    assert cache.min_remaining_s < DEFAULT_VENDED_CREDENTIALS_SECONDS


def test_the_policy_and_the_privilege_are_lakekeepers():
    """Lakekeeper's own unit tests of `get_sts_policy_string` (crates/lakekeeper/src/service/storage/s3.rs:
    `policy_string_neutralizes_wildcard_in_table_path`, `..._question_mark_...`) and its load rule."""
    policy = json.loads(
        sts_policy("bucket", "wh/evil*/ev?l/table/", StoragePermissions.READ_WRITE_DELETE)
    )
    access, listing, location = policy["Statement"]
    assert access["Resource"] == "arn:aws:s3:::bucket/wh/evil${*}/ev${?}l/table/*"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": "wh/evil${*}/ev${?}l/table/*"}}
    assert location == {
        "Sid": "GetBucketLocation",
        "Effect": "Allow",
        "Action": "s3:GetBucketLocation",
        "Resource": "arn:aws:s3:::bucket",
    }
    assert "s3:DeleteObject" in access["Action"]
    read_only = json.loads(sts_policy("bucket", "t/", StoragePermissions.READ))["Statement"][0][
        "Action"
    ]
    assert read_only == ["s3:GetObject", "s3:GetObjectVersion"]
    assert load_permissions({"describe", "select"}, False) is StoragePermissions.READ
    assert (
        load_permissions({"describe", "create"}, False) is None
    )  # `create` alone: can_write_data is `modify`
    assert (
        load_permissions({"modify"}, False)
        is load_permissions({"ownership"}, False)
        is load_permissions(set(), True)
        is StoragePermissions.READ_WRITE_DELETE
    )


def test_a_tables_credentials_name_their_renewal_endpoint_which_vends_the_same_privilege(
    shared, seaweedfs
):
    """As Lakekeeper's `generate_table_config` (crates/lakekeeper/src/service/storage/s3.rs): the
    storage credential carries `client.refresh-credentials-endpoint`, the table's loadCredentials,
    and its expiry; the table's `config` repeats the keys but neither of those."""
    shared.grant_bob(READ)
    token = shared.portal.user_token(BOB_USER.sub, shared.warehouse_id).access_token
    with checked_client(shared.catalog, token) as bob:
        loaded = (
            bob.get(
                f"/catalog/v1/{shared.warehouse_id}/namespaces/lake/tables/a",
                headers={"X-Iceberg-Access-Delegation": "vended-credentials"},
            )
            .raise_for_status()
            .json()
        )
        (credential,) = loaded["storage-credentials"]
        endpoint = credential["config"]["client.refresh-credentials-endpoint"]
        assert (
            endpoint
            == f"{shared.catalog.url}/catalog/v1/{shared.warehouse_id}/namespaces/lake/tables/a/credentials"
        )
        assert "client.refresh-credentials-endpoint" not in loaded["config"]
        assert (
            credential["config"]["expiration-time"]
            == credential["config"]["s3.session-token-expires-at-ms"]
        )
        renewed = bob.get(endpoint).raise_for_status().json()["storage-credentials"]
    (fresh,) = renewed
    table = shared.bobs_table("a")
    with s3_client(seaweedfs, vended_session(fresh["config"])) as s3:
        assert s3.get(data_file(table)).status_code == 200
    assert writes(seaweedfs, vended_session(fresh["config"]), table) == 403


def test_a_profile_lifetime_below_sts_minimum_is_stated_not_granted(shared, seaweedfs, lakehouse):
    """The stand-in's way to make clients renew within a test: STS grants 900 s at least, the
    credential says the profile's 20 s (Lakekeeper would pass 20 to STS, which refuses it)."""
    name = f"{shared.name}-20s"
    with checked_client(shared.catalog, lakehouse.service_token()) as api:
        profile = {
            **s3_profile(seaweedfs, name, sts_enabled=True),
            "sts-token-validity-seconds": 20,
        }
        created = (
            api.post(
                "/management/v1/warehouse",
                json={
                    "warehouse-name": name,
                    "storage-profile": profile,
                    "storage-credential": access_key(ALICE.credentials),
                },
            )
            .raise_for_status()
            .json()
        )
        try:
            as_admin = iceberg_catalog(shared.catalog, name, token=lakehouse.service_token())
            as_admin.create_namespace("lake")
            asked_at = time.time()
            made = as_admin.create_table("lake.t", schema=ROWS.schema)
            stated = int(made.io.properties["s3.session-token-expires-at-ms"]) / 1000
            assert asked_at + 20 - 2 <= stated <= time.time() + 20 + 1
            granted = jwt.decode(
                made.io.properties["s3.session-token"], options={"verify_signature": False}
            )["exp"]
            assert granted >= asked_at + 900 - 2
        finally:
            shared.portal.purge_warehouse_contents(name)
            api.delete(f"/management/v1/warehouse/{created['warehouse-id']}")
