"""Commits no reader sees half of: the multi-table commit (`POST .../transactions/commit`) as
Lakekeeper v0.13.3 makes it, over SeaweedFS's Iceberg catalog.

Lakekeeper (`commit_transaction` → `commit_tables_inner` → `try_commit_tables`,
crates/lakekeeper/src/server/tables.rs) loads every named table's metadata, checks each table's
requirements against it (a failed one: 409 `CommitFailedException`, nothing changes), writes the
new metadata files, then swaps every table's metadata pointer in one Postgres transaction: a
reader loading the tables sees all of them before the commit or all of them after it.

SeaweedFS's catalog answers the same route and, when a requirement fails, changes none of the
tables (`tests/test_devcatalog_behaviour.py`), but it updates each table's pointer on its own, so
a reader could load one table new and another old. Here every commit holds its tables
(`TableHolds`): a commit, of one table (`updateTable`) or of several, holds each table it names
exclusively until SeaweedFS has answered, and a load (`loadTable`, its HEAD and its credentials)
waits for the commits holding its table. A reader that loads one table after another therefore
never sees a table new and a later-loaded one old. Holds live in the dev catalog's one process
(gunicorn runs one worker, devstack/devcatalog/__init__.py).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

# A table here: (warehouse id, namespace as the REST path spells it, parts joined by 0x1F; name).
TableKey = tuple[uuid.UUID, str, str]
NAMESPACE_SEPARATOR = "\x1f"


class _Hold:
    """A readers-writer hold on one table: loads share it, a commit takes it alone."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.readers = 0
        self.writer = False
        self.users = 0  # how many threads wait for it or hold it (it is forgotten at zero)


class TableHolds:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holds: dict[TableKey, _Hold] = {}

    def _take(self, key: TableKey) -> _Hold:
        with self._lock:
            hold = self._holds.setdefault(key, _Hold())
            hold.users += 1
            return hold

    def _give_back(self, key: TableKey, hold: _Hold) -> None:
        with self._lock:
            hold.users -= 1
            if hold.users == 0:
                self._holds.pop(key, None)

    @contextmanager
    def loading(self, key: TableKey) -> Iterator[None]:
        """Around a load of the table: waits while a commit holds it."""
        hold = self._take(key)
        try:
            with hold.condition:
                hold.condition.wait_for(lambda: not hold.writer)
                hold.readers += 1
            try:
                yield
            finally:
                with hold.condition:
                    hold.readers -= 1
                    hold.condition.notify_all()
        finally:
            self._give_back(key, hold)

    @contextmanager
    def committing(self, keys: Iterable[TableKey]) -> Iterator[None]:
        """Around a commit of these tables: holds each alone, taken in one order (no deadlock
        between two commits naming the same tables)."""
        ordered = sorted(set(keys), key=lambda key: (str(key[0]), key[1], key[2]))
        taken: list[tuple[TableKey, _Hold]] = []
        try:
            for key in ordered:
                hold = self._take(key)
                taken.append((key, hold))
                with hold.condition:
                    hold.condition.wait_for(lambda hold=hold: not hold.writer and not hold.readers)
                    hold.writer = True
            yield
        finally:
            for key, hold in reversed(taken):
                with hold.condition:
                    if hold.writer:
                        hold.writer = False
                        hold.condition.notify_all()
                self._give_back(key, hold)


def transaction_tables(warehouse_id: uuid.UUID, body: object) -> list[TableKey]:
    """The tables a `CommitTransactionRequest` names (`table-changes[].identifier`)."""
    changes = body.get("table-changes") if isinstance(body, dict) else None
    keys = []
    for change in changes if isinstance(changes, list) else []:
        identifier = change.get("identifier") if isinstance(change, dict) else None
        if not isinstance(identifier, dict):
            continue
        namespace = identifier.get("namespace")
        if isinstance(namespace, list) and isinstance(identifier.get("name"), str):
            keys.append(
                (
                    warehouse_id,
                    NAMESPACE_SEPARATOR.join(str(part) for part in namespace),
                    identifier["name"],
                )
            )
    return keys
