"""The worker's passes over all compute units: what the units ask it to do (`pending_work`: starts,
stops, clean-ups, the warm pool's refill), the supervisor pass (`supervise`: idle units stopped,
every RUNNING one checked for death), and the local stack's shutdown (`terminate_all_local`).
What happens to one unit is app/compute_units/lifecycle.py's."""

from __future__ import annotations

from datetime import timedelta

from flask import current_app
from sqlalchemy import exists
from sqlmodel import Session, select

from app.compute_units import lifecycle, pool
from app.db import engine
from app.models import ComputeUnit, Execution, ExecutionState, UnitState, utcnow


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
        if lifecycle.ask_to_stop(
            cu_id,
            (UnitState.RUNNING,),
            reason,
            where=(ComputeUnit.last_activity_at < cutoff) & ~busy,
        )
    ]


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
        lifecycle.ask_to_stop(cu.id, UnitState.LIVE, reason)
        lifecycle.run_stop(cu.id)
    return len(units)


def supervise() -> None:
    """One supervisor pass (the worker's): idle units are asked to stop, every other RUNNING unit is
    checked for death, and a unit whose start nobody finishes is marked FAILED."""
    idle_minutes = current_app.config["CU_IDLE_MINUTES"]
    if idle_minutes:
        stop_idle(idle_minutes)
    with Session(engine(), expire_on_commit=False) as db:
        running = list(db.exec(select(ComputeUnit).where(ComputeUnit.state == UnitState.RUNNING)))
    for cu in running:
        lifecycle.check_now(cu)


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
                    & (ComputeUnit.progress_step == lifecycle.CLEANING_UP)
                )
            )
        ).all()
    jobs = {
        UnitState.PENDING: ("unit-start", lifecycle.run_start),
        UnitState.STARTING: ("unit-start", lifecycle.run_start),
        UnitState.TERMINATING: ("unit-stop", lifecycle.run_stop),
        UnitState.FAILED: ("unit-clean-up", lifecycle.run_clean_up),
    }
    work = []
    for cu_id, state in rows:
        name, run = jobs[state]
        work.append((f"{name}:{cu_id}", run, cu_id))
    return work + pool.pending_work()
