"""The "Test connection" storage check, against the real SeaweedFS (session fixture), which checks
SigV4 signatures."""

from __future__ import annotations

import time
import uuid

import httpx

from app.network_policy import NetworkPolicy
from app.storage_probe import Outcome, S3Credentials, S3Location, SigV4Auth, probe_storage
from devstack.seaweedfs import TEST_USER_KEYS
from tests.services import LOOPBACK_ALLOWED

ALICE = TEST_USER_KEYS["alice"]


def outcomes(report) -> dict[str, Outcome]:
    return {check.name: check.outcome for check in report.checks}


def test_good_keys_pass_all_four_checks_and_leave_nothing_behind(seaweedfs):
    prefix = f"probe-tests/{uuid.uuid4().hex[:8]}"
    report = probe_storage(
        seaweedfs.s3_location(ALICE.bucket, f"/{prefix}/"),
        ALICE.credentials,
        policy=LOOPBACK_ALLOWED,
    )

    assert report.ok, report.summary()
    assert outcomes(report) == dict.fromkeys(["write", "read", "list", "delete"], Outcome.PASSED)
    assert f"s3://alice-lake/{prefix}" in report.checks[0].message
    listing = httpx.get(
        f"{seaweedfs.s3_endpoint}/{ALICE.bucket}/",
        params={"list-type": "2", "prefix": f"{prefix}/"},
        auth=SigV4Auth(seaweedfs.admin_credentials, seaweedfs.region),
    )
    assert "<Key>" not in listing.text


def test_keys_in_odd_characters_are_signed_as_s3_expects(seaweedfs):
    # Every character a key prefix may have that S3 wants percent-encoded in the signed path.
    report = probe_storage(
        seaweedfs.s3_location(ALICE.bucket, f"probe-tests/it's (a) *test*!{uuid.uuid4().hex[:4]}"),
        ALICE.credentials,
        policy=LOOPBACK_ALLOWED,
    )
    assert report.ok, report.summary()


def test_a_refused_endpoint_fails_the_write_with_the_policy_message(seaweedfs):
    report = probe_storage(
        seaweedfs.s3_location(ALICE.bucket, "lake"), ALICE.credentials, policy=NetworkPolicy()
    )

    assert outcomes(report) == {
        "write": Outcome.FAILED,
        "read": Outcome.SKIPPED,
        "list": Outcome.SKIPPED,
        "delete": Outcome.SKIPPED,
    }
    assert (
        report.first_failure.message == "127.0.0.1 is not allowed by this portal's network policy."
    )


def test_every_call_goes_to_the_address_checked_once_and_is_signed_for_the_name(seaweedfs):
    """A name only the policy's resolver knows: SeaweedFS checks the signature against the Host
    header, so this passes only if the name (not the pinned address) was signed and sent."""
    lookups = []

    def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    port = seaweedfs.s3_endpoint.rsplit(":", 1)[1]
    named = S3Location(
        ALICE.bucket,
        seaweedfs.region,
        f"probe-tests/{uuid.uuid4().hex[:8]}",
        endpoint=f"http://storage.example.test:{port}",
        path_style=True,
    )
    report = probe_storage(
        named, ALICE.credentials, policy=NetworkPolicy(allow_loopback=True, resolver=resolver)
    )

    assert report.ok, report.summary()
    assert lookups == ["storage.example.test"]


def test_a_wrong_secret_fails_the_write_and_skips_the_rest(seaweedfs):
    wrong_secret = "not-alices-secret-at-all"
    report = probe_storage(
        seaweedfs.s3_location(ALICE.bucket, "lake"),
        S3Credentials(ALICE.access_key_id, wrong_secret),
        policy=LOOPBACK_ALLOWED,
    )

    assert not report.ok
    assert outcomes(report) == {
        "write": Outcome.FAILED,
        "read": Outcome.SKIPPED,
        "list": Outcome.SKIPPED,
        "delete": Outcome.SKIPPED,
    }
    assert (
        report.first_failure.message
        == "Access denied: the signature does not match (check the secret key)"
    )
    assert wrong_secret not in report.summary() + repr(report)


def test_an_unknown_access_key_is_named_as_such(seaweedfs):
    report = probe_storage(
        seaweedfs.s3_location(ALICE.bucket),
        S3Credentials("NOSUCHKEY", "whatever"),
        policy=LOOPBACK_ALLOWED,
    )
    assert report.first_failure.message.startswith("Access denied: the access key is not known")


def test_a_missing_bucket_is_reported_as_not_found(seaweedfs):
    report = probe_storage(
        seaweedfs.s3_location("no-such-lake"), seaweedfs.admin_credentials, policy=LOOPBACK_ALLOWED
    )
    assert report.first_failure.name == "write"
    assert report.first_failure.message == "Bucket not found"


def test_keys_without_access_to_the_bucket_are_denied(seaweedfs):
    report = probe_storage(
        seaweedfs.s3_location(TEST_USER_KEYS["bob"].bucket),
        ALICE.credentials,
        policy=LOOPBACK_ALLOWED,
    )
    assert report.first_failure.message.startswith("Access denied (check the access key and secret")


def test_an_unreachable_endpoint_fails_fast(closed_port):
    closed = S3Location(ALICE.bucket, "us-east-1", endpoint=f"http://127.0.0.1:{closed_port}")
    started = time.monotonic()
    report = probe_storage(closed, ALICE.credentials, timeout=2.0, policy=LOOPBACK_ALLOWED)

    assert time.monotonic() - started < 2.0
    assert report.first_failure.message == "Endpoint unreachable"
    assert outcomes(report)["delete"] is Outcome.SKIPPED


def test_an_endpoint_without_scheme_is_explained():
    report = probe_storage(
        S3Location(ALICE.bucket, "us-east-1", endpoint="127.0.0.1:9000"),
        ALICE.credentials,
        policy=LOOPBACK_ALLOWED,
    )
    assert report.first_failure.message.startswith("Invalid endpoint URL")


def test_secrets_stay_out_of_reprs():
    credentials = S3Credentials("AKIDEXAMPLE", "secret-value", session_token="session-value")
    assert "secret-value" not in repr(credentials) and "session-value" not in repr(credentials)


def test_addressing_styles():
    assert S3Location("b", "eu-west-1").bucket_url() == "https://b.s3.eu-west-1.amazonaws.com"
    assert (
        S3Location("b", "eu-west-1", path_style=True).bucket_url()
        == "https://s3.eu-west-1.amazonaws.com/b"
    )
    custom = S3Location("b", "us-east-1", endpoint="http://127.0.0.1:9000/")
    assert custom.bucket_url() == "http://127.0.0.1:9000/b"
