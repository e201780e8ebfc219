"""The local stack's storage, offered on the register page (development only).

The local stack sets `LAKEPORT_DEV_STORAGE_HINT`: JSON naming its S3 endpoint, region,
addressing style, each test user's bucket and that bucket's development keys (the fixed,
documented ones the stack gives its own SeaweedFS, which open nothing else). When the setting
is empty, as in production, nothing here shows: `storage_hint` and `development_keys` return
None. The portal never imports the local stack: this setting is all it knows of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from flask import current_app

from app.models import User


@dataclass(frozen=True)
class StorageHint:
    endpoint: str
    region: str
    path_style: bool
    bucket: str  # the signed-in user's bucket; empty when the stack has none for them

    def form_values(self) -> dict:
        """The register form's fields this hint fills (as the page's script sets them)."""
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            "bucket": self.bucket,
            "flavor": "s3-compat",
            "path_style_access": self.path_style,
        }


@dataclass(frozen=True)
class DevelopmentKeys:
    bucket: str
    access_key_id: str
    secret_access_key: str

    def form_values(self) -> dict:
        return {"access_key_id": self.access_key_id, "secret_access_key": self.secret_access_key}


def parse_hint(raw: str) -> dict | None:
    """The setting's JSON, checked; None when unset. Raises ValueError when it is malformed."""
    if not raw.strip():
        return None
    hint = json.loads(raw)
    if (
        not isinstance(hint, dict)
        or not isinstance(hint.get("endpoint"), str)
        or not isinstance(hint.get("region"), str)
        or not isinstance(hint.get("buckets", {}), dict)
    ):
        raise ValueError(
            "LAKEPORT_DEV_STORAGE_HINT: expected {endpoint, region, path_style, buckets}"
        )
    return hint


def storage_hint(user: User) -> StorageHint | None:
    try:
        hint = parse_hint(current_app.config.get("DEV_STORAGE_HINT", ""))
    except ValueError as error:  # json.JSONDecodeError is one
        current_app.logger.warning("ignoring LAKEPORT_DEV_STORAGE_HINT: %s", error)
        return None
    if hint is None:
        return None
    return StorageHint(
        endpoint=hint["endpoint"],
        region=hint["region"],
        path_style=bool(hint.get("path_style", True)),
        bucket=hint.get("buckets", {}).get(user.email, ""),
    )


def development_keys(user: User) -> DevelopmentKeys | None:
    """The signed-in user's development keys for the local stack's SeaweedFS, if it runs."""
    hint = storage_hint(user)
    if hint is None or not hint.bucket:
        return None
    keys = (
        parse_hint(current_app.config["DEV_STORAGE_HINT"])
        .get("development_keys", {})
        .get(hint.bucket)
    )
    if not (
        isinstance(keys, dict)
        and isinstance(keys.get("access_key_id"), str)
        and isinstance(keys.get("secret_access_key"), str)
    ):
        return None
    return DevelopmentKeys(hint.bucket, keys["access_key_id"], keys["secret_access_key"])
