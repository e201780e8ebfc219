"""The dev catalog's side of SeaweedFS: table buckets (S3 Tables API), its Iceberg REST catalog,
and its STS for vended credentials.

Table buckets are created and deleted through SeaweedFS's S3 Tables API (AWS's JSON protocol:
`POST /` with `X-Amz-Target: S3Tables.<Operation>`, SigV4-signed for service `s3tables`).
Iceberg REST calls go to SeaweedFS's catalog with a token from its own OAuth endpoint, which
accepts only SeaweedFS tokens: the admin key is the client id and secret.
Vended credentials come from STS `AssumeRole` (AWS's query protocol, signed for service `sts`)
of the warehouse-credentials role, with Lakekeeper's session policy (`vending.sts_policy`):
SeaweedFS enforces it, the `s3:prefix` condition on listing included, and refuses a
`DurationSeconds` outside 900..43200 as AWS does.
"""

from __future__ import annotations

import datetime
import threading
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from urllib.parse import quote

import httpx

from app.storage_probe import S3Credentials, SigV4Auth
from devstack.devcatalog.config import DevCatalogConfig
from devstack.devcatalog.errors import CatalogError
from devstack.devcatalog.vending import StoragePermissions, split_location, sts_policy
from devstack.seaweedfs import WAREHOUSE_CREDENTIALS_ROLE

_TOKEN_REFRESH_MARGIN_SECONDS = 60


class TableBucketNotEmpty(Exception):
    """A namespace of the table bucket still holds a table."""


@dataclass(frozen=True)
class VendedCredentials:
    """Temporary S3 credentials, what they reach (`location`, `permissions`) and when they expire."""

    credentials: S3Credentials
    expires_at: datetime.datetime
    location: str
    permissions: StoragePermissions


def _backend_error(what: str, response: httpx.Response | None = None) -> CatalogError:
    detail = (
        f" (HTTP {response.status_code}: {response.text[:200]})" if response is not None else ""
    )
    return CatalogError(502, "StorageBackendError", f"SeaweedFS failed to {what}{detail}")


