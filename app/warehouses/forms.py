"""Validation of the warehouse forms: the same rules inline (HTMX, per field) and on submit.

Secret keys are validated but never echoed back: a re-rendered form leaves them empty.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{1,46}[a-z0-9]$")
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
REGION_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
PREFIX_SEGMENT_RE = re.compile(r"^[A-Za-z0-9!_.*'()-]+$")
ACCESS_KEY_RE = re.compile(r"^[A-Za-z0-9_+=,.@/-]{3,128}$")
FLAVORS = {"s3-compat": "S3-compatible (SeaweedFS, MinIO, Ceph, …)", "aws": "AWS S3"}

REGISTER_FIELDS = (
    "name",
    "bucket",
    "key_prefix",
    "endpoint",
    "region",
    "path_style_access",
    "flavor",
    "access_key_id",
    "secret_access_key",
)
SECRET_FIELDS = ("secret_access_key",)
# What the connection test needs: the storage and its keys (no name).
PROBE_FIELDS = (
    "bucket",
    "key_prefix",
    "endpoint",
    "region",
    "flavor",
    "access_key_id",
    "secret_access_key",
)


def _matching(pattern: re.Pattern, missing: str, invalid: str):
    """A check: `missing` for an empty value, `invalid` for one that does not match `pattern`."""

    def check(value: str, _form: dict) -> str | None:
        if not value:
            return missing
        return None if pattern.match(value) else invalid

    return check


check_name = _matching(
    NAME_RE,
    "Give the warehouse a name.",
    "3–48 characters: lowercase letters, digits and hyphens, starting with a letter.",
)
check_region = _matching(
    REGION_RE,
    "Give the region (S3-compatible stores usually accept us-east-1).",
    "Lowercase letters, digits and hyphens, e.g. eu-central-1.",
)
check_access_key_id = _matching(
    ACCESS_KEY_RE, "Give the access key id.", "3–128 characters, without spaces."
)


def check_bucket(value: str, _form: dict) -> str | None:
    if not value:
        return "Name the S3 bucket."
    if not BUCKET_RE.match(value) or ".." in value or ".-" in value or "-." in value:
        return "Not a valid bucket name: 3–63 lowercase letters, digits, dots and hyphens."
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return None
    return "A bucket name cannot look like an IP address."


def check_key_prefix(value: str, _form: dict) -> str | None:
    if not value:
        return None
    if value.startswith("/") or value.endswith("/"):
        return "Leave out leading and trailing slashes."
    if len(value) > 512:
        return "At most 512 characters."
    segments = value.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        return "Empty, '.' or '..' path segments are not allowed."
    if not all(PREFIX_SEGMENT_RE.match(segment) for segment in segments):
        return "Use letters, digits and - _ . ! * ' ( ) between slashes."
    return None


def check_endpoint(value: str, form: dict) -> str | None:
    if not value:
        if form.get("flavor", "s3-compat") == "s3-compat":
            return "An S3-compatible store needs its endpoint URL."
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "An http:// or https:// URL, e.g. https://s3.example.com."
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "Only scheme, host and port: the bucket goes in its own field."
    try:
        parts.port
    except ValueError:
        return "The port is not a number between 1 and 65535."
    return None


def check_flavor(value: str, _form: dict) -> str | None:
    return None if value in FLAVORS else "Choose AWS S3 or S3-compatible."


def check_secret_access_key(value: str, _form: dict) -> str | None:
    if not value:
        return "Give the secret access key."
    if not 8 <= len(value) <= 256 or any(c.isspace() for c in value):
        return "8–256 characters, without spaces."
    return None


CHECKS = {
    "name": check_name,
    "bucket": check_bucket,
    "key_prefix": check_key_prefix,
    "endpoint": check_endpoint,
    "region": check_region,
    "flavor": check_flavor,
    "access_key_id": check_access_key_id,
    "secret_access_key": check_secret_access_key,
}


@dataclass
class StorageForm:
    """The parsed register form (or a subset of it, e.g. for the connection test)."""

    name: str
    bucket: str
    key_prefix: str
    endpoint: str
    region: str
    path_style_access: bool
    flavor: str
    access_key_id: str
    secret_access_key: str

    def __repr__(self) -> str:
        return f"StorageForm(name={self.name!r}, bucket={self.bucket!r}, access_key_id={self.access_key_id!r}, secret_access_key='***')"


def read_form(data) -> dict:
    values = {field: (data.get(field) or "").strip() for field in REGISTER_FIELDS}
    values["flavor"] = values["flavor"] or "s3-compat"
    values["path_style_access"] = data.get("path_style_access") in ("on", "true", "1", "yes")
    return values


def initial_values() -> dict:
    """An empty form; path-style addressing is on, as S3-compatible stores (the default flavor) need it."""
    values = read_form({})
    values["path_style_access"] = values["flavor"] == "s3-compat"
    return values


def validate(values: dict, fields=CHECKS) -> dict[str, str]:
    """Field name → message for every field that fails its check."""
    messages = {field: CHECKS[field](values.get(field, ""), values) for field in fields}
    return {field: message for field, message in messages.items() if message}


def parse_storage_form(data, fields=CHECKS) -> tuple[StorageForm, dict[str, str]]:
    values = read_form(data)
    return StorageForm(**values), validate(values, fields)


def check_one(field: str, data) -> str | None:
    """Inline validation of one field (the HTMX call as the user types)."""
    return validate(read_form(data), [field]).get(field) if field in CHECKS else None


def validate_new_name(value: str) -> str | None:
    return check_name(value.strip(), {})
