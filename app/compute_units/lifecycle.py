"""The life of a compute unit: PENDING → STARTING → RUNNING → TERMINATING → TERMINATED, or FAILED.

Web requests only record intent in the row: a new unit is PENDING, a terminate request makes it
TERMINATING. The worker process (app/worker.py) does the work those states ask for: `run_start`,
`run_stop` and `run_clean_up` write each step to the row, and pages poll the row. Liveness is
checked against the cluster itself (`refresh`) by the worker's supervisor pass
(app/compute_units/supervision.py), so a dead cluster always shows as FAILED with its reason.
A unit claimed from the warm pool (app/compute_units/pool.py) is handed over by `run_start`.

Every state change is compare-and-set (`_transition`): an UPDATE that names the states it may
leave, so two processes racing (two supervisors stopping one idle unit, a failure noticed while a
terminate finishes) change the row once, and a final state is never overwritten.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterable

from flask import current_app
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, func, select

from app.audit import service as audit
from app.compute_units import pool
from app.compute_units.backends import backend_for
from app.compute_units.phase import SPARK_FAILED_EVENT, SPARK_READY_EVENT, SPARK_WARMING_EVENT
from app.db import DATABASE_UNAVAILABLE, engine, get_db
from app.errors import UserFacingError
from app.models import (
    ComputeUnit,
    ComputeUnitEvent,
    Execution,
    ExecutionState,
    UnitState,
    User,
    utcnow,
)
from app.ray_clusters.base import (
    ClusterHandle,
    ClusterSpec,
    ClusterStartError,
    ClusterStatus,
    SparkHostLaunch,
)
from app.ray_clusters.listed import listed_cluster
from app.ray_clusters.unit_limits import LimitUsage
from app.spark_host import client as spark_host_client
from app.spark_host import warmup
from app.spark_host.client import new_spark_host_nonce, spark_host_secret, with_spark_host_secret
from app.transitions import compare_and_set, set_fields
from app.untrusted import clean_text
from compute.contract import secret_digest

logger = logging.getLogger(__name__)
# Set on a FAILED unit whose cluster's remains the worker still has to stop.
CLEANING_UP = "cleaning up"


class ComputeUnitError(UserFacingError):
    """A compute-unit action was refused (a limit, a listed cluster, a state)."""


def fit_column(text: str, column, what: str) -> str:
    """`text` cut to fit `column` (a VARCHAR's length); the whole text goes to the log first, so a
    long reason (a start failure's log tail) is never lost, and the write never fails for its length.
    It is cleaned first: a reason can hold a unit's text (see app/untrusted.py)."""
    text = clean_text(text, 16 * 1024)
    limit = column.type.length
    if len(text) <= limit:
        return text
    logger.warning("%s, in full (cut to %d characters in the database):\n%s", what, limit, text)
    return text[: limit - 1] + "…"


def record_event(db: Session, cu: ComputeUnit, message: str) -> None:
    message = fit_column(
        message, ComputeUnitEvent.__table__.c.message, f"compute unit {cu.id} event"
    )
    db.add(ComputeUnitEvent(compute_unit_id=cu.id, message=message))


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


def user_compute_units(owner: User) -> list[ComputeUnit]:
    """The owner's units for the list: all but the ended ones they cleared."""
    statement = (
        select(ComputeUnit)
        .where(ComputeUnit.owner_id == owner.id, ComputeUnit.cleared_at.is_(None))
        .order_by(ComputeUnit.created_at.desc())
    )
    return list(get_db().exec(statement))


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


def _spec(cu: ComputeUnit) -> ClusterSpec:
    """What to start for the unit. Its Spark host is for backends that start it themselves, with the
    cluster or when asked (the nonce becomes the handle's: the secret derived from it is the one the
    portal's calls carry)."""
    config = current_app.config
    nonce = new_spark_host_nonce()
    secret = spark_host_secret(config["SECRET_KEY"], str(cu.id), nonce)
    spark_host = SparkHostLaunch(
        nonce=nonce,
        secret_sha256=secret_digest(secret),
        **warmup.spark_host_size(cu),
        warm_timeout_s=warmup.BOOTSTRAP_TIMEOUT_SECONDS,
        with_cluster=_warms_on_start(cu),
    )
    return ClusterSpec(
        cu_id=str(cu.id),
        name=cu.name,
        cpus_per_node=cu.cpus,
        memory_gb_per_node=cu.memory_gb,
        worker_nodes=cu.worker_nodes,
        owner=str(cu.owner_id or "pool"),
        cluster_name=cu.ray_cluster,
        spark_host_port=cu.spark_host_port,
        include_dashboard=config["RAY_DASHBOARD"],
        spark_host=spark_host,
        start_timeout_s=config["CU_START_TIMEOUT_SECONDS"],
    )


def _warms_on_start(cu: ComputeUnit) -> bool:
    """Its Spark session starts with it (a pooled unit's always: it waits for its user warm)."""
    return current_app.config["CU_WARM_SPARK_ON_START"] or pool.is_pooled(cu)


def _backend(cu: ComputeUnit):
    return backend_for(cu.kind, current_app.config)


def limit_usage(cu: ComputeUnit, handle: ClusterHandle) -> LimitUsage | None:
    """What the unit uses against its kernel limits now (None for kinds without them)."""
    return _backend(cu).limit_usage(handle)


def over_limit(cu: ComputeUnit, handle: ClusterHandle, before: LimitUsage | None) -> str | None:
    """Which kernel limit the unit went over since `before`, in words, or None."""
    return _backend(cu).over_limit(handle, before)


def touch(cu_id: int) -> None:
    """The unit is busy: push its idle timeout back (one UPDATE: never over a state change)."""
    with Session(engine()) as db:
        db.exec(
            update(ComputeUnit).where(ComputeUnit.id == cu_id).values(last_activity_at=utcnow())
        )
        db.commit()


def handle_of(cu: ComputeUnit) -> ClusterHandle | None:
    """The cluster's handle, with its token restored from where the cluster keeps it and the
    unit's Spark host secret derived again."""
    handle = recorded_handle(cu)
    return _with_secrets(cu, handle) if handle else None


def _with_secrets(cu: ComputeUnit, handle: ClusterHandle) -> ClusterHandle:
    return with_spark_host_secret(
        _backend(cu).restore_token(handle), current_app.config["SECRET_KEY"]
    )


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


def _load(cu_id: int) -> ComputeUnit | None:
    """The unit's row as it is now, read in a short session of its own."""
    with Session(engine(), expire_on_commit=False) as db:
        return db.get(ComputeUnit, cu_id)


def _update(cu_id: int, **changes) -> ComputeUnit | None:
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


def _transition(
    cu_id: int, from_states: Iterable[str], event: str | None = None, where=None, **changes
) -> ComputeUnit | None:
    """Compare-and-set (app/transitions.py), recording `event` with the change. Returns the
    changed unit, or None when another change came first."""
    if "reason" in changes:
        changes["reason"] = fit_column(
            changes["reason"], ComputeUnit.__table__.c.reason, f"compute unit {cu_id}'s reason"
        )
    then = (lambda db, cu: record_event(db, cu, event)) if event else None
    return compare_and_set(ComputeUnit, cu_id, from_states, where=where, then=then, **changes)


def ask_to_stop(
    cu_id: int, from_states: Iterable[str], reason: str, where=None
) -> ComputeUnit | None:
    """TERMINATING with `reason`, compare-and-set from `from_states` (`where`: conditions more);
    the worker then stops it. None when another change came first."""
    return _transition(
        cu_id,
        from_states,
        event=f"terminating{': ' + reason if reason else ''}",
        where=where,
        state=UnitState.TERMINATING,
        reason=reason,
        progress_step="stopping",
    )


def _end(
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
    return _transition(
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
        _end(
            cu_id,
            from_states,
            UnitState.FAILED,
            reason=reason,
            progress_step=CLEANING_UP,
            event=event or f"failed: {reason}",
        )
        is not None
    )


def run_start(cu_id: int) -> None:
    """The worker's part of a PENDING unit: start its cluster, then its Spark session. A STARTING
    unit found here was being started by a worker that stopped (its lease ran out)."""
    cu = _load(cu_id)
    if cu is None or cu.state not in (UnitState.PENDING, UnitState.STARTING):
        return
    if cu.state == UnitState.STARTING:
        _hand_over(cu) if cu.progress_step == pool.HANDING_OVER else _resume_start(cu)
        return
    cu = _transition(
        cu_id,
        (UnitState.PENDING,),
        event="starting",
        state=UnitState.STARTING,
        progress_step="preparing",
    )
    if cu is None:
        return  # terminated while pending

    def progress(step: str) -> None:
        try:
            _update(cu_id, progress_step=step, event=step)
        except DATABASE_UNAVAILABLE:  # only the page's progress: the start goes on
            logger.warning(
                "compute unit %s: progress not recorded (database unavailable): %s", cu_id, step
            )

    try:
        handle = _backend(cu).start(_spec(cu), progress)
    except ClusterStartError as error:
        fail(
            cu_id, str(error), from_states=(UnitState.STARTING,), event=f"failed to start: {error}"
        )
        return
    except DATABASE_UNAVAILABLE:
        raise
    except Exception as error:  # a bug or an environment problem: still never a stuck STARTING
        logger.exception("compute unit %s failed to start", cu_id)
        fail(
            cu_id,
            f"could not start: {error}",
            from_states=(UnitState.STARTING,),
            event="failed to start",
        )
        return
    handle = _with_secrets(cu, handle)  # makes the handle's Spark host nonce
    _record_handle(cu_id, handle)
    now = utcnow()
    # Its page shows its nodes from the moment it is RUNNING, not from the next supervisor pass.
    checked = _first_check(cu, handle)
    running = _transition(
        cu_id,
        (UnitState.STARTING,),
        event="running",
        state=UnitState.RUNNING,
        progress_step="",
        started_at=now,
        last_activity_at=now,
        **checked,
    )
    if running is None:
        # Terminated while starting: stop what was started.
        _backend(cu).terminate(handle)
        return
    if _warms_on_start(running):
        _warm_up_spark(running, handle)
        check_now(running)


def _checked(cu: ComputeUnit, handle: ClusterHandle) -> ClusterStatus:
    """The cluster's status, with what is in use as its Spark host reports it where that is the host's to say."""
    status = _backend(cu).status(handle)
    if status.state == UnitState.RUNNING and status.use_from_spark_host:
        status = spark_host_client.reported_use(handle, status)
    return status


def _first_check(cu: ComputeUnit, handle: ClusterHandle) -> dict:
    """A started cluster's status, as the row's recorded check ({} if it cannot be had)."""
    try:
        return {"cluster_status": _checked(cu, handle).to_json(), "cluster_checked_at": utcnow()}
    except Exception:
        logger.exception("checking compute unit %s failed", cu.id)
        return {}


def check_now(cu: ComputeUnit) -> None:
    """`refresh`, for the worker's passes: a failing check is logged, not raised."""
    try:
        refresh(cu)
    except DATABASE_UNAVAILABLE:
        raise
    except Exception:
        logger.exception("checking compute unit %s failed", cu.id)


def _record_handle(cu_id: int, handle: ClusterHandle, patience_s: float = 300.0) -> None:
    """The handle is how anyone finds the new cluster again: while the database is away, keep
    trying (with growing pauses) rather than leave a cluster nobody can stop."""
    deadline, pause = time.monotonic() + patience_s, 0.5
    while True:
        try:
            _update(cu_id, handle=handle.to_json())
            return
        except DATABASE_UNAVAILABLE:
            if time.monotonic() > deadline:
                raise
            logger.warning(
                "compute unit %s: its handle could not be recorded yet (database unavailable)",
                cu_id,
            )
            time.sleep(pause)
            pause = min(pause * 2, 15.0)


def _resume_start(cu: ComputeUnit) -> None:
    """A start another worker left unfinished: a cluster that got its handle is checked and kept if
    alive; one without a handle cannot be found again."""
    handle = handle_of(cu)
    if handle is None:
        fail(
            cu.id,
            "the worker starting this unit stopped before the cluster was up",
            from_states=(UnitState.STARTING,),
        )
        return
    try:
        status = _backend(cu).adopt(handle)
    except Exception as error:
        status = ClusterStatus(UnitState.FAILED, reason=f"could not be checked: {error}")
    if status.state == UnitState.FAILED:
        fail(cu.id, status.reason or "the cluster was gone", from_states=(UnitState.STARTING,))
        return
    now = utcnow()
    _transition(
        cu.id,
        (UnitState.STARTING,),
        event="running (its start was taken over by another worker)",
        state=UnitState.RUNNING,
        progress_step="",
        started_at=now,
        last_activity_at=now,
    )


def _hand_over(cu: ComputeUnit) -> None:
    """A unit claimed from the pool becomes its owner's: its Spark host takes a key of its own
    (from a new nonce), so what it was started with opens nothing; then it is RUNNING. If the
    host refuses (it ran something, or it is not there), the unit starts afresh instead."""
    handle = handle_of(cu)
    claimed = dataclasses.replace(handle, spark_host_claim_nonce=new_spark_host_nonce())
    claimed = with_spark_host_secret(claimed, current_app.config["SECRET_KEY"])
    try:
        with spark_host_client.SparkHostClient(
            handle, timeout=warmup.HOST_CALL_TIMEOUT_SECONDS
        ) as host:
            host.rekey(secret_digest(claimed.spark_host_secret))
    except spark_host_client.SparkHostError as error:
        _start_afresh(cu, handle, f"the unit from the warm pool could not be handed over ({error})")
        return
    _record_handle(cu.id, claimed)
    _transition(
        cu.id,
        (UnitState.STARTING,),
        event="handed over: its Spark host has a key of its own",
        state=UnitState.RUNNING,
        progress_step="",
        last_activity_at=utcnow(),
    )


def _start_afresh(cu: ComputeUnit, handle: ClusterHandle, why: str) -> None:
    """A claimed unit whose host would not take its key: what the pool started is stopped, and the
    unit starts as any new one does, for the same user; nothing of the pooled cluster is kept."""
    try:
        _backend(cu).terminate(handle)
    except Exception:  # the supervisor's clean-up of ended units does not reach a live row: say so
        logger.exception(
            "compute unit %s: the pooled cluster it was claimed with did not stop", cu.id
        )
    if (
        _transition(
            cu.id,
            (UnitState.STARTING,),
            event=f"{why}: starting a fresh one",
            state=UnitState.PENDING,
            progress_step="",
            handle="{}",
            pooled_at=None,
        )
        is not None
    ):
        run_start(cu.id)


def _warm_up_spark(cu: ComputeUnit, handle: ClusterHandle) -> None:
    """Start the unit's Spark session now rather than at its first execution (which waits for
    this one if it comes meanwhile). A failure here is only noted: that execution tries again."""
    _update(cu.id, event=SPARK_WARMING_EVENT)
    began = time.monotonic()
    try:
        warmup.ensure_warm(cu, handle, _backend(cu))
    except warmup.SparkHostUnavailable as error:
        still_running = (latest := _load(cu.id)) is not None and latest.state == UnitState.RUNNING
        if still_running and pool.is_pooled(
            cu
        ):  # a pooled unit is only any use warm: the pool replaces it
            fail(cu.id, f"its Spark session did not start: {error}")
        elif still_running:  # otherwise it was terminated or failed meanwhile, which says enough
            current_app.logger.warning("compute unit %s: %s", cu.id, error)
            _update(
                cu.id, event=f"{SPARK_FAILED_EVENT}; the first execution will try again: {error}"
            )
        return
    _update(
        cu.id,
        spark_ready_at=utcnow(),
        event=f"{SPARK_READY_EVENT} after {time.monotonic() - began:.0f} s",
    )


def terminate(cu: ComputeUnit, reason: str = "") -> None:
    """Ask for the unit to be stopped (the worker stops it); `cu` is refreshed to what happened."""
    if cu.state in UnitState.FINAL:
        return
    audit.record("unit.terminate", cu, before=cu.state, reason=reason)
    # A unit still starting without a cluster ends at once: its starting worker sees the state
    # change and stops what it started.
    if not _end(
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


def _stop_cluster(cu_id: int) -> None:
    """Stop whatever of the unit's cluster still runs (idempotent); raises what the backend raises."""
    cu = _load(cu_id)
    if cu is not None and (handle := handle_of(cu)) is not None:
        backend = _backend(cu)
        if backend.detaches_only:
            spark_host_client.stop_host(handle)
        backend.terminate(handle)


def run_stop(cu_id: int) -> None:
    """The worker's part of a TERMINATING unit: stop its cluster, then record TERMINATED (or FAILED
    when it could not be stopped cleanly)."""
    if (cu := _load(cu_id)) is None or cu.state != UnitState.TERMINATING:
        return
    try:
        _stop_cluster(cu_id)
    except DATABASE_UNAVAILABLE:
        raise
    except Exception as error:
        logger.exception("terminating compute unit %s failed", cu_id)
        _end(
            cu_id,
            (UnitState.TERMINATING,),
            UnitState.FAILED,
            reason=f"could not be stopped cleanly: {error}",
            event="terminate failed",
        )
        return
    _end(cu_id, (UnitState.TERMINATING,), UnitState.TERMINATED, event="terminated")


def run_clean_up(cu_id: int) -> None:
    """The worker's part of a unit that FAILED: stop what survived of its cluster (other nodes, the
    head's helpers), so nothing is left running."""
    try:
        _stop_cluster(cu_id)
    except DATABASE_UNAVAILABLE:
        raise
    except Exception:
        logger.exception("cleaning up failed compute unit %s", cu_id)
    _update(cu_id, progress_step="")


def refresh(cu: ComputeUnit) -> ClusterStatus | None:
    """The worker's check of a RUNNING unit against its cluster: a dead one becomes FAILED with
    the reason (the worker stops its remains); a live one's status is recorded for its pages,
    which never ask the cluster themselves. Returns the cluster's status."""
    if cu.state != UnitState.RUNNING:
        return None
    handle = handle_of(cu)
    if handle is None:
        _fail_and_reload(cu, "Lakeport lost track of this cluster (no handle)")
        return None
    status = _checked(cu, handle)
    if status.state == UnitState.FAILED:
        _fail_and_reload(cu, status.reason or "the cluster stopped")
    else:
        set_fields(ComputeUnit, cu.id, cluster_status=status.to_json(), cluster_checked_at=utcnow())
    return status


def recorded_status(cu: ComputeUnit) -> ClusterStatus | None:
    """What the worker's last check found of a RUNNING unit's cluster, for its pages."""
    if cu.state != UnitState.RUNNING or not cu.cluster_status:
        return None
    try:
        return ClusterStatus.from_json(cu.cluster_status)
    except (ValueError, TypeError, KeyError):
        return None


def recorded_handle(cu: ComputeUnit) -> ClusterHandle | None:
    """The cluster's handle as recorded, without its secrets (for pages: nothing is called)."""
    data = json.loads(cu.handle or "{}")
    return ClusterHandle(**data) if data else None


def _fail_and_reload(cu: ComputeUnit, reason: str) -> None:
    fail(cu.id, reason)
    latest = _load(cu.id)
    for name in ("state", "reason", "ended_at", "progress_step"):
        setattr(cu, name, getattr(latest, name))