class SeaweedCatalog:
    def __init__(self, config: DevCatalogConfig) -> None:
        self.s3_endpoint = config.s3_endpoint.rstrip("/")
        self.iceberg_url = config.iceberg_url.rstrip("/")
        self.admin = S3Credentials(config.admin_access_key_id, config.admin_secret_access_key)
        self.region = config.s3_region
        self.tables_api = httpx.Client(
            auth=SigV4Auth(self.admin, config.s3_region, "s3tables"), timeout=15.0
        )
        self.sts = httpx.Client(auth=SigV4Auth(self.admin, config.s3_region, "sts"), timeout=15.0)
        self.iceberg = httpx.Client(timeout=60.0)
        self._token: tuple[str, float] | None = None
        self._token_lock = threading.Lock()

    # --- table buckets ------------------------------------------------------------------

    def _tables_call(self, operation: str, body: dict, what: str) -> httpx.Response:
        try:
            return self.tables_api.post(
                f"{self.s3_endpoint}/",
                json=body,
                headers={
                    "x-amz-target": f"S3Tables.{operation}",
                    "content-type": "application/x-amz-json-1.1",
                },
            )
        except httpx.HTTPError:
            raise _backend_error(what) from None

    def create_table_bucket(self, name: str) -> str:
        """Create the table bucket and wait until the Iceberg catalog serves it; returns its ARN."""
        response = self._tables_call(
            "CreateTableBucket", {"name": name}, f"create table bucket {name}"
        )
        if not response.is_success:
            raise _backend_error(f"create table bucket {name}", response)
        deadline = time.monotonic() + 10
        while self.iceberg_call("GET", name, "namespaces").status_code != 200:
            if time.monotonic() > deadline:
                raise _backend_error(f"serve the new table bucket {name} in its Iceberg catalog")
            time.sleep(0.2)
        return response.json()["arn"]

    def has_tables(self, arn: str) -> bool:
        response = self._tables_call(
            "ListTables", {"tableBucketARN": arn, "maxTables": 1}, "list tables"
        )
        if not response.is_success:
            raise _backend_error("list tables", response)
        return bool(response.json().get("tables"))

    def delete_table_bucket(self, name: str, arn: str) -> None:
        """Drop the bucket's namespaces, then the bucket (SeaweedFS removes any files left in it).
        Raises TableBucketNotEmpty if a table turns up on the way."""
        response = self._tables_call("ListNamespaces", {"tableBucketARN": arn}, "list namespaces")
        if not response.is_success:
            raise _backend_error("list namespaces", response)
        # Deepest first: a parent namespace cannot go before its children.
        namespaces = sorted(
            (entry["namespace"] for entry in response.json().get("namespaces") or []), key=len
        )
        for namespace in reversed(namespaces):
            dropped = self.iceberg_call(
                "DELETE", name, f"namespaces/{quote(chr(0x1F).join(namespace), safe='')}"
            )
            if dropped.status_code == 409:
                raise TableBucketNotEmpty(name)
            if dropped.status_code not in (204, 404):
                raise _backend_error(f"drop namespace {'.'.join(namespace)}", dropped)
        response = self._tables_call(
            "DeleteTableBucket", {"tableBucketARN": arn}, f"delete table bucket {name}"
        )
        if response.status_code == 409:
            raise TableBucketNotEmpty(name)
        if not response.is_success and response.status_code != 404:
            raise _backend_error(f"delete table bucket {name}", response)

    # --- vended credentials -------------------------------------------------------------

    def vend_credentials(
        self,
        location: str,
        permissions: StoragePermissions,
        lifetime_seconds: int,
        session_name: str,
    ) -> VendedCredentials:
        """Fresh STS credentials for the objects under `location` (`s3://bucket/key/`), doing
        what `permissions` allow, valid `lifetime_seconds`. `session_name` (letters, digits,
        `-`; at most 64 characters) names the session in SeaweedFS's logs."""
        bucket, key_prefix = split_location(location)
        what = f"vend credentials for {location}"
        try:
            response = self.sts.post(
                f"{self.s3_endpoint}/",
                data={
                    "Action": "AssumeRole",
                    "Version": "2011-06-15",
                    "RoleArn": WAREHOUSE_CREDENTIALS_ROLE,
                    "RoleSessionName": session_name,
                    "DurationSeconds": str(lifetime_seconds),
                    "Policy": sts_policy(bucket, key_prefix, permissions),
                },
            )
        except httpx.HTTPError:
            raise _backend_error(what) from None
        if not response.is_success:
            raise _backend_error(what, response)
        try:
            answer = ElementTree.fromstring(response.content).find(".//{*}Credentials")
            return VendedCredentials(
                S3Credentials(
                    answer.findtext("{*}AccessKeyId"),
                    answer.findtext("{*}SecretAccessKey"),
                    answer.findtext("{*}SessionToken"),
                ),
                datetime.datetime.fromisoformat(answer.findtext("{*}Expiration")),
                f"s3://{bucket}/{key_prefix}",
                permissions,
            )
        except (ElementTree.ParseError, AttributeError, TypeError, ValueError):
            # Not `response` itself: a garbled answer may still hold a secret.
            raise _backend_error(what) from None

    # --- Iceberg REST -------------------------------------------------------------------

    def _bearer_token(self) -> str:
        with self._token_lock:
            if self._token is None or time.monotonic() > self._token[1]:
                try:
                    response = self.iceberg.post(
                        f"{self.iceberg_url}/v1/oauth/tokens",
                        data={
                            "grant_type": "client_credentials",
                            "client_id": self.admin.access_key_id,
                            "client_secret": self.admin.secret_access_key,
                        },
                    )
                except httpx.HTTPError:
                    raise _backend_error("issue a catalog token") from None
                if not response.is_success:
                    raise _backend_error("issue a catalog token", response)
                answer = response.json()
                expires_at = (
                    time.monotonic()
                    + answer.get("expires_in", 3600)
                    - _TOKEN_REFRESH_MARGIN_SECONDS
                )
                self._token = (answer["access_token"], expires_at)
            return self._token[0]

    def iceberg_call(
        self,
        method: str,
        table_bucket: str,
        path: str,
        *,
        query: bytes = b"",
        content: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One call to SeaweedFS's Iceberg REST catalog, under the table bucket's prefix.
        `path` follows `/v1/<prefix>/` and is already URL-encoded."""
        url = f"{self.iceberg_url}/v1/{table_bucket}/{path}" + (
            f"?{query.decode('ascii')}" if query else ""
        )
        try:
            return self.iceberg.request(
                method,
                url,
                content=content,
                headers={**(headers or {}), "authorization": f"Bearer {self._bearer_token()}"},
            )
        except httpx.HTTPError:
            raise _backend_error(f"answer {method} {path}") from None
