"""The dev catalog's own store: warehouses and their storage credentials, users, roles and
their members, and warehouse grants (to a user, or to a role: held as `role:<id>`), in one
SQLite file.

Credentials sit in their own table, encrypted with Fernet. The dev catalog keeps them as
Lakekeeper does but never reads them back: its tables live in SeaweedFS table buckets that it
reaches with its own admin key. API answers carry the credential's type, never its values.
"""

from __future__ import annotations

import datetime
import json
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet

from app.storage_probe import S3Credentials, S3Location
from devstack.devcatalog.errors import CatalogError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS warehouse (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    name TEXT NOT NULL,
    storage_profile TEXT NOT NULL,
    delete_profile TEXT NOT NULL,
    status TEXT NOT NULL,
    table_bucket TEXT NOT NULL,
    table_bucket_arn TEXT NOT NULL,
    updated_at TEXT,
    UNIQUE (project_id, name)
);
CREATE TABLE IF NOT EXISTS storage_secret (
    warehouse_id TEXT PRIMARY KEY REFERENCES warehouse (id) ON DELETE CASCADE,
    ciphertext BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS catalog_user (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT,
    user_type TEXT NOT NULL,
    last_updated_with TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT
);
-- Grants name users by id as given: like OpenFGA, a grant may precede the user's registration.
CREATE TABLE IF NOT EXISTS catalog_role (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS role_member (
    role_id TEXT NOT NULL REFERENCES catalog_role (id) ON DELETE CASCADE,
    user_id TEXT NOT NULL,
    PRIMARY KEY (role_id, user_id)
);
CREATE TABLE IF NOT EXISTS warehouse_grant (
    warehouse_id TEXT NOT NULL REFERENCES warehouse (id) ON DELETE CASCADE,
    relation TEXT NOT NULL,
    user_id TEXT NOT NULL,
    PRIMARY KEY (warehouse_id, relation, user_id)
);
"""
ALL_FORMAT_VERSIONS = [1, 2, 3]


@dataclass(frozen=True)
class Warehouse:
    id: uuid.UUID
    project_id: str
    name: str
    storage_profile: dict  # the S3 profile as Lakekeeper shows it, `"type": "s3"` included
    delete_profile: dict
    status: str  # "active" or "inactive"
    # The SeaweedFS S3 Tables bucket that holds the warehouse's tables.
    table_bucket: str
    table_bucket_arn: str
    updated_at: str | None = None
    has_credential: bool = False

    @property
    def location(self) -> S3Location:
        profile = self.storage_profile
        return S3Location(
            bucket=profile["bucket"],
            region=profile["region"],
            key_prefix=profile.get("key-prefix") or "",
            endpoint=profile.get("endpoint"),
            path_style=profile.get("path-style-access"),
        )

    def as_api(self) -> dict:
        """The warehouse as Lakekeeper's `GetWarehouseResponse`."""
        answer = {
            "id": str(self.id),
            "warehouse-id": str(self.id),
            "name": self.name,
            "project-id": self.project_id,
            "storage-profile": self.storage_profile,
            "delete-profile": self.delete_profile,
            "status": self.status,
            "protected": False,
            "managed-by": "self-managed",
            "allowed-format-versions": ALL_FORMAT_VERSIONS,
            "updated-at": self.updated_at,
        }
        if self.has_credential:
            answer["storage-credential-type"] = {"type": "s3", "credential-type": "access-key"}
        return answer


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class WarehouseStore:
    _SELECT = """SELECT warehouse.*, storage_secret.warehouse_id IS NOT NULL AS has_credential
                 FROM warehouse LEFT JOIN storage_secret ON storage_secret.warehouse_id = warehouse.id"""

    def __init__(self, path: Path, encryption_key: str) -> None:
        self.path = Path(path)
        self.fernet = Fernet(encryption_key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as connection:
            connection.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        connection = sqlite3.connect(self.path, timeout=10)
        connection.row_factory = sqlite3.Row
        connection.execute("PRAGMA foreign_keys = ON")
        try:
            with connection:  # one transaction
                yield connection
        finally:
            connection.close()

    @staticmethod
    def _warehouse(row: sqlite3.Row) -> Warehouse:
        return Warehouse(
            id=uuid.UUID(row["id"]),
            project_id=row["project_id"],
            name=row["name"],
            storage_profile=json.loads(row["storage_profile"]),
            delete_profile=json.loads(row["delete_profile"]),
            status=row["status"],
            table_bucket=row["table_bucket"],
            table_bucket_arn=row["table_bucket_arn"],
            updated_at=row["updated_at"],
            has_credential=bool(row["has_credential"]),
        )

    def _encrypt(self, credentials: S3Credentials) -> bytes:
        plain = {
            "access-key-id": credentials.access_key_id,
            "secret-access-key": credentials.secret_access_key,
        }
        return self.fernet.encrypt(json.dumps(plain).encode())

    def add(self, warehouse: Warehouse, credentials: S3Credentials, owner_id: str) -> Warehouse:
        """Store a new warehouse; its creator `owner_id` owns it, as in Lakekeeper."""
        try:
            with self._connect() as connection:
                connection.execute(
                    "INSERT INTO warehouse VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        str(warehouse.id),
                        warehouse.project_id,
                        warehouse.name,
                        json.dumps(warehouse.storage_profile),
                        json.dumps(warehouse.delete_profile),
                        warehouse.status,
                        warehouse.table_bucket,
                        warehouse.table_bucket_arn,
                        None,
                    ),
                )
                connection.execute(
                    "INSERT INTO storage_secret VALUES (?, ?)",
                    (str(warehouse.id), self._encrypt(credentials)),
                )
                connection.execute(
                    "INSERT INTO warehouse_grant VALUES (?, 'ownership', ?)",
                    (str(warehouse.id), owner_id),
                )
        except sqlite3.IntegrityError:
            raise name_taken(warehouse.name, warehouse.project_id) from None
        return self.get(warehouse.id)

    def get(self, warehouse_id: uuid.UUID) -> Warehouse | None:
        with self._connect() as connection:
            row = connection.execute(
                f"{self._SELECT} WHERE warehouse.id = ?", (str(warehouse_id),)
            ).fetchone()
        return self._warehouse(row) if row else None

    def find_by_name(self, project_id: str, name: str) -> Warehouse | None:
        with self._connect() as connection:
            row = connection.execute(
                f"{self._SELECT} WHERE project_id = ? AND name = ?",
                (project_id, name),
            ).fetchone()
        return self._warehouse(row) if row else None

    def list(
        self, project_id: str, statuses: tuple[str, ...] = ("active", "inactive")
    ) -> list[Warehouse]:
        marks = ",".join("?" * len(statuses))
        with self._connect() as connection:
            rows = connection.execute(
                f"{self._SELECT} WHERE project_id = ? AND status IN ({marks}) ORDER BY name",
                (project_id, *statuses),
            ).fetchall()
        return [self._warehouse(row) for row in rows]

    def _update(self, warehouse_id: uuid.UUID, column: str, value: str) -> Warehouse:
        with self._connect() as connection:
            connection.execute(
                f"UPDATE warehouse SET {column} = ?, updated_at = ? WHERE id = ?",
                (value, _now(), str(warehouse_id)),
            )
        return self.get(warehouse_id)

    def rename(self, warehouse: Warehouse, new_name: str) -> Warehouse:
        try:
            return self._update(warehouse.id, "name", new_name)
        except sqlite3.IntegrityError:
            raise name_taken(new_name, warehouse.project_id) from None

    def set_status(self, warehouse_id: uuid.UUID, status: str) -> Warehouse:
        return self._update(warehouse_id, "status", status)

    def set_delete_profile(self, warehouse_id: uuid.UUID, delete_profile: dict) -> Warehouse:
        return self._update(warehouse_id, "delete_profile", json.dumps(delete_profile))

    def set_credentials(self, warehouse_id: uuid.UUID, credentials: S3Credentials) -> Warehouse:
        with self._connect() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO storage_secret VALUES (?, ?)",
                (str(warehouse_id), self._encrypt(credentials)),
            )
            connection.execute(
                "UPDATE warehouse SET updated_at = ? WHERE id = ?", (_now(), str(warehouse_id))
            )
        return self.get(warehouse_id)

    def delete(self, warehouse_id: uuid.UUID) -> None:
        with self._connect() as connection:
            connection.execute("DELETE FROM warehouse WHERE id = ?", (str(warehouse_id),))

    # --- Users and grants ---

    def user(self, user_id: str) -> dict | None:
        """The user as Lakekeeper's `User`, or None."""
        with self._connect() as connection:
            row = connection.execute(
                "SELECT * FROM catalog_user WHERE id = ?", (user_id,)
            ).fetchone()
        if row is None:
            return None
        return {
            "id": row["id"],
            "name": row["name"],
            "email": row["email"],
            "user-type": row["user_type"],
            "last-updated-with": row["last_updated_with"],
            "created-at": row["created_at"],
            "updated-at": row["updated_at"],
        }

    def save_user(
        self, user_id: str, name: str, email: str | None, user_type: str, how: str
    ) -> bool:
        """Create the user, or update the one with that id; True if it was created."""
        now = _now()
        with self._connect() as connection:
            updated = connection.execute(
                "UPDATE catalog_user SET name = ?, email = ?, user_type = ?, last_updated_with = ?, updated_at = ? "
                "WHERE id = ?",
                (name, email, user_type, how, now, user_id),
            ).rowcount
            if not updated:
                connection.execute(
                    "INSERT INTO catalog_user VALUES (?, ?, ?, ?, ?, ?, NULL)",
                    (user_id, name, email, user_type, how, now),
                )
        return not updated

    def grants(self, warehouse_id: uuid.UUID) -> list[tuple[str, str]]:
        """The warehouse's grants as (relation, user id) pairs."""
        with self._connect() as connection:
            rows = connection.execute(
                "SELECT relation, user_id FROM warehouse_grant WHERE warehouse_id = ? ORDER BY relation, user_id",
                (str(warehouse_id),),
            ).fetchall()
        return [(row["relation"], row["user_id"]) for row in rows]

    def relations(self, warehouse_id: uuid.UUID, user_id: str) -> set[str]:
        """What `user_id` holds on the warehouse: its own grants and those of the roles it is an
        assignee of, read on every request (a revoked grant or membership counts at once)."""
        with self._connect() as connection:
            rows = connection.execute(
                "SELECT relation FROM warehouse_grant WHERE warehouse_id = ? AND (user_id = ? OR user_id IN "
                "(SELECT 'role:' || role_id FROM role_member WHERE user_id = ?))",
                (str(warehouse_id), user_id, user_id),
            ).fetchall()
        return {row["relation"] for row in rows}

    # --- Roles ---

    def add_role(self, project_id: str, name: str, description: str | None) -> dict:
        role_id = str(uuid.uuid4())
        with self._connect() as connection:
            connection.execute(
                "INSERT INTO catalog_role VALUES (?, ?, ?, ?, ?)",
                (role_id, project_id, name, description, _now()),
            )
        return self.role(uuid.UUID(role_id))

    def role(self, role_id: uuid.UUID) -> dict | None:
        """The role as Lakekeeper's `Role`, or None."""
        with self._connect() as connection:
            row = connection.execute(
                "SELECT * FROM catalog_role WHERE id = ?", (str(role_id),)
            ).fetchone()
        if row is None:
            return None
        return {
            "id": row["id"],
            "ident": f"lakekeeper~{row['id']}",
            "provider-id": "lakekeeper",
            "source-id": row["id"],
            "name": row["name"],
            "description": row["description"],
            "project-id": row["project_id"],
            "created-at": row["created_at"],
            "updated-at": None,
        }

    def roles(self, project_id: str) -> list[dict]:
        with self._connect() as connection:
            ids = [
                row["id"]
                for row in connection.execute(
                    "SELECT id FROM catalog_role WHERE project_id = ? ORDER BY created_at, id",
                    (project_id,),
                )
            ]
        return [self.role(uuid.UUID(role_id)) for role_id in ids]

    def delete_role(self, role_id: uuid.UUID) -> None:
        # As Lakekeeper: its grants and its assignees go with it (lakekeeper/lakekeeper v0.13.3,
        # crates/lakekeeper/src/api/management/v1/role.rs `authorized_delete_role`, and
        # crates/authz-openfga/src/authorizer.rs `delete_role` -> `delete_all_relations`).
        with self._connect() as connection:
            connection.execute("DELETE FROM role_member WHERE role_id = ?", (str(role_id),))
            connection.execute(
                "DELETE FROM warehouse_grant WHERE user_id = ?", (f"role:{role_id}",)
            )
            connection.execute("DELETE FROM catalog_role WHERE id = ?", (str(role_id),))

    def role_members(self, role_id: uuid.UUID) -> list[str]:
        with self._connect() as connection:
            return [
                row["user_id"]
                for row in connection.execute(
                    "SELECT user_id FROM role_member WHERE role_id = ? ORDER BY user_id",
                    (str(role_id),),
                )
            ]

    def update_role_members(
        self, role_id: uuid.UUID, writes: list[str], deletes: list[str]
    ) -> None:
        with self._connect() as connection:
            connection.executemany(
                "DELETE FROM role_member WHERE role_id = ? AND user_id = ?",
                [(str(role_id), user_id) for user_id in deletes],
            )
            connection.executemany(
                "INSERT OR IGNORE INTO role_member VALUES (?, ?)",
                [(str(role_id), user_id) for user_id in writes],
            )

    def update_grants(
        self,
        warehouse_id: uuid.UUID,
        writes: list[tuple[str, str]],
        deletes: list[tuple[str, str]],
    ) -> None:
        """Remove `deletes` and add `writes` in one transaction (both idempotent)."""
        with self._connect() as connection:
            connection.executemany(
                "DELETE FROM warehouse_grant WHERE warehouse_id = ? AND relation = ? AND user_id = ?",
                [(str(warehouse_id), relation, user_id) for relation, user_id in deletes],
            )
            connection.executemany(
                "INSERT OR IGNORE INTO warehouse_grant VALUES (?, ?, ?)",
                [(str(warehouse_id), relation, user_id) for relation, user_id in writes],
            )


def name_taken(name: str, project_id: str) -> CatalogError:
    return CatalogError(
        409,
        "WarehouseAlreadyExists",
        f"Warehouse '{name}' already exists in project '{project_id}'",
    )
