"""What vended storage credentials may do, and for how long, decided as Lakekeeper decides it.

Lakekeeper (v0.13.3) vends S3 credentials by STS `AssumeRole` with a session policy that
narrows them to one table's location and to the caller's privilege on that table:

- which privilege: loading a table (`loadTable`, `loadCredentials`) gives `ReadWriteDelete`
  to a caller whose grants allow `can_write_data` on the table, `Read` to one that allows only
  `can_read_data`, and no credentials otherwise
  (crates/lakekeeper/src/server/tables.rs, `interpret_authz_results_for_load_table`;
  crates/lakekeeper/src/server/tables/load_table.rs vends only `if let Some(storage_permissions)`).
  In the OpenFGA model `can_write_data` is `modify` and `can_read_data` is `select`
  (authz/openfga/v4.7/components/lakekeeper_table.fga, the model active at v0.13.3), both
  inherited from the warehouse, where ownership implies them. Creating (and registering) a table vends `ReadWriteDelete` for the new table
  (crates/lakekeeper/src/server/tables/create_table.rs, crates/lakekeeper/src/server/tables.rs).
- which actions: `S3Profile::permission_to_actions` (crates/lakekeeper/src/service/storage/s3.rs).
- which resources: `S3Profile::get_sts_policy_string` (same file): the objects under the table's
  key prefix, `s3:ListBucket` with the condition `s3:prefix` under it, and `s3:GetBucketLocation`;
  the key escaped by `escape_iam_glob_literal` so a `*` in a path is matched literally.
- how long: the storage profile's `sts-token-validity-seconds`, sent as `DurationSeconds`
  (`assume_role_with_sts`, same file; docs/docs/storage.md), 3600 when absent (`fn_3600`).
- how often: one set per table and privilege is served for half its lifetime, whoever asks
  (Lakekeeper's short-term-credentials cache: `credential_cache`).

The stand-in's differences (see README.md here): its default lifetime is 15 minutes, not an
hour; a profile lifetime below STS's 900 s is stated, not granted (`stated_expiry`), so that
tests see clients renew; and `DevCatalogConfig.vended_credentials_scope` "warehouse" may widen the location
to the warehouse's whole table bucket (privilege and lifetime still apply), for engines that
bind one set of credentials per warehouse.
"""

from __future__ import annotations

import enum
import json
import time
from urllib.parse import urlsplit

# The shortest lifetime STS grants (AWS and SeaweedFS both refuse a `DurationSeconds` below 900):
# a downgraded or revoked grantee's credentials vended earlier keep working at most this long.
DEFAULT_VENDED_CREDENTIALS_SECONDS = 15 * 60
# `DurationSeconds` bounds of STS AssumeRole (AWS; SeaweedFS answers InvalidParameterValue outside).
STS_DURATION_RANGE = range(900, 43200 + 1)
# The profile field that sets the lifetime (Lakekeeper's S3Profile `sts-token-validity-seconds`).
LIFETIME_FIELD = "sts-token-validity-seconds"

SCOPE_TABLE = "table"  # Lakekeeper's: the table's location
SCOPE_WAREHOUSE = "warehouse"  # the warehouse's whole table bucket
SCOPES = (SCOPE_TABLE, SCOPE_WAREHOUSE)

# Lakekeeper's warehouse relations that reach `can_write_data` / `can_read_data` of a table.
_WRITES_DATA = frozenset({"ownership", "modify"})
_READS_DATA = frozenset({"ownership", "modify", "select"})


class StoragePermissions(enum.Enum):
    """Lakekeeper's `StoragePermissions` (crates/lakekeeper/src/service/storage/mod.rs)."""

    READ = "Read"
    READ_WRITE = "ReadWrite"
    READ_WRITE_DELETE = "ReadWriteDelete"

    @property
    def actions(self) -> list[str]:
        """`S3Profile::permission_to_actions`."""
        return list(_ACTIONS[self])


_ACTIONS = {
    StoragePermissions.READ: ("s3:GetObject", "s3:GetObjectVersion"),
    StoragePermissions.READ_WRITE: (
        "s3:GetObject",
        "s3:GetObjectVersion",
        "s3:PutObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
    ),
    StoragePermissions.READ_WRITE_DELETE: (
        "s3:GetObject",
        "s3:GetObjectVersion",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
    ),
}


def load_permissions(relations: set[str], project_admin: bool) -> StoragePermissions | None:
    """What a caller holding `relations` on the warehouse gets when it loads a table: write data
    (`modify`, ownership; project admins hold everything) → ReadWriteDelete, read data
    (`select`) → Read, else None (no credentials)."""
    if project_admin or relations & _WRITES_DATA:
        return StoragePermissions.READ_WRITE_DELETE
    if relations & _READS_DATA:
        return StoragePermissions.READ
    return None


def lifetime_seconds(storage_profile: dict, default: int) -> int:
    """The warehouse profile's `sts-token-validity-seconds`, else `default`."""
    value = storage_profile.get(LIFETIME_FIELD)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def stated_expiry(granted_expiry: float, lifetime: int, now: float | None = None) -> float:
    """When vended credentials are said to expire (epoch seconds): as granted, or sooner when the
    profile's lifetime is below STS's minimum. STS grants at least 900 s, so a lifetime below it
    is stated, not enforced: the stand-in's way to make clients renew (loadCredentials) within
    a test's time. Lakekeeper would pass it to STS, which refuses it."""
    if lifetime >= STS_DURATION_RANGE.start:
        return granted_expiry
    return min(granted_expiry, (time.time() if now is None else now) + lifetime)


def escape_iam_glob_literal(value: str) -> str:
    """Lakekeeper's `escape_iam_glob_literal`: `*`, `?` and `$` of a path matched literally."""
    return "".join({"*": "${*}", "?": "${?}", "$": "${$}"}.get(char, char) for char in value)


def split_location(location: str) -> tuple[str, str]:
    """`s3://bucket/a/b/` → ("bucket", "a/b/"); the key ends with `/` unless empty."""
    parts = urlsplit(location)
    if parts.scheme not in ("s3", "s3a") or not parts.netloc:
        raise ValueError(f"not an S3 location: {location!r}")
    key = parts.path.strip("/")
    return parts.netloc, f"{key}/" if key else ""


def sts_policy(bucket: str, key_prefix: str, permissions: StoragePermissions) -> str:
    """Lakekeeper's `get_sts_policy_string` for objects under `key_prefix` of `bucket` (a key
    prefix "" is the whole bucket; then listing is not narrowed by a condition)."""
    bucket_arn = f"arn:aws:s3:::{bucket}"
    key_wildcard = f"{escape_iam_glob_literal(key_prefix)}*"
    listing = {
        "Sid": "ListBucketForFolder",
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": bucket_arn,
    }
    if key_prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": key_wildcard}}
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "TableAccess",
                    "Effect": "Allow",
                    "Action": permissions.actions,
                    "Resource": f"{bucket_arn}/{key_wildcard}",
                },
                listing,
                {
                    "Sid": "GetBucketLocation",
                    "Effect": "Allow",
                    "Action": "s3:GetBucketLocation",
                    "Resource": bucket_arn,
                },
            ],
        }
    )
