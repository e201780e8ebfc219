"""Compute units, what pages read: a user's units, a unit's events, its live executions, and
what the worker's last check found of its cluster (pages never ask a cluster themselves)."""

from __future__ import annotations

from sqlmodel import select

from app.db import get_db
from app.models import ComputeUnit, ComputeUnitEvent, Execution, ExecutionState, UnitState, User
from app.ray_clusters.base import ClusterStatus


def user_compute_units(owner: User) -> list[ComputeUnit]:
    """The owner's units for the list: all but the ended ones they cleared."""
    statement = (
        select(ComputeUnit)
        .where(ComputeUnit.owner_id == owner.id, ComputeUnit.cleared_at.is_(None))
        .order_by(ComputeUnit.created_at.desc())
    )
    return list(get_db().exec(statement))


def recent_events(cu: ComputeUnit, limit: int = 20) -> list[ComputeUnitEvent]:
    statement = (
        select(ComputeUnitEvent)
        .where(ComputeUnitEvent.compute_unit_id == cu.id)
        .order_by(ComputeUnitEvent.at.desc(), ComputeUnitEvent.id.desc())
        .limit(limit)
    )
    return list(get_db().exec(statement))


def running_executions(cu: ComputeUnit) -> list[Execution]:
    statement = (
        select(Execution)
        .where(Execution.compute_unit_id == cu.id, Execution.state.not_in(ExecutionState.FINAL))
        .order_by(Execution.created_at)
    )
    return list(get_db().exec(statement))


def recorded_status(cu: ComputeUnit) -> ClusterStatus | None:
    """What the worker's last check found of a RUNNING unit's cluster, for its pages."""
    if cu.state != UnitState.RUNNING or not cu.cluster_status:
        return None
    try:
        return ClusterStatus.from_json(cu.cluster_status)
    except (ValueError, TypeError, KeyError):
        return None
