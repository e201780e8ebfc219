"""What operators see: metadata of every user's units, executions and warehouses, and each
user's compute and storage. Never a table's rows: nothing here reads a warehouse."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlmodel import select

from app.db import get_db
from app.models import ComputeUnit, Execution, UnitState, User, Warehouse
from app.usage.queries import Totals, latest_samples, user_totals

RECENT_EXECUTIONS = 100
USAGE_DAYS = 30


@dataclass
class UserUsage:
    user: User
    totals: Totals
    live_units: int
    storage_bytes: int


def live_units() -> list[tuple[ComputeUnit, User | None]]:
    """Every live unit with its owner (None: a unit waiting in the warm pool)."""
    return list(
        get_db().exec(
            select(ComputeUnit, User)
            .outerjoin(User, User.id == ComputeUnit.owner_id)
            .where(ComputeUnit.state.in_(UnitState.LIVE))
            .order_by(ComputeUnit.created_at.desc())
        )
    )


def recent_executions() -> list[tuple[Execution, User]]:
    return list(
        get_db().exec(
            select(Execution, User)
            .join(User, User.id == Execution.owner_id)
            .order_by(Execution.id.desc())
            .limit(RECENT_EXECUTIONS)
        )
    )


def warehouses() -> list[tuple[Warehouse, User]]:
    return list(
        get_db().exec(
            select(Warehouse, User)
            .join(User, User.id == Warehouse.owner_id)
            .order_by(User.id, Warehouse.name)
        )
    )


def usage_by_user() -> list[UserUsage]:
    """Each user's compute (executions ended in the last USAGE_DAYS days) and live storage (the
    worker's latest samples of their warehouses), the heaviest first."""
    users = list(get_db().exec(select(User).order_by(User.id)))
    owned = warehouses()
    samples = latest_samples([warehouse.id for warehouse, _ in owned])
    stored = Counter()
    for warehouse, owner in owned:
        stored[owner.id] += sum(sample.bytes for sample in samples.get(warehouse.id, []))
    # The warm pool's units are no one's.
    live = Counter(owner.id for _unit, owner in live_units() if owner is not None)
    usage = [
        UserUsage(user, user_totals(user, USAGE_DAYS), live[user.id], stored[user.id])
        for user in users
    ]
    return sorted(
        usage, key=lambda row: (-row.totals.compute.cpu_seconds, -row.storage_bytes, row.user.id)
    )
