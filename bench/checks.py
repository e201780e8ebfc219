"""Checks: quality checks on a 6-million-row named output (TPC-H `lineitem` at scale factor 1,
published with overwrite), against the same run publishing it without checks.

The checks (compute/run/checks.py) are one of each kind that applies to lineitem: not null, a
unique key, accepted values, a row count and a SQL condition, all `fail`, all passing; each runs
before the publish, over the rows on the run's branch. Their cost is the difference of the two
runs' Run → COMPLETED medians (RUNS each, interleaved, after one untimed run of each); where it
goes is read from the run's log on the host, which notes each check as it ends. Target (issue
42): the checks cost at most 10% of the step that made the output (the step's median time).
"""

from __future__ import annotations

from bench.harness import (
    Bench,
    RunTiming,
    Summary,
    interleaved,
    median,
    phase_medians,
    spread,
    verdict,
)

NAME = "checks"
RUNS = 3  # each run writes the 6 million rows
TARGET_SHARE_OF_STEP = 0.10
SQL = "SELECT * FROM tpch.lineitem"
CHECKS = [
    {"kind": "not_null", "column": "l_orderkey", "severity": "fail"},
    {"kind": "unique", "columns": ["l_orderkey", "l_linenumber"], "severity": "fail"},
    {
        "kind": "accepted_values",
        "column": "l_returnflag",
        "values": ["A", "N", "R"],
        "severity": "fail",
    },
    {"kind": "row_count", "min": 1, "severity": "fail"},
    {"kind": "sql", "condition": "l_quantity > 0 AND l_discount <= 0.1", "severity": "fail"},
]


def steps(checked: bool) -> list[dict]:
    publish = {"table": f"bench_checks.lineitem_{'checked' if checked else 'unchecked'}"}
    publish |= {"mode": "overwrite", "checks": CHECKS if checked else []}
    return [{"name": "lineitem", "kind": "sql", "code": SQL, "publish": publish}]


def check_seconds(timing: RunTiming) -> list[tuple[str, float]]:
    """Each check's seconds, from the run's log on the host: from the step's end (then the
    checks begin) to the check's line, then from one check's line to the next."""
    ended = [step["ended_at"] for step in timing.steps if step.get("ended_at")]
    previous = max(ended) if ended else None
    found = []
    for line in timing.logs:
        message = str(line.get("message") or "")
        if message.startswith("check ") and previous is not None:
            found.append(
                (message.split(" on ", 1)[0].removeprefix("check "), line["ts"] - previous)
            )
            previous = line["ts"]
    return found


def run(bench: Bench, options) -> Summary:
    print(
        f"\n== checks: {len(CHECKS)} quality checks on TPC-H lineitem at SF "
        f"{options.scale_factor:g}, published with and without them, median of {RUNS}"
    )
    cu_id = bench.compute_unit_id()
    bench.tpch_at(options.scale_factor)
    checked = bench.create_workflow("bench-checked", steps(checked=True))
    unchecked = bench.create_workflow("bench-unchecked", steps(checked=False))
    first = bench.run(checked, cu_id)
    bench.run(unchecked, cu_id)
    rows = next((step.get("rows_out") for step in first.steps), None)
    print(f"  first runs untimed (they create the tables); the output holds {rows or 0:,} rows")
    with_checks, without = [], []
    interleaved(
        RUNS,
        [
            lambda: with_checks.append(bench.run(checked, cu_id)),
            lambda: without.append(bench.run(unchecked, cu_id)),
        ],
    )
    totals = [timing.total_s for timing in with_checks]
    baseline = [timing.total_s for timing in without]
    step_s = median([timing.steps_s for timing in without])
    print(f"  with checks: {spread(totals)}")
    print(f"    on the host by phase (medians): {phase_medians(with_checks)}")
    print(f"  without: {spread(baseline)}")
    print(f"    on the host by phase (medians): {phase_medians(without)}")
    print(
        f"  the step (SQL + write on the branch) without checks: median {step_s:.2f} s; "
        f"with: {median([timing.steps_s for timing in with_checks]):.2f} s"
    )
    by_check: dict[str, list[float]] = {}
    for timing in with_checks:
        for label, seconds in check_seconds(timing):
            by_check.setdefault(label, []).append(seconds)
    if by_check:
        print(
            "    each check, from the run's log (medians): "
            + " · ".join(f"{label} {median(seconds):.2f} s" for label, seconds in by_check.items())
        )
    cost = median(totals) - median(baseline)
    share = cost / step_s
    met = share <= TARGET_SHARE_OF_STEP
    print(
        f"  checks' cost: {cost:+.2f} s = {share:.0%} of the step's {step_s:.2f} s "
        f"(target ≤ {TARGET_SHARE_OF_STEP:.0%}): {verdict(met)}"
    )
    return Summary(
        NAME,
        f"{len(CHECKS)} checks on {rows or 0:,} rows: {cost:+.2f} s ({median(totals):.2f} vs "
        f"{median(baseline):.2f} s) = {share:.0%} of the step's {step_s:.2f} s "
        f"(target ≤ {TARGET_SHARE_OF_STEP:.0%})",
        met,
    )
