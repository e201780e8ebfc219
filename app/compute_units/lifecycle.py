"""The life of a compute unit: PENDING → STARTING → RUNNING → TERMINATING → TERMINATED, or FAILED.

Starting and terminating take seconds, so they run in a background thread that writes
each step to the row; pages poll the row. Liveness is checked against the cluster
itself (`refresh`) on every status poll, at portal start (`adopt_all`) and by the
supervisor thread, so a dead cluster always shows as FAILED with its reason.
"""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone

from flask import Flask, current_app
from sqlmodel import Session, func, select

from app.db import engine, get_db
from app.models import (
    ComputeUnit,
    ComputeUnitEvent,
    ComputeUnitState,
    Execution,
    ExecutionState,
    User,
    utcnow,
)
from app.compute_units import spark_warmup
from app.compute_units.backends import backend_for
from app.ray_clusters.base import ClusterHandle, ClusterSpec, ClusterStartError, ClusterState, ClusterStatus

State = ComputeUnitState


class ComputeUnitError(Exception):
    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message, self.field = message, field


def _as_utc(moment: datetime) -> datetime:
    # SQLite hands datetimes back without their zone; they are stored in UTC.
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def record_event(db: Session, cu: ComputeUnit, message: str) -> None:
    db.add(ComputeUnitEvent(compute_unit_id=cu.id, message=message[:1000]))


def recent_events(cu: ComputeUnit, limit: int = 20) -> list[ComputeUnitEvent]:
    statement = (select(ComputeUnitEvent).where(ComputeUnitEvent.compute_unit_id == cu.id)
                 .order_by(ComputeUnitEvent.at.desc(), ComputeUnitEvent.id.desc()).limit(limit))
    return list(get_db().exec(statement))


def running_executions(cu: ComputeUnit) -> list[Execution]:
    statement = (select(Execution).where(Execution.compute_unit_id == cu.id,
                                         Execution.state.not_in(ExecutionState.FINAL))
                 .order_by(Execution.created_at))
    return list(get_db().exec(statement))


def user_compute_units(owner: User) -> list[ComputeUnit]:
    statement = select(ComputeUnit).where(ComputeUnit.owner_id == owner.id).order_by(ComputeUnit.created_at.desc())
    return list(get_db().exec(statement))


def live_count(owner: User) -> int:
    statement = select(func.count()).select_from(ComputeUnit).where(
        ComputeUnit.owner_id == owner.id, ComputeUnit.state.in_(State.LIVE))
    return get_db().exec(statement).one()


def _spec(cu: ComputeUnit) -> ClusterSpec:
    return ClusterSpec(
        cu_id=str(cu.id), name=cu.name, cpus_per_node=cu.cpus, memory_gb_per_node=cu.memory_gb,
        worker_nodes=cu.worker_nodes, owner=str(cu.owner_id), address=cu.address,
        include_dashboard=current_app.config["RAY_DASHBOARD"],
        start_timeout_s=current_app.config["CU_START_TIMEOUT_SECONDS"],
    )


def _backend(cu: ComputeUnit):
    return backend_for(cu.kind, current_app.config)


def handle_of(cu: ComputeUnit) -> ClusterHandle | None:
    """The cluster's handle, with its token restored from where the cluster keeps it."""
    data = json.loads(cu.handle or "{}")
    return _backend(cu).restore_token(ClusterHandle(**data)) if data else None


def create(owner: User, values: dict) -> ComputeUnit:
    """Record a PENDING compute unit within the user's limits and start it in the background."""
    limit = current_app.config["CU_MAX_RUNNING_PER_USER"]
    if live_count(owner) >= limit:
        raise ComputeUnitError(f"You can have at most {limit} compute units running at once. "
                               "Terminate one first.")
    db = get_db()
    cu = ComputeUnit(owner_id=owner.id, **values)
    db.add(cu)
    db.flush()
    record_event(db, cu, f"requested: {cu.kind}, {cu.cpus} CPU and {cu.memory_gb:g} GiB per node, "
                         f"{cu.worker_nodes} worker node(s)")
    db.commit()
    _in_background(_start, cu.id)
    return cu


def _in_background(target, cu_id: int) -> None:
    app = current_app._get_current_object()
    thread = threading.Thread(target=_with_app, args=(app, target, cu_id), name=f"cu-{cu_id}-{target.__name__}",
                              daemon=True)
    thread.start()


def _with_app(app: Flask, target, cu_id: int) -> None:
    with app.app_context():
        target(cu_id)


