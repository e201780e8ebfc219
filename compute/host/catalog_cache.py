"""Per-warehouse Iceberg catalog bindings on a compute unit.

An execution reaches its warehouse through a Spark catalog whose settings carry the catalog
token and the storage credentials the catalog vended for that warehouse. The Spark host keeps
one `CatalogBinding` per warehouse, made lazily by the first execution for it and reused by
later ones while its token and credentials stay valid long enough for a new execution
(`min_remaining_s`). A binding whose time is running out is replaced by a new version under
a new catalog name (`wh_<warehouse>_v<n>`); executions that hold the old binding keep it,
since each execution applies its binding to its own Spark session. Looking up and adding a
binding happen under one lock, so concurrent executions for one warehouse share one binding.

Storage credentials: each table is read and written with the credentials vended for it, renewed
before they expire (VendedCredentialsFileIO, compute/java/); a binding's S3A settings (the keys
vended with the run's first table) serve only a table vended none. The unit's Spark sessions
route s3:// through Lakeport's CredentialKeyedS3AFileSystem
(compute/java/), which shares S3A file systems per bucket and credentials. Hadoop's own cache,
one per bucket and JVM, would keep the first credentials for good: a renewed binding would
still use expired keys.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from compute.contract import ACCESS_DELEGATION
from compute.host.spark_session import S3Keys, catalog_s3a_conf, iceberg_catalog_conf


@dataclass(frozen=True)
class CatalogBinding:
    warehouse_id: str
    catalog_name: str
    conf: Mapping[str, str] = field(repr=False)
    expires_at: float  # when its token or its storage credentials expire (epoch seconds)


@dataclass(frozen=True)
class CatalogAccess:
    """What one execution brings to reach its warehouse: the catalog and the keys it vended."""

    uri: str
    warehouse: str
    token: str = field(repr=False)
    keys: S3Keys
    keys_expire_at: float | None = None  # None: the keys do not expire

    @classmethod
    def vended(
        cls, uri: str, warehouse: str, token: str, io_properties: Mapping[str, str]
    ) -> "CatalogAccess | None":
        """The access made of the storage keys the catalog vended with a table it loaded (the
        table's `io.properties`); None when it vended none."""
        if not io_properties.get("s3.access-key-id") or not io_properties.get(
            "s3.secret-access-key"
        ):
            return None
        expires_ms = io_properties.get("s3.session-token-expires-at-ms")
        keys = S3Keys(
            endpoint=io_properties.get("s3.endpoint"),
            access_key=io_properties["s3.access-key-id"],
            secret_key=io_properties["s3.secret-access-key"],
            session_token=io_properties.get("s3.session-token"),
            path_style=str(io_properties.get("s3.path-style-access", "true")).lower() == "true",
        )
        return cls(
            uri=uri,
            warehouse=warehouse,
            token=token,
            keys=keys,
            keys_expire_at=int(expires_ms) / 1000 if expires_ms else None,
        )


class CatalogCache:
    def __init__(
        self, *, min_remaining_s: float = 600.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.min_remaining_s = min_remaining_s
        self._clock = clock
        self._lock = threading.Lock()
        self._bindings: dict[str, CatalogBinding] = {}
        self._versions: dict[str, int] = {}

    def current(self, warehouse_id: str) -> CatalogBinding | None:
        """The warehouse's binding if there is one that stays valid long enough, else None."""
        with self._lock:
            return self._current(warehouse_id)

    def binding(self, warehouse_id: str, access: CatalogAccess) -> CatalogBinding:
        """The warehouse's binding, made from `access` if there is none that stays valid long enough."""
        with self._lock:
            if (current := self._current(warehouse_id)) is not None:
                return current
            version = self._versions.get(warehouse_id, 0) + 1
            name = f"wh_{warehouse_id.replace('-', '')}_v{version}"
            conf = {
                **iceberg_catalog_conf(
                    name,
                    warehouse=access.warehouse,
                    uri=access.uri,
                    token=access.token,
                    access_delegation=ACCESS_DELEGATION,
                ),
                # A bearer token, the execution's: Iceberg must not try to exchange it for another.
                f"spark.sql.catalog.{name}.rest.auth.type": "oauth2",
                f"spark.sql.catalog.{name}.token-refresh-enabled": "false",
                **catalog_s3a_conf(name, access.keys),
            }
            # An opaque token's lifetime is unknown: its binding then serves this execution only.
            expiries = [
                token_expiry(access.token) or self._clock(),
                access.keys_expire_at or float("inf"),
            ]
            binding = CatalogBinding(warehouse_id, name, conf, min(expiries))
            self._bindings[warehouse_id] = binding
            self._versions[warehouse_id] = version
            return binding

    def bindings(self) -> dict[str, CatalogBinding]:
        """Every warehouse's latest binding, valid or not."""
        with self._lock:
            return dict(self._bindings)

    def current_bindings(self) -> list[CatalogBinding]:
        with self._lock:
            return [
                binding
                for warehouse_id in self._bindings
                if (binding := self._current(warehouse_id))
            ]

    def version(self, warehouse_id: str) -> int:
        with self._lock:
            return self._versions.get(warehouse_id, 0)

    def adopt(self, binding: CatalogBinding, version: int) -> None:
        """Take a binding a run made in a process of its own (compute/run/forked_runs.py), unless a
        later version is here already."""
        with self._lock:
            if version > self._versions.get(binding.warehouse_id, 0):
                self._bindings[binding.warehouse_id] = binding
                self._versions[binding.warehouse_id] = version

    def after_fork(self) -> None:
        """In a forked child: a host thread may have held the lock at the fork."""
        self._lock = threading.Lock()

    def _current(self, warehouse_id: str) -> CatalogBinding | None:
        current = self._bindings.get(warehouse_id)
        if current is not None and current.expires_at - self._clock() > self.min_remaining_s:
            return current
        return None


def token_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT (read, not verified: the catalog verifies it), or None."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return float(claims["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None
