"""Leases: which worker process does a piece of background work, coordinated through the database.

A lease is one row of `work_leases`, named after the work (`execution:42`, `unit-start:7`,
`supervisor`). Claiming is compare-and-set: an UPDATE that only matches a lease that expired
(or is the claimer's own), else an INSERT that only one claimer can win (the primary key). The
holder renews its leases while the work runs; a worker that dies stops renewing, and after
`expires_at` another worker's claim succeeds and it takes the work over. The same statements
work on PostgreSQL and SQLite.

Times are the workers' clocks (UTC): workers on several hosts need synchronised clocks, within
a small part of the lease's length.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from app.db import engine
from app.models import WorkLease, utcnow

# The work this thread does for the worker, with its `lost` event (set when another worker took
# the lease over): work that runs long asks `still_held` between its steps.
_current = threading.local()


def hold_in_this_thread(work) -> None:
    """Record `work` (anything with a `lost` threading.Event) as what this thread does."""
    _current.work = work


def still_held() -> bool:
    """False once another worker took over the work this thread does (its lease was lost)."""
    work = getattr(_current, "work", None)
    return work is None or not work.lost.is_set()


def claim(name: str, holder: str, seconds: float) -> bool:
    """Take the lease `name` for `seconds` if it is free, expired or already `holder`'s."""
    now = utcnow()
    expires = now + timedelta(seconds=seconds)
    with engine().begin() as connection:
        taken = connection.execute(
            update(WorkLease)
            .where(
                WorkLease.name == name, (WorkLease.expires_at < now) | (WorkLease.holder == holder)
            )
            .values(holder=holder, expires_at=expires)
        )
        if taken.rowcount == 1:
            return True
    try:
        with engine().begin() as connection:
            connection.execute(
                insert(WorkLease).values(name=name, holder=holder, expires_at=expires)
            )
    except IntegrityError:  # someone holds it (or won the race to insert it)
        return False
    return True


def renew(names: list[str], holder: str, seconds: float) -> set[str]:
    """Extend `holder`'s leases; returns the names it no longer holds (taken over after expiry)."""
    if not names:
        return set()
    expires = utcnow() + timedelta(seconds=seconds)
    with engine().begin() as connection:
        connection.execute(
            update(WorkLease)
            .where(WorkLease.name.in_(names), WorkLease.holder == holder)
            .values(expires_at=expires)
        )
        held = set(
            connection.execute(
                select(WorkLease.name).where(WorkLease.name.in_(names), WorkLease.holder == holder)
            ).scalars()
        )
    return set(names) - held


def release(names: list[str], holder: str) -> None:
    if names:
        with engine().begin() as connection:
            connection.execute(
                delete(WorkLease).where(WorkLease.name.in_(names), WorkLease.holder == holder)
            )


def holder_of(name: str) -> str | None:
    """Who holds `name` right now (an expired lease counts as nobody's)."""
    with engine().connect() as connection:
        row = connection.execute(
            select(WorkLease.holder, WorkLease.expires_at).where(WorkLease.name == name)
        ).first()
    return row.holder if row is not None and row.expires_at >= utcnow() else None
