"""How many storage probes ("Test connection") one user may run: at most PROBES_AT_ONCE at a
time and LAKEPORT_STORAGE_PROBES_PER_MINUTE a minute.

A probe holds a web request's thread until its storage answers or its deadline passes
(`app/storage_probe.py`); without a limit, one user pointing probes at a slow server would hold
every thread of the portal. Both counts are rows every web process shares: a running probe holds
a lease (`app/leases.py`, `storage-probe:<user>:<slot>`), which expires on its own shortly after
the probe's deadline if its process dies mid-probe, and each probe started counts in the user's
minute window (`api_rate_windows`, key `probe:<user>`, as the API's rate limits count calls).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from flask import current_app
from sqlalchemy import delete
from sqlalchemy.dialects import postgresql, sqlite

from app import leases
from app.db import writing_session
from app.errors import UserFacingError
from app.models import ApiRateWindow
from app.storage_probe import PROBE_DEADLINE_SECONDS

PROBES_AT_ONCE = 2
WINDOW_SECONDS = 60
# A slot outlives the probe's deadline by this much before another probe may take it over.
_LEASE_SECONDS = PROBE_DEADLINE_SECONDS + 20


class ProbesLimited(UserFacingError):
    """Too many probes of one user: `retry_after` seconds until one may start."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@contextmanager
def probe_slot(user_id: int | None) -> Iterator[None]:
    """Hold one of the user's probe slots while the block runs; ProbesLimited when none is free
    or the user started their minute's probes already. No user (a probe the portal runs for
    itself): no limit."""
    if user_id is None:
        yield
        return
    holder = f"probe-{uuid.uuid4().hex}"
    names = [f"storage-probe:{user_id}:{slot}" for slot in range(PROBES_AT_ONCE)]
    held = next((name for name in names if leases.claim(name, holder, _LEASE_SECONDS)), None)
    if held is None:
        raise ProbesLimited(
            f"At most {PROBES_AT_ONCE} connection tests run at once for you: wait for one to end.",
            retry_after=int(PROBE_DEADLINE_SECONDS),
        )
    try:
        _count_this_minute(user_id)
        yield
    finally:
        leases.release([held], holder)


def _count_this_minute(user_id: int) -> None:
    limit = current_app.config["STORAGE_PROBES_PER_MINUTE"]
    now = time.time()
    window = int(now // WINDOW_SECONDS) * WINDOW_SECONDS
    key = f"probe:{user_id}"
    with writing_session() as db:
        insert = postgresql.insert if db.get_bind().dialect.name == "postgresql" else sqlite.insert
        db.exec(
            insert(ApiRateWindow)
            .values(key=key, window_start=window, calls=1)
            .on_conflict_do_update(
                index_elements=["key", "window_start"], set_={"calls": ApiRateWindow.calls + 1}
            )
        )
        calls = db.get(ApiRateWindow, (key, window), populate_existing=True).calls
        if calls == 1:  # the first probe of a window: the windows before it are done with
            db.exec(
                delete(ApiRateWindow).where(
                    ApiRateWindow.key == key, ApiRateWindow.window_start < window
                )
            )
    if calls > limit:
        retry_after = max(1, int(window + WINDOW_SECONDS - now) + 1)
        raise ProbesLimited(
            f"At most {limit} connection tests a minute: try again in {retry_after} s.",
            retry_after=retry_after,
        )
