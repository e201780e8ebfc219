"""Compute units, the worker's side: what the units ask the worker to do (`pending_work`) and
doing it, under the lease of each piece of work.

A PENDING unit is started (`run_start`: its cluster, then its Spark session; a unit claimed from
the warm pool is handed over instead), a TERMINATING one stopped (`run_stop`), what a FAILED one
left is stopped (`run_clean_up`), and the warm pool refilled (`refill`). Each step is written to
the row (app/compute_units/service.py) and pages poll the row. `terminate_all_local` is the local
stack's shutdown. The units' work and the supervisor pass (app/compute_units/supervision.py) join
the worker's registry (app/work_registry.py) here.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from flask import current_app
from sqlmodel import Session, select

from app import work_registry
from app.compute_units import handles, pool, service, supervision
from app.compute_units.phase import SPARK_FAILED_EVENT, SPARK_READY_EVENT, SPARK_WARMING_EVENT
from app.db import DATABASE_UNAVAILABLE, engine
from app.models import ComputeUnit, ComputeUnitEvent, UnitState, utcnow
from app.ray_clusters.base import (
    ClusterHandle,
    ClusterSpec,
    ClusterStartError,
    ClusterStatus,
    SparkHostLaunch,
)
from app.spark_host import client as spark_host_client
from app.spark_host import warmup
from app.spark_host.client import new_spark_host_nonce, spark_host_secret, with_spark_host_secret
from compute.contract import secret_digest

logger = logging.getLogger(__name__)


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


def run_start(cu_id: int) -> None:
    """The worker's part of a PENDING unit: start its cluster, then its Spark session. A STARTING
    unit found here was being started by a worker that stopped (its lease ran out)."""
    cu = service.load(cu_id)
    if cu is None or cu.state not in (UnitState.PENDING, UnitState.STARTING):
        return
    if cu.state == UnitState.STARTING:
        _hand_over(cu) if cu.progress_step == pool.HANDING_OVER else _resume_start(cu)
        return
    cu = service.transition(
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
            service.write(cu_id, progress_step=step, event=step)
        except DATABASE_UNAVAILABLE:  # only the page's progress: the start goes on
            logger.warning(
                "compute unit %s: progress not recorded (database unavailable): %s", cu_id, step
            )

    try:
        handle = handles.backend_of(cu).start(_spec(cu), progress)
    except ClusterStartError as error:
        service.fail(
            cu_id, str(error), from_states=(UnitState.STARTING,), event=f"failed to start: {error}"
        )
        return
    except DATABASE_UNAVAILABLE:
        raise
    except Exception as error:  # a bug or an environment problem: still never a stuck STARTING
        logger.exception("compute unit %s failed to start", cu_id)
        service.fail(
            cu_id,
            f"could not start: {error}",
            from_states=(UnitState.STARTING,),
            event="failed to start",
        )
        return
    handle = handles.with_secrets(cu, handle)  # makes the handle's Spark host nonce
    _record_handle(cu_id, handle)
    now = utcnow()
    # Its page shows its nodes from the moment it is RUNNING, not from the next supervisor pass.
    checked = _first_check(cu, handle)
    running = service.transition(
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
        handles.backend_of(cu).terminate(handle)
        return
    if _warms_on_start(running):
        _warm_up_spark(running, handle)
        supervision.check_now(running)


def _first_check(cu: ComputeUnit, handle: ClusterHandle) -> dict:
    """A started cluster's status, as the row's recorded check ({} if it cannot be had)."""
    try:
        return {
            "cluster_status": supervision.checked_status(cu, handle).to_json(),
            "cluster_checked_at": utcnow(),
        }
    except Exception:
        logger.exception("checking compute unit %s failed", cu.id)
        return {}


def _record_handle(cu_id: int, handle: ClusterHandle, patience_s: float = 300.0) -> None:
    """The handle is how anyone finds the new cluster again: while the database is away, keep
    trying (with growing pauses) rather than leave a cluster nobody can stop."""
    deadline, pause = time.monotonic() + patience_s, 0.5
    while True:
        try:
            service.write(cu_id, handle=handle.to_json())
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
    handle = handles.handle_of(cu)
    if handle is None:
        service.fail(
            cu.id,
            "the worker starting this unit stopped before the cluster was up",
            from_states=(UnitState.STARTING,),
        )
        return
    try:
        status = handles.backend_of(cu).adopt(handle)
    except Exception as error:
        status = ClusterStatus(UnitState.FAILED, reason=f"could not be checked: {error}")
    if status.state == UnitState.FAILED:
        service.fail(
            cu.id, status.reason or "the cluster was gone", from_states=(UnitState.STARTING,)
        )
        return
    now = utcnow()
    service.transition(
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
    handle = handles.handle_of(cu)
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
    service.transition(
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
        handles.backend_of(cu).terminate(handle)
    except Exception:  # the supervisor's clean-up of ended units does not reach a live row: say so
        logger.exception(
            "compute unit %s: the pooled cluster it was claimed with did not stop", cu.id
        )
    if (
        service.transition(
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
    service.write(cu.id, event=SPARK_WARMING_EVENT)
    began = time.monotonic()
    try:
        warmup.ensure_warm(cu, handle, handles.backend_of(cu))
    except warmup.SparkHostUnavailable as error:
        still_running = (
            latest := service.load(cu.id)
        ) is not None and latest.state == UnitState.RUNNING
        if still_running and pool.is_pooled(
            cu
        ):  # a pooled unit is only any use warm: the pool replaces it
            service.fail(cu.id, f"its Spark session did not start: {error}")
        elif still_running:  # otherwise it was terminated or failed meanwhile, which says enough
            current_app.logger.warning("compute unit %s: %s", cu.id, error)
            service.write(
                cu.id, event=f"{SPARK_FAILED_EVENT}; the first execution will try again: {error}"
            )
        return
    service.write(
        cu.id,
        spark_ready_at=utcnow(),
        event=f"{SPARK_READY_EVENT} after {time.monotonic() - began:.0f} s",
    )


def run_stop(cu_id: int) -> None:
    """The worker's part of a TERMINATING unit: stop its cluster, then record TERMINATED (or FAILED
    when it could not be stopped cleanly)."""
    if (cu := service.load(cu_id)) is None or cu.state != UnitState.TERMINATING:
        return
    try:
        _stop_cluster(cu_id)
    except DATABASE_UNAVAILABLE:
        raise
    except Exception as error:
        logger.exception("terminating compute unit %s failed", cu_id)
        service.end(
            cu_id,
            (UnitState.TERMINATING,),
            UnitState.FAILED,
            reason=f"could not be stopped cleanly: {error}",
            event="terminate failed",
        )
        return
    service.end(cu_id, (UnitState.TERMINATING,), UnitState.TERMINATED, event="terminated")


def run_clean_up(cu_id: int) -> None:
    """The worker's part of a unit that FAILED: stop what survived of its cluster (other nodes, the
    head's helpers), so nothing is left running."""
    try:
        _stop_cluster(cu_id)
    except DATABASE_UNAVAILABLE:
        raise
    except Exception:
        logger.exception("cleaning up failed compute unit %s", cu_id)
    service.write(cu_id, progress_step="")