def _update(cu_id: int, **changes) -> ComputeUnit | None:
    """Write to a row from a background thread, in its own short session."""
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


def _start(cu_id: int) -> None:
    cu = _update(cu_id, state=State.STARTING, progress_step="preparing", event="starting")
    if cu is None:
        return

    def progress(step: str) -> None:
        _update(cu_id, progress_step=step, event=step)

    try:
        handle = _backend(cu).start(_spec(cu), progress)
    except ClusterStartError as error:
        _update(cu_id, state=State.FAILED, reason=str(error), progress_step="", ended_at=utcnow(),
                event=f"failed to start: {error}")
        return
    except Exception as error:  # a bug or an environment problem: still never a stuck STARTING
        current_app.logger.exception("compute unit %s failed to start", cu_id)
        _update(cu_id, state=State.FAILED, reason=f"could not start: {error}", progress_step="",
                ended_at=utcnow(), event="failed to start")
        return
    latest = _update(cu_id, handle=handle.to_json())
    if latest is not None and latest.state == State.STARTING:
        now = utcnow()
        running = _update(cu_id, state=State.RUNNING, progress_step="", started_at=now, last_activity_at=now,
                          event="running")
        if running is not None and current_app.config["CU_WARM_SPARK_ON_START"]:
            _warm_up_spark(running, handle)
    else:
        # Terminated while starting: stop what was started.
        _backend(cu).terminate(handle)


def _warm_up_spark(cu: ComputeUnit, handle: ClusterHandle) -> None:
    """Start the unit's Spark session now rather than at its first execution (which waits for
    this one if it comes meanwhile). A failure here is only noted: that execution tries again."""
    _update(cu.id, event="starting its Spark session")
    began = time.monotonic()
    try:
        spark_warmup.ensure_warm(cu, handle)
    except spark_warmup.SparkHostUnavailable as error:
        with Session(engine()) as db:
            still_running = (latest := db.get(ComputeUnit, cu.id)) is not None and latest.state == State.RUNNING
        if still_running:  # otherwise it was terminated or failed meanwhile, which says enough
            current_app.logger.warning("compute unit %s: %s", cu.id, error)
            _update(cu.id, event=f"its Spark session did not start; the first execution will try again: {error}")
        return
    _update(cu.id, event=f"Spark session ready after {time.monotonic() - began:.0f} s")


def terminate(cu: ComputeUnit, reason: str = "") -> None:
    if cu.state in State.FINAL:
        return
    if cu.state in (State.PENDING, State.STARTING) and not handle_of(cu):
        # The starting thread sees the state change and stops what it started.
        _update(cu.id, state=State.TERMINATED, reason=reason, ended_at=utcnow(), progress_step="",
                event="terminated while starting")
        return
    _update(cu.id, state=State.TERMINATING, reason=reason, progress_step="stopping",
            event=f"terminating{': ' + reason if reason else ''}")
    _in_background(_terminate, cu.id)


def _stop_cluster(cu_id: int) -> None:
    """Stop whatever of the unit's cluster still runs (idempotent); raises what the backend raises."""
    with Session(engine()) as db:
        cu = db.get(ComputeUnit, cu_id)
        handle = handle_of(cu) if cu else None
    if handle is not None:
        _backend(cu).terminate(handle)


def _terminate(cu_id: int) -> None:
    try:
        _stop_cluster(cu_id)
    except Exception as error:
        current_app.logger.exception("terminating compute unit %s failed", cu_id)
        _update(cu_id, state=State.FAILED, reason=f"could not be stopped cleanly: {error}", ended_at=utcnow(),
                progress_step="", event="terminate failed")
        return
    _update(cu_id, state=State.TERMINATED, ended_at=utcnow(), progress_step="", event="terminated")


def refresh(cu: ComputeUnit) -> ClusterStatus | None:
    """Check a RUNNING unit against its cluster: a dead one becomes FAILED with the reason;
    an idle one is terminated. Returns the cluster's status for display."""
    if cu.state != State.RUNNING:
        return None
    handle = handle_of(cu)
    if handle is None:
        _fail(cu, "the portal lost track of this cluster (no handle)")
        return None
    status = _backend(cu).status(handle)
    if status.state == ClusterState.FAILED:
        _fail(cu, status.reason or "the cluster stopped")
        return status
    idle_minutes = current_app.config["CU_IDLE_MINUTES"]
    if idle_minutes and utcnow() - _as_utc(cu.last_activity_at) > timedelta(minutes=idle_minutes):
        terminate(cu, reason=f"idle for {idle_minutes:g} minutes without executions")
    return status


