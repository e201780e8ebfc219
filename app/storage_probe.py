"""The "Test connection" check for a warehouse's S3 storage.

Given where a warehouse's data would live (endpoint, region, bucket, key prefix, addressing
style) and an access key, `probe_storage` does what Lakekeeper does before it accepts a
warehouse: it writes a small probe object under the prefix, reads it back, lists the prefix
and deletes the object. Each of the four checks gets its own result with a short message a
person can act on ("Bucket not found", "Endpoint unreachable", ...). The portal shows them
on its "Test connection" button; the Lakekeeper-compatible dev catalog runs the same checks
when a warehouse is created or its credential rotated.

Four plain S3 calls (PutObject, GetObject, ListObjectsV2, DeleteObject) keep the probe exact
and its errors S3's own error codes; pyarrow's S3FileSystem would do more than asked (multipart
uploads, directory markers) and report free text. botocore signs them (`SigV4Auth`, an httpx
auth hook for any AWS-style service; the dev catalog also uses it for SeaweedFS's S3 Tables and
STS APIs) and httpx sends them through the portal's network policy (`app/network_policy.py`):
the endpoint is a user's choice, so every request is checked and pinned to the address that was
checked. The four checks together end within a total deadline (`PROBE_DEADLINE_SECONDS`,
however slowly a server drips its bytes) and read at most `PROBE_BODY_CAP` bytes of an answer.

A failure is said in S3's terms ("Bucket not found", "Access denied …", "The endpoint did not
answer as S3"), never with the status, headers or body of whatever answered: the endpoint may be
any server, and the probe must not report what it says.

Secrets stay in memory: `S3Credentials` hides the secret from its repr, nothing here logs,
and no message includes a key, a secret or a signature.
"""

from __future__ import annotations

import enum
import logging
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

import httpx
from botocore.auth import S3SigV4Auth
from botocore.auth import SigV4Auth as BotocoreSigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from app.network_policy import (
    BodyTooLarge,
    NetworkPolicy,
    OutboundRefused,
    deadline_passed,
    read_capped,
    total_deadline,
)

PROBE_CONTENT = b"Lakeport storage probe: safe to delete.\n"
# The four checks end within this, and each answer is read up to this many bytes (an S3 error,
# the probe object or a listing of one key are a few hundred bytes).
PROBE_DEADLINE_SECONDS = 10.0
PROBE_BODY_CAP = 64 * 1024
NOT_S3 = "The endpoint did not answer as S3"
TOO_SLOW = "Endpoint did not answer in time"
# What the request says beyond these is httpx's business (user agent, accept, connection):
# signing it would only tie the signature to httpx's defaults.
_SIGNED_HEADERS = {"host", "content-type", "content-md5"}
# botocore logs each canonical request, session token included, at DEBUG.
logging.getLogger("botocore.auth").setLevel(logging.INFO)


@dataclass(frozen=True)
class S3Credentials:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class S3Location:
    """Where a warehouse keeps its data: `s3://bucket/key_prefix` at `endpoint`."""

    bucket: str
    region: str
    key_prefix: str = ""
    # None means AWS, addressed through the region.
    endpoint: str | None = None
    # None means: path style for a custom endpoint, virtual-hosted style on AWS.
    path_style: bool | None = None

    @property
    def prefix(self) -> str:
        return self.key_prefix.strip("/")

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def bucket_url(self) -> str:
        """The URL of the bucket itself, in the location's addressing style."""
        endpoint = (self.endpoint or f"https://s3.{self.region}.amazonaws.com").rstrip("/")
        path_style = self.path_style if self.path_style is not None else self.endpoint is not None
        if path_style:
            return f"{endpoint}/{self.bucket}"
        parts = urlsplit(endpoint)
        return f"{parts.scheme}://{self.bucket}.{parts.netloc}{parts.path}"


