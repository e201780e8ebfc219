"""The worker's supervisor pass over all compute units (`supervise`, every
WORKER_SUPERVISOR_SECONDS): idle units are asked to stop (`stop_idle`), every RUNNING one is
checked against its cluster (`refresh`), so a dead cluster always shows as FAILED with its reason
and a live one's status is recorded for its pages."""

from __future__ import annotations

import logging
from datetime import timedelta

from flask import current_app
from sqlalchemy import exists
from sqlmodel import Session, select

from app import leases
from app.compute_units import handles, service
from app.db import DATABASE_UNAVAILABLE, engine
from app.models import ComputeUnit, Execution, ExecutionState, UnitState, utcnow
from app.ray_clusters.base import ClusterHandle, ClusterStatus
from app.spark_host import client as spark_host_client
from app.transitions import set_fields

logger = logging.getLogger(__name__)


def supervise() -> None:
    """One supervisor pass (the worker's): idle units are asked to stop, every other RUNNING unit is
    checked for death, and a unit whose start nobody finishes is marked FAILED."""
    idle_minutes = current_app.config["CU_IDLE_MINUTES"]
    if idle_minutes:
        stop_idle(idle_minutes)
    with Session(engine(), expire_on_commit=False) as db:
        running = list(db.exec(select(ComputeUnit).where(ComputeUnit.state == UnitState.RUNNING)))
    for cu in running:
        if not leases.still_held():
            return  # the worker stops, or another took the pass over
        check_now(cu)


def stop_idle(idle_minutes: float) -> list[int]:
    """Ask every RUNNING unit without an execution for `idle_minutes` to stop (compare-and-set:
    two supervisors stop a unit once). A unit with a live execution is never idle, even when
    the execution could not report activity (the database was away). Returns their ids."""
    cutoff = utcnow() - timedelta(minutes=idle_minutes)
    reason = f"idle for {idle_minutes:g} minutes without executions"
    busy = exists().where(
        Execution.compute_unit_id == ComputeUnit.id, Execution.state.not_in(ExecutionState.FINAL)
    )
    with Session(engine()) as db:  # a pooled unit waits idle by design
        candidates = list(
            db.exec(
                select(ComputeUnit.id).where(
                    ComputeUnit.state == UnitState.RUNNING,
                    ComputeUnit.last_activity_at < cutoff,
                    ~busy,
                    ComputeUnit.owner_id.is_not(None),
                )
            )
        )
    return [
        cu_id
        for cu_id in candidates
        if service.ask_to_stop(
            cu_id,
            (UnitState.RUNNING,),
            reason,
            where=(ComputeUnit.last_activity_at < cutoff) & ~busy,
        )
    ]


def check_now(cu: ComputeUnit) -> None:
    """`refresh`, for the worker's passes: a failing check is logged, not raised."""
    try:
        refresh(cu)
    except DATABASE_UNAVAILABLE:
        raise
    except Exception:
        logger.exception("checking compute unit %s failed", cu.id)


def refresh(cu: ComputeUnit) -> ClusterStatus | None:
    """The worker's check of a RUNNING unit against its cluster: a dead one becomes FAILED with
    the reason (the worker stops its remains); a live one's status is recorded for its pages,
    which never ask the cluster themselves. Returns the cluster's status."""
    if cu.state != UnitState.RUNNING:
        return None
    handle = handles.handle_of(cu)
    if handle is None:
        _fail_and_reload(cu, "Lakeport lost track of this cluster (no handle)")
        return None
    status = checked_status(cu, handle)
    if status.state == UnitState.FAILED:
        _fail_and_reload(cu, status.reason or "the cluster stopped")
    else:
        set_fields(ComputeUnit, cu.id, cluster_status=status.to_json(), cluster_checked_at=utcnow())
    return status


def checked_status(cu: ComputeUnit, handle: ClusterHandle) -> ClusterStatus:
    """The cluster's status, with what is in use as its Spark host reports it where that is the host's to say."""
    status = handles.backend_of(cu).status(handle)
    if status.state == UnitState.RUNNING and status.use_from_spark_host:
        status = spark_host_client.reported_use(handle, status)
    return status


def _fail_and_reload(cu: ComputeUnit, reason: str) -> None:
    service.fail(cu.id, reason)
    latest = service.load(cu.id)
    for name in ("state", "reason", "ended_at", "progress_step"):
        setattr(cu, name, getattr(latest, name))
