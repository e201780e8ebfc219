"""Compute units, the request side: a unit's rules and its recorded intent.

A new unit is recorded PENDING (`create`, within the owner's limit, or claimed from the warm pool:
app/compute_units/pool.py), a terminate makes it TERMINATING (`terminate`), ended units are cleared
from the list (`clear`). The worker (app/compute_units/work.py) does the work those states ask for
and records each step through the same changes here.

Every state change is compare-and-set (`transition`): an UPDATE that names the states it may
leave, so two processes racing (two supervisors stopping one idle unit, a failure noticed while a
terminate finishes) change the row once, and a final state is never overwritten:
PENDING → STARTING → RUNNING → TERMINATING → TERMINATED, or FAILED.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, func, select

from app.audit import service as audit
from app.compute_units import pool
from app.db import engine, get_db
from app.errors import UserFacingError
from app.models import ComputeUnit, ComputeUnitEvent, UnitState, User, utcnow
from app.ray_clusters.listed import listed_cluster
from app.transitions import compare_and_set
from app.untrusted import fit_column

logger = logging.getLogger(__name__)

# Set on a FAILED unit whose cluster's remains the worker still has to stop.
CLEANING_UP = "cleaning up"
# A unit started for one job (a schedule's due time, a table's maintenance) that is not RUNNING
# after this long is given up: the job does not run and the unit is stopped.
START_PATIENCE = timedelta(minutes=20)


class ComputeUnitError(UserFacingError):
    """A compute-unit action was refused (a limit, a listed cluster, a state)."""


def record_event(db: Session, cu: ComputeUnit, message: str) -> None:
    message = fit_column(
        message, ComputeUnitEvent.__table__.c.message, f"compute unit {cu.id} event"
    )
    db.add(ComputeUnitEvent(compute_unit_id=cu.id, message=message))


def create(owner: User, values: dict) -> ComputeUnit:
    """Record a PENDING compute unit within the user's limits (atomically: parallel requests
    cannot exceed them); the worker starts it. A unit of the warm pool's size is claimed from the
    pool instead when one is ready (app/compute_units/pool.py): the worker hands it over."""
    limit = current_app.config["CU_MAX_RUNNING_PER_USER"]
    db = get_db()
    db.commit()  # the lock below is held by a transaction of its own
    _lock_user(db, owner.id)
    if live_count(owner) >= limit:
        db.rollback()
        raise ComputeUnitError(
            f"You can have at most {limit} compute units running at once. Terminate one first."
        )
    cu = pool.claim(db, owner, values) if pool.fits(values, current_app.config) else None
    if cu is not None:
        origin = {"from_pool": True}
    else:
        try:
            cu = (
                _insert_with_port(db, owner, values)
                if values["kind"] == "existing"
                else _insert(db, owner, values)
            )
        except ComputeUnitError:
            db.rollback()  # releases the user's row
            raise
        record_event(
            db,
            cu,
            f"requested: {cu.kind}, {cu.cpus} CPU and {cu.memory_gb:g} GiB per node, "
            f"{cu.worker_nodes} worker node(s)"
            + (f", on {cu.ray_cluster}" if cu.ray_cluster else ""),
        )
        origin = {"ray_cluster": cu.ray_cluster}
    db.commit()
    audit.record(
        "unit.create",
        cu,
        name=cu.name,
        kind=cu.kind,
        cpus=cu.cpus,
        memory_gb=cu.memory_gb,
        worker_nodes=cu.worker_nodes,
        **origin,
        actor=owner,
    )
    return cu


def _insert(db: Session, owner: User, values: dict, **more) -> ComputeUnit:
    cu = ComputeUnit(owner_id=owner.id, **values, **more)
    db.add(cu)
    db.flush()
    return cu


def _insert_with_port(db: Session, owner: User, values: dict) -> ComputeUnit:
    """Insert a unit on a listed Ray cluster with a Spark host port of that cluster's range that
    no live unit holds. Two creates at once may pick the same port: the database's unique index
    refuses the second insert, which then picks again."""
    cluster = listed_cluster(current_app.config["RAY_CLUSTERS"], values["ray_cluster"])
    if cluster is None:
        raise ComputeUnitError("Choose one of the Ray clusters offered here.", "ray_cluster")
    for _ in cluster.ports():  # each failed attempt means another unit took a port meanwhile
        taken = set(
            db.exec(
                select(ComputeUnit.spark_host_port).where(
                    ComputeUnit.ray_cluster == cluster.name, ComputeUnit.state.in_(UnitState.LIVE)
                )
            )
        )
        port = next((port for port in cluster.ports() if port not in taken), None)
        if port is None:
            break
        try:
            with db.begin_nested():
                return _insert(db, owner, values, spark_host_port=port)
        except IntegrityError:
            continue  # taken meanwhile by a unit created at the same moment
    raise ComputeUnitError(
        f"All {len(cluster.ports())} Spark host ports of the Ray cluster {cluster.name} "
        "are held by running units. Try again once one has ended.",
        "ray_cluster",
    )


def started_unit_given_up(unit: ComputeUnit | None, asked_at: datetime) -> str | None:
    """Why the job that started `unit` at `asked_at` will not run on it ("ended before it ran",
    with the unit's reason, or "was not running after 20 min; it is stopped"), or None while it
    is RUNNING or may still start. The caller stops the unit and settles its job."""
    if unit is None or unit.state in UnitState.FINAL:
        return "ended before it ran" + (f": {unit.reason}" if unit and unit.reason else "")
    if unit.state != UnitState.RUNNING and utcnow() - asked_at > START_PATIENCE:
        return f"was not running after {START_PATIENCE.total_seconds() / 60:.0f} min; it is stopped"
    return None


def live_count(owner: User) -> int:
    statement = (
        select(func.count())
        .select_from(ComputeUnit)
        .where(ComputeUnit.owner_id == owner.id, ComputeUnit.state.in_(UnitState.LIVE))
    )
    return get_db().exec(statement).one()


def _lock_user(db: Session, owner_id: int) -> None:
    """Serialise this user's unit creations until the transaction ends: a no-op write to the
    user's row takes its row lock on PostgreSQL and the write lock on SQLite, so the count that
    follows cannot be overtaken by a parallel request's insert."""
    db.exec(update(User).where(User.id == owner_id).values(last_login_at=User.last_login_at))


def clear(owner: User, cu_id: int | None = None) -> int:
    """Clear the owner's ended units (or only unit `cu_id`) from the list: their rows stay, as the
    executions that ran on them refer to them. A live unit is never cleared. Returns how many."""
    statement = (
        update(ComputeUnit)
        .where(
            ComputeUnit.owner_id == owner.id,
            ComputeUnit.state.in_(UnitState.FINAL),
            ComputeUnit.cleared_at.is_(None),
        )
        .values(cleared_at=utcnow())
    )
    if cu_id is not None:
        statement = statement.where(ComputeUnit.id == cu_id)
    db = get_db()
    cleared = db.exec(statement).rowcount
    db.commit()
    if cleared:
        audit.record("unit.clear", owner_id=owner.id, unit_id=cu_id, cleared=cleared)
    return cleared


def terminate(cu: ComputeUnit, reason: str = "") -> None:
    """Ask for the unit to be stopped (the worker stops it); `cu` is refreshed to what happened."""
    if cu.state in UnitState.FINAL:
        return
    audit.record("unit.terminate", cu, before=cu.state, reason=reason)
    # A unit still starting without a cluster ends at once: its starting worker sees the state
    # change and stops what it started.
    if not end(
        cu.id,
        (UnitState.PENDING, UnitState.STARTING),
        UnitState.TERMINATED,
        reason=reason,
        event="terminated while starting",
        where=ComputeUnit.handle == "{}",
    ):
        ask_to_stop(cu.id, (UnitState.STARTING, UnitState.RUNNING), reason)
    db = get_db()
    if cu in db:
        db.refresh(cu)


def touch(cu_id: int) -> None:
    """The unit is busy: push its idle timeout back (one UPDATE: never over a state change)."""
    with Session(engine()) as db:
        db.exec(
            update(ComputeUnit).where(ComputeUnit.id == cu_id).values(last_activity_at=utcnow())
        )
        db.commit()


def load(cu_id: int) -> ComputeUnit | None:
    """The unit's row as it is now, read in a short session of its own."""
    with Session(engine(), expire_on_commit=False) as db:
        return db.get(ComputeUnit, cu_id)


def write(cu_id: int, **changes) -> ComputeUnit | None:
    """Write fields other than the state (progress, handle, an event), in a short session of its own."""
    event = changes.pop("event", None)
    with Session(engine(), expire_on_commit=False) as db:
        cu = db.get(ComputeUnit, cu_id)
        if cu is None:
            return None
        for name, value in changes.items():
            setattr(cu, name, value)
        db.add(cu)
        if event:
            record_event(db, cu, event)
        db.commit()
        return cu


def transition(
    cu_id: int, from_states: Iterable[str], event: str | None = None, where=None, **changes
) -> ComputeUnit | None:
    """Compare-and-set (app/transitions.py), recording `event` with the change. Returns the
    changed unit, or None when another change came first."""
    then = (lambda db, cu: record_event(db, cu, event)) if event else None
    return compare_and_set(ComputeUnit, cu_id, from_states, where=where, then=then, **changes)


def ask_to_stop(
    cu_id: int, from_states: Iterable[str], reason: str, where=None
) -> ComputeUnit | None:
    """TERMINATING with `reason`, compare-and-set from `from_states` (`where`: conditions more);
    the worker then stops it. None when another change came first."""
    return transition(
        cu_id,
        from_states,
        event=f"terminating{': ' + reason if reason else ''}",
        where=where,
        state=UnitState.TERMINATING,
        reason=reason,
        progress_step="stopping",
    )


def end(
    cu_id: int,
    from_states: Iterable[str],
    state: str,
    reason: str | None = None,
    event: str | None = None,
    where=None,
    progress_step: str = "",
) -> ComputeUnit | None:
    """A final state, compare-and-set from `from_states`."""
    changes = {"reason": reason} if reason is not None else {}
    return transition(
        cu_id,
        from_states,
        event=event,
        where=where,
        state=state,
        ended_at=utcnow(),
        progress_step=progress_step,
        **changes,
    )


def fail(
    cu_id: int,
    reason: str,
    from_states: Iterable[str] = (UnitState.RUNNING,),
    event: str | None = None,
) -> bool:
    """Mark the unit FAILED with `reason` if it is still in `from_states` (never over a final
    state); the worker then stops what is left of its cluster."""
    return (
        end(
            cu_id,
            from_states,
            UnitState.FAILED,
            reason=reason,
            progress_step=CLEANING_UP,
            event=event or f"failed: {reason}",
        )
        is not None
    )