class SigV4Auth(httpx.Auth):
    """Signs each request with AWS Signature Version 4 (botocore's signer; header form, signed payload)."""

    requires_request_body = True

    def __init__(self, credentials: S3Credentials, region: str, service: str = "s3") -> None:
        aws_credentials = Credentials(
            credentials.access_key_id, credentials.secret_access_key, credentials.session_token
        )
        # S3 signs the path as sent; other services normalize and encode it once more.
        signer = S3SigV4Auth if service == "s3" else BotocoreSigV4Auth
        self._signer = signer(aws_credentials, service, region)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        url = request.url
        signed = AWSRequest(
            method=request.method,
            url=str(url.copy_with(query=None)),
            params=url.params.multi_items(),
            headers={
                name: value
                for name, value in request.headers.items()
                if name.lower() in _SIGNED_HEADERS or name.lower().startswith("x-amz-")
            },
            data=request.content,
        )
        self._signer.add_auth(signed)
        for name, value in signed.headers.items():
            request.headers[name] = value
        yield request


class Outcome(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # not run, because an earlier check failed


@dataclass(frozen=True)
class CheckResult:
    name: str  # "write", "read", "list" or "delete"
    outcome: Outcome
    message: str

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED


@dataclass(frozen=True)
class ProbeReport:
    location: S3Location
    checks: tuple[CheckResult, ...]

    @property
    def ok(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def first_failure(self) -> CheckResult | None:
        return next((check for check in self.checks if check.outcome is Outcome.FAILED), None)

    def summary(self) -> str:
        failure = self.first_failure
        if failure is None:
            return f"Storage at {self.location} is usable: write, read, list and delete passed."
        return f"Storage check '{failure.name}' failed at {self.location}: {failure.message}"


class _CheckFailed(Exception):
    """A check failed; its text says why, to a person."""


# S3 error codes and what a person should check.
_S3_ERROR_MESSAGES = {
    "NoSuchBucket": "Bucket not found",
    "InvalidAccessKeyId": "Access denied: the access key is not known (check the access key id)",
    "SignatureDoesNotMatch": "Access denied: the signature does not match (check the secret key)",
    "AccessDenied": "Access denied (check the access key and secret, and that they may use this bucket and prefix)",
    "InvalidBucketName": "Invalid bucket name",
    "AuthorizationHeaderMalformed": "Request refused: wrong region for this endpoint or bucket",
    "PermanentRedirect": "The bucket is in another region (check the region)",
    "ExpiredToken": "Access denied: the session token has expired",
    "InvalidToken": "Access denied: the session token is not valid",
    "RequestTimeTooSkewed": "Request refused: the portal's clock and the store's differ too much",
    "NoSuchKey": "The probe object was not found right after it was written",
    "SlowDown": "The store asks to slow down: try again in a moment",
    "ServiceUnavailable": "The store is unavailable: try again in a moment",
    "InternalError": "The store reported an internal error: try again in a moment",
    "NotImplemented": "The store does not implement one of the S3 calls the check makes",
}


def _s3_failure(status: int, body: bytes) -> str:
    """What a refusal means in S3's terms: the error code S3 names, else that no S3 answered."""
    code = ""
    if body:
        try:
            code = ElementTree.fromstring(body).findtext("Code") or ""
        except ElementTree.ParseError:
            pass
    if code in _S3_ERROR_MESSAGES:
        return _S3_ERROR_MESSAGES[code]
    if status == 403 and code:  # an S3 error document with a code of its own
        return _S3_ERROR_MESSAGES["AccessDenied"]
    return NOT_S3


def _call(client: httpx.Client, method: str, url: str, **kwargs) -> httpx.Response:
    """One S3 call, its body read up to PROBE_BODY_CAP; raises _CheckFailed with a message in S3's
    terms unless it answers 2xx."""
    if urlsplit(url).scheme not in ("http", "https"):
        raise _CheckFailed("Invalid endpoint URL (it must start with http:// or https://)")
    try:
        with client.stream(method, url, **kwargs) as response:
            body = read_capped(response, PROBE_BODY_CAP)
    except OutboundRefused as refusal:
        raise _CheckFailed(refusal.message) from None
    except BodyTooLarge:
        raise _CheckFailed(f"{NOT_S3} (its answer was far longer than S3's)") from None
    except httpx.ConnectTimeout:
        raise _CheckFailed(
            TOO_SLOW if deadline_passed() else "Endpoint unreachable (connection timed out)"
        ) from None
    except httpx.TimeoutException:
        raise _CheckFailed(TOO_SLOW) from None
    except httpx.TransportError:
        raise _CheckFailed(TOO_SLOW if deadline_passed() else "Endpoint unreachable") from None
    if not response.is_success:
        raise _CheckFailed(_s3_failure(response.status_code, body))
    return httpx.Response(response.status_code, headers=response.headers, content=body)


def _listed_keys(listing: bytes) -> set[str]:
    """The object keys of a ListObjectsV2 answer."""
    try:
        root = ElementTree.fromstring(listing)
    except ElementTree.ParseError:
        raise _CheckFailed(NOT_S3) from None
    if root.tag.rsplit("}", 1)[-1] != "ListBucketResult":
        raise _CheckFailed(NOT_S3)
    return {element.text for element in root.iter() if element.tag.rsplit("}", 1)[-1] == "Key"}


def _put_object(client: httpx.Client, url: str) -> None:
    written = _call(
        client, "PUT", url, content=PROBE_CONTENT, headers={"content-type": "text/plain"}
    )
    # Every PutObject answer names the object's ETag (AWS's PutObject API reference; MinIO sets it
    # in setPutObjHeaders, minio/minio cmd/object-handlers-common.go; SeaweedFS too).
    if "etag" not in written.headers:
        raise _CheckFailed(NOT_S3)


def probe_storage(
    location: S3Location,
    credentials: S3Credentials,
    *,
    policy: NetworkPolicy,
    timeout: float = 5.0,
    deadline: float = PROBE_DEADLINE_SECONDS,
) -> ProbeReport:
    """Write, read back, list and delete a probe object under `location`; one result per check.

    If the write fails the other checks are skipped; once the object is written, read, list
    and delete all run, so the probe object is cleaned up (unless the deadline passed first: it
    is named `.lakeport-probe-…` and safe to delete). Every request goes through `policy` (a
    refused endpoint fails the write with the policy's message, before any connection); all of
    them end within `deadline` seconds, and each operation waits at most `timeout`.
    Never raises for storage problems.
    """
    key = "/".join(
        part for part in (location.prefix, f".lakeport-probe-{uuid.uuid4().hex}") if part
    )
    bucket_url = location.bucket_url()
    object_url = f"{bucket_url}/{quote(key, safe='/~')}"
    results: dict[str, CheckResult] = {}

    def check(name: str, action: Callable[[], str]) -> bool:
        try:
            results[name] = CheckResult(name, Outcome.PASSED, action())
        except _CheckFailed as failure:
            results[name] = CheckResult(name, Outcome.FAILED, str(failure))
        return results[name].passed

    with (
        total_deadline(deadline),
        policy.client(
            auth=SigV4Auth(credentials, location.region),
            timeout=httpx.Timeout(timeout, connect=min(timeout, 3.0)),
            # Bodies are read as sent, to the cap: nothing to decompress.
            headers={"accept-encoding": "identity"},
        ) as client,
    ):

        def write() -> str:
            _put_object(client, object_url)
            return f"Wrote a probe object under {location}"

        def read() -> str:
            if _call(client, "GET", object_url).content != PROBE_CONTENT:
                raise _CheckFailed("Read back different bytes than were written")
            return "Read the probe object back"

        def list_prefix() -> str:
            listing = _call(
                client, "GET", f"{bucket_url}/", params={"list-type": "2", "prefix": key}
            )
            if key not in _listed_keys(listing.content):
                raise _CheckFailed("The probe object is missing from the listing of the prefix")
            return f"Listed {location}"

        def delete() -> str:
            _call(client, "DELETE", object_url)
            return "Deleted the probe object"

        if check("write", write):
            check("read", read)
            check("list", list_prefix)
            check("delete", delete)
    skipped = "Not run: the write check failed"
    return ProbeReport(
        location,
        tuple(
            results.get(name) or CheckResult(name, Outcome.SKIPPED, skipped)
            for name in ("write", "read", "list", "delete")
        ),
    )
