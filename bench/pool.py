"""Warm pool: create a compute unit of the pool's size through the portal → its first execution
COMPLETED, with the pool (`LAKEPORT_CU_POOL_SIZE=1`, app/compute_units/pool.py) holding a ready
unit: the create claims it, the worker hands it over (a new Spark host key), and the run goes to a
warm session. `--cold-runs` claims, each unit terminated afterwards and the pool left to refill
before the next. Baseline: the cold benchmark's median from the same run (one cold start here when
`cold` was not chosen). Target ≤ 3 s (median).
"""

from __future__ import annotations

import time

from sqlmodel import select

from app.models import ComputeUnit
from app.states import UnitState
from bench import cold, warm
from bench.harness import Bench, Summary, median, spread, verdict

NAME = "pool"
TARGET_S = 3.0
REFILL_TIMEOUT_S = 240.0


def run(bench: Bench, options) -> Summary:
    print(
        f"\n== pool: create compute unit → first execution COMPLETED, a pool of 1 ready unit, "
        f"{options.cold_runs} claims"
    )
    workflow_id = bench.create_workflow("bench-pool", warm.STEPS)
    bench.change_setting("CU_POOL_SIZE", 1)
    try:
        trials = []
        for number in range(1, options.cold_runs + 1):
            waited = wait_for_a_ready_pooled_unit(bench)
            print(f"  pool ready (waited {waited:.1f} s for the refill)")
            trials.append(_trial(bench, workflow_id, number))
    finally:
        bench.change_setting("CU_POOL_SIZE", 0)
        end_the_pool(bench)
    cold_median = bench.figures.get(cold.NAME)
    if cold_median is None:
        print("  baseline: one cold start (cold was not chosen)")
        cold_median = cold.trial(bench, workflow_id, 1)["total"]
    totals = [trial["total"] for trial in trials]
    met = median(totals) <= TARGET_S
    print(f"  total: {spread(totals)}")
    print(
        f"  median {median(totals):.2f} s against cold {cold_median:.2f} s ({median(totals) / cold_median:.2f}×); "
        f"target ≤ {TARGET_S:g} s: {verdict(met)}"
    )
    return Summary(
        NAME,
        f"{median(totals):.2f} s (min {min(totals):.2f}, max {max(totals):.2f}, n={len(totals)}) "
        f"against cold {cold_median:.1f} s (target ≤ {TARGET_S:g} s)",
        met,
    )


def _pooled(bench: Bench):
    return select(ComputeUnit).where(
        ComputeUnit.owner_id.is_(None),
        ComputeUnit.pooled_at.is_not(None),
        ComputeUnit.state.in_(UnitState.LIVE),
    )


def wait_for_a_ready_pooled_unit(bench: Bench) -> float:
    started, deadline = time.monotonic(), time.monotonic() + REFILL_TIMEOUT_S
    while not any(unit.spark_ready_at for unit in bench.all(_pooled(bench))):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no pooled unit was ready within {REFILL_TIMEOUT_S:.0f} s")
        time.sleep(0.5)
    return time.monotonic() - started


def end_the_pool(bench: Bench) -> None:
    for unit in bench.all(_pooled(bench)):
        bench.terminate_unit_row(unit.id)


def _trial(bench: Bench, workflow_id: int, number: int) -> dict:
    started = time.time()
    cu_id, running_at = bench.create_compute_unit(f"bench-pool-{number}")
    if bench.row(ComputeUnit, cu_id).claimed_at is None:
        raise RuntimeError("the create did not claim the pool's ready unit")
    first = bench.run(workflow_id, cu_id)
    total = time.time() - started
    bench.terminate_compute_unit(cu_id)
    print(
        f"  #{number}: {total:5.2f} s = claimed and handed over {running_at - started:.2f} s + first execution "
        f"{total - (running_at - started):.2f} s [on the host {first.on_unit_s:.2f} s, the step {first.steps_s:.2f} s]"
    )
    return {"total": total}