def _stop_cluster(cu_id: int) -> None:
    """Stop whatever of the unit's cluster still runs (idempotent); raises what the backend raises."""
    cu = service.load(cu_id)
    if cu is not None and (handle := handles.handle_of(cu)) is not None:
        backend = handles.backend_of(cu)
        if backend.detaches_only:
            spark_host_client.stop_host(handle)
        backend.terminate(handle)


def terminate_all_local(reason: str) -> int:
    """Stop every live local compute unit now, in this thread (the local stack's shutdown)."""
    with Session(engine(), expire_on_commit=False) as db:
        units = list(
            db.exec(
                select(ComputeUnit).where(
                    ComputeUnit.kind == "local", ComputeUnit.state.in_(UnitState.LIVE)
                )
            )
        )
    for cu in units:
        service.ask_to_stop(cu.id, UnitState.LIVE, reason)
        run_stop(cu.id)
    return len(units)


def refill(_unused: int = 0) -> None:
    """The worker's part: start pooled units (PENDING rows, started like any) up to the size."""
    missing = pool.shortfall()
    if not missing:
        return
    with Session(engine()) as db:
        for _ in range(missing):
            cu = ComputeUnit(
                owner_id=None,
                name=pool.NAME_PREFIX + "standby",
                pooled_at=utcnow(),
                **pool.unit_values(current_app.config),
            )
            db.add(cu)
            db.flush()
            cu.name = f"{pool.NAME_PREFIX}{cu.id}"
            db.add(ComputeUnitEvent(compute_unit_id=cu.id, message="requested for the warm pool"))
        db.commit()
    logger.info("warm pool: starting %d unit(s)", missing)


def pending_work() -> list[tuple[str, object, int]]:
    """What the units ask the worker to do: (lease name, function, unit id)."""
    with Session(engine()) as db:
        rows = db.exec(
            select(ComputeUnit.id, ComputeUnit.state).where(
                ComputeUnit.state.in_(
                    (UnitState.PENDING, UnitState.STARTING, UnitState.TERMINATING)
                )
                | (
                    (ComputeUnit.state == UnitState.FAILED)
                    & (ComputeUnit.progress_step == service.CLEANING_UP)
                )
            )
        ).all()
    jobs = {
        UnitState.PENDING: ("unit-start", run_start),
        UnitState.STARTING: ("unit-start", run_start),
        UnitState.TERMINATING: ("unit-stop", run_stop),
        UnitState.FAILED: ("unit-clean-up", run_clean_up),
    }
    work = []
    for cu_id, state in rows:
        name, run = jobs[state]
        work.append((f"{name}:{cu_id}", run, cu_id))
    return work + ([("unit-pool-refill", refill, 0)] if pool.shortfall() else [])


# --- The worker's registry ------------------------------------------------------------------

SUPERVISOR_LEASE = "supervisor"
work_registry.pending_source("units", work_registry.UNITS, pending_work)
# The supervisor's first pass comes one interval after the worker starts: a restarted worker has
# its work back under way first.
work_registry.periodic_pass(
    SUPERVISOR_LEASE,
    "WORKER_SUPERVISOR_SECONDS",
    supervision.supervise,
    work_registry.FirstPass.AFTER_A_PERIOD,
)
