"""Lakekeeper's cache of short-term storage credentials, modelled.

Lakekeeper (v0.13.3) does not ask STS for every table load: `S3Profile::generate_table_config`
reads through `S3_STC_CACHE` (`get_or_fetch_temporary_credentials`,
crates/lakekeeper/src/service/storage/s3.rs; the cache in crates/lakekeeper/src/service/storage/cache.rs):

- the key is the request (`ShortTermCredentialsRequest`: the table's location, the storage
  permissions, the warehouse id and the table id), a hash of the storage profile and a hash of
  the warehouse's storage credential (`STCCacheKey::new`); the caller is not in it, so two
  callers with the same privilege on one table are served the same set;
- an entry is served until `credential_serve_window` of its validity has passed: half the
  profile's `sts-token-validity-seconds`, at most an hour (`StcExpiry`, `valid_until` set from
  `sts_token_validity_seconds` at the fetch; crates/lakekeeper/src/service/storage/mod.rs);
- at most `cache.stc.capacity` entries (10,000), on by default (`STCCache`,
  crates/lakekeeper/src/config.rs); errors are never cached.

loadTable, createTable and loadCredentials all vend through it, so a client that renews within
the window gets the same keys back. Lakekeeper's moka cache evicts by its own policy past the
capacity; here the entry closest to its end goes first.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

CAPACITY = 10_000
SERVE_WINDOW_CAP_SECONDS = 3600

Value = TypeVar("Value")


def serve_window(validity_seconds: float) -> float:
    """Lakekeeper's `credential_serve_window`: half the validity, at most an hour."""
    return min(validity_seconds / 2, SERVE_WINDOW_CAP_SECONDS)


@dataclass(frozen=True)
class CacheKey:
    """`STCCacheKey`: the request, the storage profile and the warehouse's storage credential."""

    table_location: str
    permissions: str
    warehouse_id: str
    table: str
    storage_profile: str
    storage_credential: str

    @classmethod
    def of(
        cls,
        table_location: str,
        permissions: str,
        warehouse_id: str,
        table: str,
        storage_profile: dict,
        storage_credential: bytes | str | None,
    ) -> CacheKey:
        credential = storage_credential or b""
        if isinstance(credential, str):
            credential = credential.encode()
        return cls(
            table_location,
            permissions,
            warehouse_id,
            table,
            hashlib.sha256(json.dumps(storage_profile, sort_keys=True).encode()).hexdigest(),
            hashlib.sha256(credential).hexdigest(),
        )


class ShortTermCredentialsCache(Generic[Value]):
    """Single-flight read-through: one fetch per key at a time, its value served for its window."""

    def __init__(
        self,
        enabled: bool = True,
        capacity: int = CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self.capacity = capacity
        self._clock = clock
        self._entries: dict[CacheKey, tuple[Value, float]] = {}
        self._fetching: dict[CacheKey, threading.Lock] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_load(
        self, key: CacheKey, validity_seconds: float, load: Callable[[], Value]
    ) -> Value:
        """The cached value for `key`, or `load()`'s, served for `serve_window(validity_seconds)`.
        What `load` raises passes through and nothing is cached."""
        if not self.enabled:
            return load()
        with self._lock:
            cached = self._fresh(key)
            if cached is not None:
                self.hits += 1
                return cached
            self.misses += 1
            fetching = self._fetching.setdefault(key, threading.Lock())
        with fetching:
            with self._lock:  # fetched by another caller while this one waited
                cached = self._fresh(key)
                if cached is not None:
                    return cached
            value = load()
            served_until = self._clock() + serve_window(validity_seconds)
            with self._lock:
                self._entries[key] = (value, served_until)
                self._fetching.pop(key, None)
                self._bound()
            return value

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _fresh(self, key: CacheKey) -> Value | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() >= entry[1]:
            del self._entries[key]
            return None
        return entry[0]

    def _bound(self) -> None:
        now = self._clock()
        for key in [key for key, (_, until) in self._entries.items() if until <= now]:
            del self._entries[key]
        while len(self._entries) > self.capacity:
            del self._entries[min(self._entries, key=lambda k: self._entries[k][1])]
