"""What Lakekeeper's API takes and returns, as Lakeport uses it (management-open-api.yaml,
rest-catalog-open-api.yaml): storage profiles and credentials, warehouses, tables, grants, users.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar

Resource = TypeVar("Resource")


# Relations of a warehouse (management-open-api.yaml, WarehouseRelation).
WAREHOUSE_RELATIONS = frozenset(
    {
        "ownership",
        "pass_grants",
        "manage_grants",
        "describe",
        "select",
        "create",
        "modify",
        "manage_tags",
    }
)


def _from_api(cls: type[Resource], data: dict[str, Any], **given: Any) -> Resource:
    """`cls` from an object of Lakekeeper's whose keys are its fields' names in kebab case (a
    field with a default may be absent); `given` holds the fields the API names otherwise."""
    values = {}
    for f in fields(cls):
        key = f.name.replace("_", "-")
        if f.name not in given and (key in data or f.default is MISSING):
            values[f.name] = data[key]
    return cls(**values, **given)


@dataclass(frozen=True)
class S3StorageProfile:
    """Where a warehouse keeps its data: an S3 (or S3-compatible) bucket and key prefix."""

    bucket: str
    region: str
    key_prefix: str | None = None
    endpoint: str | None = None
    path_style_access: bool | None = None
    flavor: str | None = None  # "aws" or "s3-compat"; Lakekeeper assumes "aws" when absent
    sts_enabled: bool = False
    # How long vended credentials last (STS `DurationSeconds`; Lakekeeper's default 3600,
    # `sts-token-validity-seconds` in crates/lakekeeper/src/service/storage/s3.rs).
    sts_token_validity_seconds: int | None = None

    def to_api(self) -> dict[str, Any]:
        optional = {
            "key-prefix": self.key_prefix,
            "endpoint": self.endpoint,
            "path-style-access": self.path_style_access,
            "flavor": self.flavor,
            "sts-token-validity-seconds": self.sts_token_validity_seconds,
        }
        return {
            "type": "s3",
            "bucket": self.bucket,
            "region": self.region,
            "sts-enabled": self.sts_enabled,
            **{key: value for key, value in optional.items() if value is not None},
        }

    from_api = classmethod(_from_api)


@dataclass(frozen=True)
class S3AccessKeyCredential:
    """An S3 access key pair Lakekeeper uses to reach a warehouse's bucket."""

    access_key_id: str
    secret_access_key: str = field(repr=False)

    def __repr__(self) -> str:
        return (
            f"S3AccessKeyCredential(access_key_id={self.access_key_id!r}, secret_access_key='***')"
        )

    def to_api(self) -> dict[str, Any]:
        return {
            "type": "s3",
            "credential-type": "access-key",
            "access-key-id": self.access_key_id,
            "secret-access-key": self.secret_access_key,
        }


@dataclass(frozen=True)
class DeleteProfile:
    """What dropping a table does: delete at once ("hard") or after `expiration_seconds` ("soft")."""

    type: str = "hard"
    expiration_seconds: int | None = None

    @classmethod
    def hard(cls) -> "DeleteProfile":
        return cls("hard")

    @classmethod
    def soft(cls, expiration_seconds: int) -> "DeleteProfile":
        return cls("soft", expiration_seconds)

    def to_api(self) -> dict[str, Any]:
        if self.type == "soft":
            return {"type": "soft", "expiration-seconds": self.expiration_seconds}
        return {"type": "hard"}

    from_api = classmethod(_from_api)