def _fail(cu: ComputeUnit, reason: str) -> None:
    _update(cu.id, state=State.FAILED, reason=reason, ended_at=utcnow(), progress_step="",
            event=f"failed: {reason}")
    get_db().refresh(cu)
    # What survived of the cluster (other nodes, the head's helpers) is stopped: no zombies.
    _in_background(_clean_up, cu.id)


def _clean_up(cu_id: int) -> None:
    try:
        _stop_cluster(cu_id)
    except Exception:
        current_app.logger.exception("cleaning up failed compute unit %s", cu_id)


def _start_deadline_passed(cu: ComputeUnit) -> bool:
    # Another portal process (a second gunicorn worker, say) may be starting this unit right
    # now; only once its start timeout has passed is a unit without a handle really lost.
    grace = timedelta(seconds=current_app.config["CU_START_TIMEOUT_SECONDS"] + 30)
    return utcnow() - _as_utc(cu.created_at) > grace


def adopt_all() -> None:
    """At portal start: keep live clusters, mark dead or abandoned ones FAILED."""
    with Session(engine(), expire_on_commit=False) as db:
        units = list(db.exec(select(ComputeUnit).where(ComputeUnit.state.in_(State.LIVE))))
    for cu in units:
        handle = handle_of(cu)
        if handle is None:
            if _start_deadline_passed(cu):
                _update(cu.id, state=State.FAILED, reason="the portal restarted while this unit was starting",
                        ended_at=utcnow(), progress_step="", event="failed: portal restarted while starting")
            continue
        try:
            status = _backend(cu).adopt(handle)
        except Exception as error:
            status = ClusterStatus(ClusterState.FAILED, reason=f"could not be checked: {error}")
        if status.state == ClusterState.FAILED:
            _update(cu.id, state=State.FAILED, reason=status.reason or "the cluster was gone after a portal restart",
                    ended_at=utcnow(), progress_step="", event=f"failed: {status.reason}")
        elif cu.state == State.TERMINATING:
            _in_background(_terminate, cu.id)
        elif cu.state != State.RUNNING:
            _update(cu.id, state=State.RUNNING, progress_step="", event="adopted after portal restart")
        else:
            _update(cu.id, event="adopted after portal restart")


def terminate_all_local(reason: str) -> int:
    """Stop every live local compute unit now, in this thread (the local stack's shutdown)."""
    with Session(engine(), expire_on_commit=False) as db:
        units = list(db.exec(select(ComputeUnit).where(ComputeUnit.kind == "local",
                                                       ComputeUnit.state.in_(State.LIVE))))
    for cu in units:
        _update(cu.id, state=State.TERMINATING, reason=reason, event=f"terminating: {reason}")
        _terminate(cu.id)
    return len(units)


def check_all_running() -> None:
    """One supervisor pass: every RUNNING unit is checked for death and idleness, and a unit
    whose start was abandoned (its portal process died) is marked FAILED."""
    with Session(engine(), expire_on_commit=False) as db:
        ids = list(db.exec(select(ComputeUnit.id).where(ComputeUnit.state == State.RUNNING)))
        stuck = list(db.exec(select(ComputeUnit).where(ComputeUnit.state.in_((State.PENDING, State.STARTING)))))
    timeout = current_app.config["CU_START_TIMEOUT_SECONDS"]
    for cu in stuck:
        if not cu.handle or cu.handle == "{}":
            if _start_deadline_passed(cu):
                _update(cu.id, state=State.FAILED, reason=f"did not become healthy within {timeout:g} s",
                        ended_at=utcnow(), progress_step="", event="failed: start abandoned")
    for cu_id in ids:
        cu = get_db().get(ComputeUnit, cu_id)
        if cu is not None:
            refresh(cu)


def start_supervisor(app: Flask, interval_s: float = 30.0) -> threading.Thread:
    """A daemon thread that runs `check_all_running` every `interval_s` (the serving process only)."""
    def loop() -> None:
        stop = threading.Event()
        while not stop.wait(interval_s):
            with app.app_context():
                try:
                    check_all_running()
                except Exception:
                    app.logger.exception("compute-unit supervisor pass failed")

    thread = threading.Thread(target=loop, name="cu-supervisor", daemon=True)
    thread.start()
    return thread
