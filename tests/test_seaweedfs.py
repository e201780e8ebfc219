"""The local stack's SeaweedFS (the session's `seaweedfs` fixture, tests/services.py): signed S3
with per-user keys, and its Iceberg REST catalog."""

from __future__ import annotations

import stat
import uuid

import httpx

from app.storage_probe import SigV4Auth, probe_storage
from devstack.seaweedfs import TEST_USER_KEYS, warehouse_table_bucket
from tests.services import LOOPBACK_ALLOWED

ALICE, BOB = TEST_USER_KEYS["alice"], TEST_USER_KEYS["bob"]


def test_unsigned_requests_are_refused(seaweedfs):
    response = httpx.put(f"{seaweedfs.s3_endpoint}/{ALICE.bucket}/anonymous.txt", content=b"x")
    assert response.status_code == 403
    assert "<Code>AccessDenied</Code>" in response.text


def test_each_test_user_reaches_their_own_bucket_only(seaweedfs):
    assert probe_storage(
        seaweedfs.s3_location(ALICE.bucket, "lake"), ALICE.credentials, policy=LOOPBACK_ALLOWED
    ).ok
    assert probe_storage(
        seaweedfs.s3_location(BOB.bucket, "lake"), BOB.credentials, policy=LOOPBACK_ALLOWED
    ).ok

    refused = probe_storage(
        seaweedfs.s3_location(BOB.bucket, "lake"), ALICE.credentials, policy=LOOPBACK_ALLOWED
    )
    assert refused.first_failure.name == "write"
    assert refused.first_failure.message.startswith("Access denied")


def test_the_admin_identity_reaches_every_bucket(seaweedfs):
    for user in (ALICE, BOB):
        assert probe_storage(
            seaweedfs.s3_location(user.bucket), seaweedfs.admin_credentials, policy=LOOPBACK_ALLOWED
        ).ok


def test_a_users_keys_reach_the_table_buckets_of_their_warehouses(seaweedfs):
    table_bucket = warehouse_table_bucket(ALICE.bucket, uuid.uuid4())
    bucket_url = f"{seaweedfs.s3_endpoint}/{table_bucket}"
    admin = SigV4Auth(seaweedfs.admin_credentials, seaweedfs.region)
    created = httpx.put(bucket_url, auth=admin)
    assert created.status_code == 200, created.text
    try:
        assert probe_storage(
            seaweedfs.s3_location(table_bucket), ALICE.credentials, policy=LOOPBACK_ALLOWED
        ).ok
        assert not probe_storage(
            seaweedfs.s3_location(table_bucket), BOB.credentials, policy=LOOPBACK_ALLOWED
        ).ok
    finally:
        httpx.delete(bucket_url, auth=admin).raise_for_status()


def test_table_bucket_names_are_valid_bucket_names():
    warehouse_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    assert warehouse_table_bucket("alice-lake", warehouse_id) == "alice-lake-wh-0123456789ab"
    assert len(warehouse_table_bucket("b" * 63, warehouse_id)) == 63


def test_the_iceberg_catalog_issues_tokens_only_for_a_valid_key_and_secret(seaweedfs):
    def token_for(access_key_id: str, secret: str) -> httpx.Response:
        return httpx.post(
            f"{seaweedfs.iceberg_url}/v1/oauth/tokens",
            data={
                "grant_type": "client_credentials",
                "client_id": access_key_id,
                "client_secret": secret,
            },
        )

    assert token_for(seaweedfs.admin_access_key_id, seaweedfs.admin_secret_access_key).json()[
        "access_token"
    ]
    assert token_for(seaweedfs.admin_access_key_id, "not-the-secret").status_code == 401


def test_key_files_are_private(seaweedfs):
    for path in (seaweedfs.s3_identities_path, seaweedfs.iam_config_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
