"""Warm standby units: the pool.

The worker keeps `CU_POOL_SIZE` local units of one standard size (`CU_POOL_CPUS`,
`CU_POOL_MEMORY_GB`, no worker nodes) started, with their Spark session ready and no owner
(`owner_id` is NULL, `pooled_at` set). A user's create of exactly that size claims one instead of
starting a cluster (`claim`, inside the create's transaction), so the unit is ready in seconds.

The rules that keep a pooled unit one user's alone:
- A claim is compare-and-set on `owner_id IS NULL`: two creates at once never get one unit, and
  once claimed a unit has an owner for good. It is never handed back: terminating it ends it.
- A pooled unit runs no user's code before its claim; its Spark host key is replaced at the
  claim (the worker's hand-over, `work._hand_over`), so what the host was started with
  opens nothing afterwards. The unit's sandbox, its own uid and its kernel limits are set at its
  start for the standard size, which is exactly what the claiming user asked for.
- Pooled units count against no user's limit; the operators' page and `/health` show them.

The worker refills the pool (app/compute_units/work.py `refill`, one of its work items) when it
is short, once no unit claimed in the last `REFILL_HOLD` is still to answer its first job (a query,
an execution or a table's maintenance on it ended): a pooled unit starting takes the machine's cores for seconds, and
started at the claim it ran beside the claimed unit's first job, the moment the pool is for
(bench/RESULTS.md, *The SQL console*). A pooled unit that dies is FAILED by the supervisor like
any unit, and refilled. A pool whose units keep failing to start is paused for a while
(`FAILURE_WINDOW`) and reported (`summary`), rather than start units in a loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from flask import current_app
from sqlalchemy import exists, update
from sqlmodel import Session, func, select

from app.db import engine
from app.models import ComputeUnit, ComputeUnitEvent, Execution, MaintenanceJob, Query, User, utcnow
from app.states import UnitState

logger = logging.getLogger(__name__)

# A claimed unit's progress step until the worker has handed it over (new host key, RUNNING).
HANDING_OVER = "handing over"

# Pooled units that failed to start within this window, at most FAILURE_LIMIT, pause the refill.
FAILURE_WINDOW = timedelta(minutes=10)

FAILURE_LIMIT = 3

NAME_PREFIX = "pool-"

# The refill waits at most this long after a claim for the claimed unit's first job to end.
REFILL_HOLD = timedelta(seconds=30)

# A unit still waiting in the pool: no owner yet.
_POOLED = (ComputeUnit.owner_id.is_(None), ComputeUnit.pooled_at.is_not(None))


def unit_values(config) -> dict:
    """What a pooled unit is: the values of its row."""
    return {
        "kind": "local",
        "cpus": config["CU_POOL_CPUS"],
        "memory_gb": float(config["CU_POOL_MEMORY_GB"]),
        "worker_nodes": 0,
        "ray_cluster": "",
    }


def fits(values: dict, config) -> bool:
    """A create of `values` may take a pooled unit: a pool exists and the size is exactly its."""
    if config["CU_POOL_SIZE"] <= 0:
        return False
    standard = unit_values(config)
    return all(values.get(name, standard[name]) == standard[name] for name in standard)


def claim(db: Session, owner: User, values: dict) -> ComputeUnit | None:
    """Take a ready pooled unit for `owner`, named as they asked, in the caller's transaction;
    None when none is ready. The worker then hands it over (see HANDING_OVER)."""
    now = utcnow()
    candidates = db.exec(
        select(ComputeUnit.id)
        .where(
            *_POOLED,
            ComputeUnit.state == UnitState.RUNNING,
            ComputeUnit.spark_ready_at.is_not(None),
        )
        .order_by(ComputeUnit.spark_ready_at)
        .limit(5)
    ).all()
    for cu_id in candidates:
        taken = db.exec(
            update(ComputeUnit)
            .where(
                ComputeUnit.id == cu_id,
                ComputeUnit.owner_id.is_(None),
                ComputeUnit.state == UnitState.RUNNING,
            )
            .values(
                owner_id=owner.id,
                name=values["name"],
                claimed_at=now,
                state=UnitState.STARTING,
                progress_step=HANDING_OVER,
                last_activity_at=now,
            )
        ).rowcount
        if taken:
            cu = db.get(ComputeUnit, cu_id)
            db.refresh(cu)
            db.add(ComputeUnitEvent(compute_unit_id=cu_id, message="claimed from the warm pool"))
            return cu
    return None


def _live_pool(db: Session) -> list:  # (state, spark_ready_at) of each live pooled unit
    return db.exec(
        select(ComputeUnit.state, ComputeUnit.spark_ready_at).where(
            *_POOLED, ComputeUnit.state.in_(UnitState.LIVE)
        )
    ).all()


def _recent_start_failures(db: Session) -> list[str]:
    """Reasons of pooled units that failed before anyone claimed them, in the failure window."""
    since = utcnow() - FAILURE_WINDOW
    return list(
        db.exec(
            select(ComputeUnit.reason)
            .where(
                *_POOLED,
                ComputeUnit.state == UnitState.FAILED,
                ComputeUnit.started_at.is_(None),
                ComputeUnit.ended_at >= since,
            )
            .order_by(ComputeUnit.ended_at.desc())
        )
    )


def _answered(model):
    """A job of `model` (a query, an execution, a table's maintenance) on the unit has ended. A
    job on a unit is its owner's: the owner's index finds them (queries have none on their unit)."""
    return exists().where(
        model.owner_id == ComputeUnit.owner_id,
        model.compute_unit_id == ComputeUnit.id,
        model.ended_at.is_not(None),
    )


def _claimed_and_unanswered(db: Session) -> list[int]:
    """Units claimed from the pool within REFILL_HOLD, still live, whose first job has not ended
    (a claimed unit that had to start afresh is no longer the pool's: `pooled_at` is cleared)."""
    return list(
        db.exec(
            select(ComputeUnit.id).where(
                ComputeUnit.owner_id.is_not(None),
                ComputeUnit.pooled_at.is_not(None),
                ComputeUnit.claimed_at >= utcnow() - REFILL_HOLD,
                ComputeUnit.state.in_(UnitState.LIVE),
                ~_answered(Query),
                ~_answered(Execution),
                ~_answered(MaintenanceJob),
            )
        )
    )


def shortfall() -> int:
    """How many pooled units the worker should start now: 0 while the refill is paused, or held
    for a claimed unit's first job."""
    wanted = current_app.config["CU_POOL_SIZE"]
    if wanted <= 0:
        return 0
    with Session(engine()) as db:
        if len(_recent_start_failures(db)) >= FAILURE_LIMIT:
            return 0
        missing = max(0, wanted - len(_live_pool(db)))
        if missing and _claimed_and_unanswered(db):
            return 0
        return missing


def is_pooled(cu: ComputeUnit) -> bool:
    """Still waiting in the pool (no owner)."""
    return cu.owner_id is None and cu.pooled_at is not None


@dataclass
class PoolSummary:
    size: int  # the setting
    ready: int  # claimable now
    starting: int  # PENDING, STARTING, or RUNNING with Spark not ready yet
    claimed_today: int
    paused_reason: str = ""  # set while repeated start failures pause the refill

    def to_json(self) -> dict:
        """For /health, which anyone may read: counts, and whether the refill is paused (its
        reason, a unit's failure, is for the operators' page)."""
        return {
            "size": self.size,
            "ready": self.ready,
            "starting": self.starting,
            "claimed_last_24h": self.claimed_today,
            "paused": bool(self.paused_reason),
        }


def summary() -> PoolSummary:
    """The pool as the operators' page and /health show it."""
    with Session(engine()) as db:
        rows = _live_pool(db)
        claimed = db.exec(
            select(func.count())
            .select_from(ComputeUnit)
            .where(ComputeUnit.claimed_at >= utcnow() - timedelta(days=1))
        ).one()
        failures = _recent_start_failures(db)
    ready = sum(
        1 for state, spark_ready in rows if state == UnitState.RUNNING and spark_ready is not None
    )
    paused = ""
    if len(failures) >= FAILURE_LIMIT:
        paused = (
            f"{len(failures)} pooled units failed to start in the last "
            f"{int(FAILURE_WINDOW.total_seconds() // 60)} minutes; the last: {failures[0]}"
        )
    return PoolSummary(
        size=current_app.config["CU_POOL_SIZE"],
        ready=ready,
        starting=len(rows) - ready,
        claimed_today=claimed,
        paused_reason=paused,
    )
