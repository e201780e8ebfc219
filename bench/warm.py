"""Warm latency: Run → COMPLETED on a RUNNING compute unit whose Spark host is warm, for a
one-step pipeline writing a one-row result, through the portal's run route and runner.

Baseline: the same SQL and Iceberg write in a plain PySpark session on the same Spark host,
bound beforehand to the same warehouse's catalog (only the write is timed), interleaved with the
Lakeport runs. Target: at most 1.5 s above it (medians of 5).
"""
from __future__ import annotations

from bench.harness import Bench, Summary, median, spread, verdict

NAME = "warm"
RUNS = 5
TARGET_ABOVE_BASELINE_S = 1.5
SQL = "SELECT 42 AS answer, 'warm' AS label"
STEPS = [{"name": "answer", "kind": "sql", "code": SQL, "output": True}]


def run(bench: Bench, options) -> Summary:
    print(f"\n== warm: Run → COMPLETED on a running compute unit (one SQL step, one-row result), median of {RUNS}")
    cu_id = bench.compute_unit_id()
    workflow_id = bench.create_workflow("bench-warm", STEPS)
    # The first run may start the unit's Spark host, and binds the warehouse's catalog on it.
    warm_up = bench.run(workflow_id, cu_id)
    print(f"  warm-up run (starts the Spark host if it is not up yet): {warm_up.total_s:.2f} s")
    plain = {"sql": SQL, "table": "results.bench_warm_plain",
             "vended_from": f"results.e{warm_up.execution_id}_answer"}
    bench.plain_pyspark(cu_id, **plain, warmups=1, repeats=0)
    runs, baseline = [], []
    for _ in range(RUNS):  # interleaved, so that drift (JIT, other load) hits both alike
        runs.append(bench.run(workflow_id, cu_id))
        baseline += bench.plain_pyspark(cu_id, **plain, warmups=0, repeats=1)
    totals = [timing.total_s for timing in runs]
    print(f"  Lakeport (run route + runner): {spread(totals)}")
    print("    where it goes (medians): "
          f"until the host has the run {median([t.submitted_s for t in runs]):.2f} s · "
          f"run on the host {median([t.on_unit_s for t in runs]):.2f} s "
          f"(of which the step, SQL + write, {median([t.steps_s for t in runs]):.2f} s) · "
          f"until the portal notices the end {median([t.noticed_s for t in runs]):.2f} s")
    print(f"  plain PySpark, same catalog: {spread(baseline)}")

    above = median(totals) - median(baseline)
    met = above <= TARGET_ABOVE_BASELINE_S
    ratio = median(totals) / median(baseline)
    print(f"  Lakeport − baseline: {above:+.2f} s (target ≤ +{TARGET_ABOVE_BASELINE_S} s), "
          f"ratio {ratio:.2f}×: {verdict(met)}")
    return Summary(NAME, f"{median(totals):.2f} s vs {median(baseline):.2f} s plain PySpark "
                         f"({above:+.2f} s, {ratio:.1f}×; target ≤ +{TARGET_ABOVE_BASELINE_S} s)", met)
