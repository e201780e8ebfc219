"""Settings of the Lakekeeper-compatible dev catalog (a development stand-in for Lakekeeper)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from app.lakekeeper.tokens import lakekeeper_user_id
from devstack.devcatalog.vending import (
    DEFAULT_VENDED_CREDENTIALS_SECONDS,
    SCOPE_TABLE,
    SCOPES,
    STS_DURATION_RANGE,
)
from devstack.oidc_provider import SERVICE_CLIENT_ID
from devstack.seaweedfs import SeaweedConfig

# The launcher hands the settings to the server process in this variable, as JSON, so that
# the admin secret and the encryption key are never written to disk or put on a command line.
ENVIRONMENT_VARIABLE = "LAKEPORT_DEVCATALOG_CONFIG"


@dataclass
class DevCatalogConfig:
    port: int
    # OpenID Connect issuer whose JWTs (audience `audience`) the catalog accepts.
    oidc_issuer: str
    # Holds the catalog's SQLite store.
    data_dir: Path
    # SeaweedFS: its S3 gateway (S3 Tables API too) and its Iceberg REST catalog.
    s3_endpoint: str
    iceberg_url: str
    admin_access_key_id: str
    admin_secret_access_key: str = field(repr=False)
    # A Fernet key (`cryptography.fernet.Fernet.generate_key()`) that encrypts the warehouses'
    # storage credentials at rest. Give the same key again to read an existing store.
    encryption_key: str = field(repr=False)
    audience: str = "lakekeeper"
    s3_region: str = "us-east-1"
    storage_check_timeout: float = 5.0
    # Lakekeeper user ids (`oidc~<sub>`) with the project_admin role in every project: the
    # portal's service identity, as deploy/compose.yaml's bootstrap makes it in Lakekeeper.
    project_admins: list[str] = field(
        default_factory=lambda: [lakekeeper_user_id(SERVICE_CLIENT_ID)]
    )
    # What vended credentials reach (`vending.SCOPES`): "table", Lakekeeper's rule (the loaded
    # table's location), or "warehouse" (the warehouse's whole table bucket), for engines that
    # bind one set of credentials per warehouse. Lakeport's units reach each table with its own
    # (compute/java/.../VendedCredentialsFileIO.java). Either way they carry the caller's
    # privilege and expire after their lifetime.
    vended_credentials_scope: str = SCOPE_TABLE
    # Their lifetime when the warehouse's profile sets no `sts-token-validity-seconds`.
    vended_credentials_seconds: int = DEFAULT_VENDED_CREDENTIALS_SECONDS
    # Lakekeeper's short-term-credentials cache (`LAKEKEEPER__CACHE__STC__ENABLED`, on by
    # default): one set per table and privilege, served for half its lifetime
    # (`credential_cache`).
    vended_credentials_cache: bool = True

    def __post_init__(self) -> None:
        if self.vended_credentials_scope not in SCOPES:
            raise ValueError(f"vended_credentials_scope must be one of {', '.join(SCOPES)}")
        if self.vended_credentials_seconds not in STS_DURATION_RANGE:
            raise ValueError("vended_credentials_seconds must be within STS's 900..43200")

    @classmethod
    def for_seaweedfs(
        cls,
        seaweed: SeaweedConfig,
        *,
        port: int,
        oidc_issuer: str,
        data_dir: Path,
        encryption_key: str,
        audience: str = "lakekeeper",
    ) -> "DevCatalogConfig":
        return cls(
            port=port,
            oidc_issuer=oidc_issuer,
            data_dir=Path(data_dir),
            s3_endpoint=seaweed.s3_endpoint,
            iceberg_url=seaweed.iceberg_url,
            admin_access_key_id=seaweed.admin_access_key_id,
            admin_secret_access_key=seaweed.admin_secret_access_key,
            encryption_key=encryption_key,
            audience=audience,
            s3_region=seaweed.region,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store_path(self) -> Path:
        return Path(self.data_dir) / "devcatalog.sqlite3"

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "data_dir": str(self.data_dir)})

    @classmethod
    def from_json(cls, text: str) -> "DevCatalogConfig":
        values = json.loads(text)
        return cls(**{**values, "data_dir": Path(values["data_dir"])})
