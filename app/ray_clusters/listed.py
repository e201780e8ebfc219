"""The Ray clusters the operator lists for `existing` compute units (`LAKEPORT_RAY_CLUSTERS`).

Users never type an address: they pick one of these by name, so the portal only ever sends
a cluster's Ray token to the address the operator gave with it. Each entry:

    {"name": "shared", "address": "http://ray-head:8265",
     "token": "…" | "token_file": "/run/secrets/ray-shared",     (at most one; neither: no token auth)
     "spark_host_ports": "8290-8299",
     "users": ["alice@example.org"]}                              (optional: everyone when absent)

`spark_host_ports` is the range the operator opened on the head node for the portal to reach
the Spark hosts of units on that cluster: one port per live unit, so it also caps how many
units the cluster takes at once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_PORTS_RE = re.compile(r"^(\d{1,5})(?:-(\d{1,5}))?$")
_KEYS = {"name", "address", "token", "token_file", "spark_host_ports", "users"}


@dataclass(frozen=True)
class ListedCluster:
    name: str
    address: str
    spark_host_ports: tuple[int, int]  # first and last, inclusive
    token: str | None = None
    token_file: str | None = None
    users: frozenset[str] | None = None  # lower-cased emails; None: every user

    def allows(self, email: str) -> bool:
        return self.users is None or email.lower() in self.users

    def ports(self) -> range:
        return range(self.spark_host_ports[0], self.spark_host_ports[1] + 1)

    def read_token(self) -> str | None:
        """The cluster's Ray token; a token file is read at each use, so it can be rotated."""
        if self.token_file:
            return Path(self.token_file).read_text().strip() or None
        return self.token


@lru_cache(maxsize=8)
def parse_listed_clusters(text: str) -> tuple[ListedCluster, ...]:
    """The listing from its JSON; ValueError names the entry and the field that is wrong."""
    if not text.strip():
        return ()
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON: {error}") from None
    if not isinstance(entries, list):
        raise ValueError("must be a JSON list of clusters")
    clusters = [_cluster(index, entry) for index, entry in enumerate(entries)]
    names = [cluster.name for cluster in clusters]
    if duplicates := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(
            f"cluster names must be unique: {', '.join(duplicates)} listed more than once"
        )
    return tuple(clusters)


def _cluster(index: int, entry) -> ListedCluster:
    where = f"cluster {index}" + (
        f" ({entry.get('name')!r})" if isinstance(entry, dict) and entry.get("name") else ""
    )
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: must be a JSON object")
    if unknown := sorted(set(entry) - _KEYS):
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}"
        )
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValueError(f"{where}: `name` must be 1-63 lowercase letters, digits and hyphens")
    address = entry.get("address")
    parts = urlsplit(address) if isinstance(address, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{where}: `address` must be the dashboard (Jobs API) URL, e.g. http://ray-head:8265"
        )
    token, token_file = entry.get("token"), entry.get("token_file")
    if token is not None and token_file is not None:
        raise ValueError(f"{where}: give `token` or `token_file`, not both")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ValueError(f"{where}: `token` must be a non-empty string")
    if token_file is not None:
        if not isinstance(token_file, str) or not Path(token_file).is_file():
            raise ValueError(f"{where}: `token_file` {token_file!r} is not a readable file")
        try:
            if not Path(token_file).read_text().strip():
                raise ValueError(f"{where}: `token_file` {token_file!r} is empty")
        except OSError as error:
            raise ValueError(
                f"{where}: `token_file` {token_file!r} cannot be read: {error.strerror}"
            ) from None
    ports = entry.get("spark_host_ports")
    match = _PORTS_RE.match(ports.strip()) if isinstance(ports, str) else None
    first, last = (int(match[1]), int(match[2] or match[1])) if match else (0, 0)
    if not match or not 1024 <= first <= last <= 65535:
        raise ValueError(
            f"{where}: `spark_host_ports` must be a port or range between 1024 and 65535, "
            'e.g. "8290-8299"'
        )
    users = entry.get("users")
    if users is not None and (
        not isinstance(users, list) or not all(isinstance(u, str) and "@" in u for u in users)
    ):
        raise ValueError(f"{where}: `users` must be a list of email addresses")
    return ListedCluster(
        name=name,
        address=address.rstrip("/"),
        spark_host_ports=(first, last),
        token=token.strip() if token else None,
        token_file=token_file,
        users=frozenset(u.strip().lower() for u in users) if users is not None else None,
    )


def listed_cluster(text: str, name: str) -> ListedCluster | None:
    return next((cluster for cluster in parse_listed_clusters(text) if cluster.name == name), None)


def clusters_for(text: str, email: str) -> list[ListedCluster]:
    """The clusters this user may attach units to."""
    return [cluster for cluster in parse_listed_clusters(text) if cluster.allows(email)]