@dataclass(frozen=True)
class WarehouseInfo:
    """A warehouse as Lakekeeper describes it. `storage_profile` is None for non-S3 storage."""

    id: str
    name: str
    project_id: str
    status: str  # "active" or "inactive"
    storage_type: str  # "s3", "adls", "gcs", ...
    storage_profile: S3StorageProfile | None
    delete_profile: DeleteProfile
    protected: bool = False
    storage_credential_type: str | None = None  # e.g. "access-key"; never the secret
    updated_at: str | None = None

    @property
    def is_active(self) -> bool:
        return self.status == "active"

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> "WarehouseInfo":
        profile = data["storage-profile"]
        credential_type = data.get("storage-credential-type") or {}
        return _from_api(
            cls,
            data,
            id=data["warehouse-id"],
            storage_type=profile["type"],
            storage_profile=S3StorageProfile.from_api(profile) if profile["type"] == "s3" else None,
            delete_profile=DeleteProfile.from_api(data["delete-profile"]),
            storage_credential_type=credential_type.get("credential-type"),
        )


@dataclass(frozen=True)
class ServerInfo:
    version: str
    bootstrapped: bool
    server_id: str
    authz_backend: str
    default_project_id: str | None = None

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> "ServerInfo":
        return _from_api(cls, data, version=data["lakekeeper-version"])


@dataclass(frozen=True)
class TableIdentifier:
    namespace: tuple[str, ...]
    name: str

    def __str__(self) -> str:
        return ".".join((*self.namespace, self.name))


@dataclass(frozen=True)
class TableSummary:
    """A table's size as of its current snapshot (counts are None before the first write)."""

    identifier: TableIdentifier
    location: str | None
    format_version: int
    current_snapshot_id: int | None
    total_records: int | None
    total_files_size: int | None  # bytes
    total_data_files: int | None
    last_updated_ms: int | None

    @classmethod
    def from_load_table(cls, identifier: TableIdentifier, result: dict[str, Any]) -> "TableSummary":
        metadata = result["metadata"]
        snapshot_id = metadata.get("current-snapshot-id")
        # Iceberg v1 writers mark "no snapshot" with -1.
        if snapshot_id == -1:
            snapshot_id = None
        summary = next(
            (
                snapshot.get("summary", {})
                for snapshot in metadata.get("snapshots") or []
                if snapshot["snapshot-id"] == snapshot_id
            ),
            {},
        )

        def count(key: str) -> int | None:
            value = summary.get(key)
            return int(value) if value is not None else None

        return cls(
            identifier=identifier,
            location=metadata.get("location"),
            format_version=metadata["format-version"],
            current_snapshot_id=snapshot_id,
            total_records=count("total-records"),
            total_files_size=count("total-files-size"),
            total_data_files=count("total-data-files"),
            last_updated_ms=metadata.get("last-updated-ms"),
        )


@dataclass(frozen=True)
class PurgeResult:
    tables_dropped: int
    namespaces_dropped: int


@dataclass(frozen=True)
class WarehouseAssignment:
    """One grant on a warehouse (OpenFGA authorizer): `relation` (one of WAREHOUSE_RELATIONS)
    held by a user (Lakekeeper's user id, e.g. `oidc~<sub>`) or a role (its UUID), never both."""

    relation: str
    user: str | None = None
    role: str | None = None

    def __post_init__(self) -> None:
        if self.relation not in WAREHOUSE_RELATIONS:
            raise ValueError(f"unknown warehouse relation {self.relation!r}")
        if (self.user is None) == (self.role is None):
            raise ValueError("a warehouse assignment names exactly one of user and role")

    def to_api(self) -> dict[str, str]:
        holder = {"user": self.user} if self.user is not None else {"role": self.role}
        return {"type": self.relation, **holder}

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> "WarehouseAssignment":
        return _from_api(cls, data, relation=data["type"])


@dataclass(frozen=True)
class CatalogRole:
    """A role in Lakekeeper's project: grants given to it reach its assignees."""

    id: str
    name: str

    from_api = classmethod(_from_api)


@dataclass(frozen=True)
class CatalogUser:
    """A user as Lakekeeper knows it (`id` is `<idp>~<subject>`)."""

    id: str
    name: str
    user_type: str  # "human" or "application"
    email: str | None = None

    from_api = classmethod(_from_api)
