"""Incremental: a run that reads only the rows appended to SF 1 `lineitem` since its workflow's
last run (`changes('ns.table')`, compute/run/lineage.py `Increments`), after 1% new rows were
appended, against the full run: the same step over the whole table.

The source is a copy of tpch.lineitem (`bench_incremental.lineitem`, written once in a plain
PySpark session on the unit), so the other benchmarks' tpch.* stays as generated. Before each
round, 1% of its rows are appended to it with pyiceberg (untimed), as an upstream load would.
Two steps, each as an incremental and a full workflow:

- `copy`: the rows with their revenue, kept as the run's result (an incremental load's shape);
  the figure the target is about;
- `q1`: TPC-H Q1 over the rows (an aggregate: reading is the whole of it, writing nothing),
  beside it.

Run → COMPLETED through the portal's run route, the four runs of a round in turn (rotated), RUNS
rounds, after one untimed run of each workflow (the incremental ones' first run reads the whole
table). Target (issue 42): the incremental run takes at most 15% of the full run (medians).
"""

from __future__ import annotations

import time

from bench.harness import SETTLE_S, Bench, Summary, median, spread, verdict
from bench.throughput import Q1

NAME = "incremental"
RUNS = 3
TARGET_SHARE = 0.15
NEW_ROWS_SHARE = 0.01
SOURCE = "bench_incremental.lineitem"
COPY = (
    "SELECT l_orderkey, l_linenumber, l_returnflag, l_linestatus, l_quantity, "
    "l_extendedprice * (1 - l_discount) AS revenue, l_shipdate FROM {source}"
)


def workflows(bench: Bench) -> dict[str, int]:
    """The four workflows: (copy | q1) × (incremental | full)."""
    made = {}
    for step, sql in (("copy", COPY), ("q1", Q1.replace("tpch.lineitem", "{source}"))):
        for way, source in (("incremental", f"changes('{SOURCE}')"), ("full", SOURCE)):
            code = sql.format(source=source)
            made[f"{step} {way}"] = bench.create_workflow(
                f"bench-{step}-{way}", [{"name": step, "kind": "sql", "code": code, "output": True}]
            )
    return made


def append_new_rows(bench: Bench, rows: int) -> float:
    """Append `rows` rows of the source to itself with pyiceberg (one snapshot); its seconds."""
    began = time.monotonic()
    with bench.iceberg_catalog() as catalog:
        table = catalog.load_table(SOURCE)
        table.append(table.scan(limit=rows).to_arrow())
    return time.monotonic() - began


def run(bench: Bench, options) -> Summary:
    print(
        f"\n== incremental: {NEW_ROWS_SHARE:.0%} new rows of lineitem at SF {options.scale_factor:g} "
        f"read with changes() against the full read, median of {RUNS}"
    )
    cu_id = bench.compute_unit_id()
    bench.tpch_at(options.scale_factor)
    with bench.iceberg_catalog() as catalog:
        catalog.create_namespace_if_not_exists(SOURCE.split(".")[0])
    began = time.monotonic()
    bench.plain_pyspark(
        cu_id, "SELECT * FROM tpch.lineitem", SOURCE, "tpch.lineitem", warmups=1, repeats=0
    )
    with bench.iceberg_catalog() as catalog:
        total = int(catalog.load_table(SOURCE).current_snapshot().summary["total-records"])
    new_rows = round(total * NEW_ROWS_SHARE)
    print(f"  the source, {total:,} rows, copied in {time.monotonic() - began:.1f} s (untimed)")
    made = workflows(bench)
    for name, workflow_id in made.items():  # the incremental ones read the whole table now
        timing = bench.run(workflow_id, cu_id)
        print(f"  first run of {name} (untimed): {timing.total_s:.2f} s")
    seconds: dict[str, list[float]] = {name: [] for name in made}
    rows_read: list[int] = []
    names = list(made)
    for round_ in range(RUNS):
        appended_s = append_new_rows(bench, new_rows)
        print(f"  round {round_ + 1}: {new_rows:,} rows appended in {appended_s:.1f} s")
        for offset in range(len(names)):
            name = names[(round_ + offset) % len(names)]
            time.sleep(SETTLE_S)
            timing = bench.run(made[name], cu_id)
            seconds[name].append(timing.total_s)
            if name == "copy incremental":
                rows_read.append(next((s.get("rows_out") for s in timing.steps), None) or 0)
    for name, values in seconds.items():
        print(f"  {name}: {spread(values)}")
    print(f"  rows the incremental copy wrote per run: {rows_read} (appended: {new_rows:,})")
    shares = {
        step: median(seconds[f"{step} incremental"]) / median(seconds[f"{step} full"])
        for step in ("copy", "q1")
    }
    met = shares["copy"] <= TARGET_SHARE
    print(
        f"  copy, incremental / full: {shares['copy']:.0%} (target ≤ {TARGET_SHARE:.0%}): "
        f"{verdict(met)}; beside it, Q1 incremental / full: {shares['q1']:.0%}"
    )
    return Summary(
        NAME,
        f"{NEW_ROWS_SHARE:.0%} new rows: {median(seconds['copy incremental']):.2f} s vs full "
        f"{median(seconds['copy full']):.2f} s = {shares['copy']:.0%} (target ≤ "
        f"{TARGET_SHARE:.0%}); Q1 {median(seconds['q1 incremental']):.2f} vs "
        f"{median(seconds['q1 full']):.2f} s = {shares['q1']:.0%}",
        met,
    )
