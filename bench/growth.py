"""Growth: TPC-H Q1 plus its write at scale factors 0.1, 1 and 3, through Lakeport (Run →
COMPLETED on the benchmarks' unit) and in plain PySpark `local[2]` (bench/local_pyspark.py: the
same catalog binding, table and write), each the median of 3 after one warm-up per way and size,
interleaved. Beside each time, the peak memory while it ran: the RSS summed over the unit's
processes, and over the plain session's process tree, sampled every 0.2 s. A third way, plain
PySpark on the same unit's Spark host (as in `throughput`), says whether a difference in growth
comes from the unit's Spark (its executors, its sandbox) or from Lakeport's run around the step.

The figure for growth is how time grows with the data: Lakeport's time at SF 3 over its time at
SF 1, against the same ratio of plain PySpark. Target: at most 5% steeper than plain's (a
flatter growth than plain's, which the unit's fixed costs per run give, meets it). Scale factor 3
generates about 18 million lineitem rows (a few minutes on 2 cores).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path

from app.compute_units import handles
from app.models import ComputeUnit
from app.ray_clusters.local import cluster_pids
from bench.harness import CU_CPUS, Bench, Summary, interleaved, median, verdict
from bench.throughput import Q1, STEPS

NAME = "growth"
SCALE_FACTORS = (0.1, 1.0, 3.0)
RUNS = 3  # 2 before 2026-11-27 06:20 UTC: one slow plain run moved a median of two by half of it
TARGET_GROWTH_DIFFERENCE = 0.05
GIB = 2**30
SAMPLE_S = 0.2


def run(bench: Bench, options) -> Summary:
    print(
        f"\n== growth: TPC-H Q1 + write at scale factors {', '.join(f'{sf:g}' for sf in SCALE_FACTORS)}, "
        f"Lakeport against plain local[{CU_CPUS}], median of {RUNS}, peak memory beside"
    )
    cu_id = bench.compute_unit_id()
    workflow_id = bench.create_workflow("bench-growth-q1", STEPS)
    with bench.app.app_context():
        handle = handles.handle_of(bench.row(ComputeUnit, cu_id))
    figures = {}
    for scale_factor in SCALE_FACTORS:
        seconds = bench.generate_tpch(scale_factor)
        figures[scale_factor] = _measure(bench, workflow_id, cu_id, handle)
        lakeport, plain = figures[scale_factor]["lakeport"], figures[scale_factor]["plain"]
        same_host = figures[scale_factor]["same_host"]
        print(
            f"  SF {scale_factor:g} (generated in {seconds:.0f} s): Lakeport {lakeport['s']:.2f} s, peak unit "
            f"{lakeport['peak'] / GIB:.2f} GiB | plain {plain['s']:.2f} s, peak {plain['peak'] / GIB:.2f} GiB | "
            f"ratio {lakeport['s'] / plain['s']:.2f} | same host {same_host['s']:.2f} s"
        )
    growth = {
        way: figures[3.0][way]["s"] / figures[1.0][way]["s"]
        for way in ("lakeport", "plain", "same_host")
    }
    print(
        f"  SF 3 / SF 1 on the unit's Spark host without Lakeport's run: {growth['same_host']:.2f}×"
    )
    difference = growth["lakeport"] / growth["plain"] - 1
    met = difference <= TARGET_GROWTH_DIFFERENCE
    print(
        f"  SF 3 / SF 1: Lakeport {growth['lakeport']:.2f}×, plain {growth['plain']:.2f}× "
        f"({difference:+.1%}; target at most +{TARGET_GROWTH_DIFFERENCE:.0%}): {verdict(met)}"
    )
    sizes = "; ".join(
        f"SF {sf:g} {figures[sf]['lakeport']['s']:.2f} s / {figures[sf]['plain']['s']:.2f} s plain, "
        f"peak {figures[sf]['lakeport']['peak'] / GIB:.2f} / {figures[sf]['plain']['peak'] / GIB:.2f} GiB"
        for sf in SCALE_FACTORS
    )
    return Summary(
        NAME,
        f"{sizes}; SF 3 / SF 1 Lakeport {growth['lakeport']:.2f}× vs plain {growth['plain']:.2f}× "
        f"({difference:+.1%}, target at most +{TARGET_GROWTH_DIFFERENCE:.0%})",
        met,
    )


def _measure(bench: Bench, workflow_id: int, cu_id: int, handle) -> dict:
    with bench.local_pyspark(vended_from="tpch.lineitem") as local:
        local_tree = lambda: _tree(local.process.pid)  # noqa: E731 - the session's JVM is a child
        bench.run(workflow_id, cu_id)  # warm-ups: the first read of each size warms caches
        local.time(Q1, "results.bench_growth_local")
        same_host = {
            "sql": Q1,
            "table": "results.bench_growth_plain",
            "vended_from": "tpch.lineitem",
        }
        bench.plain_pyspark(cu_id, **same_host, warmups=1, repeats=0)
        lakeport, plain, on_host, peaks = [], [], [], {}

        def through_lakeport() -> None:
            with _peak_rss(lambda: cluster_pids(handle)) as peak:
                lakeport.append(bench.run(workflow_id, cu_id).total_s)
            peaks["lakeport"] = peak[0]

        def plain_local() -> None:
            with _peak_rss(local_tree) as peak:
                plain.extend(local.time(Q1, "results.bench_growth_local"))
            peaks["plain"] = peak[0]

        interleaved(
            RUNS,
            [
                through_lakeport,
                plain_local,
                lambda: on_host.extend(
                    bench.plain_pyspark(cu_id, **same_host, warmups=0, repeats=1)
                ),
            ],
        )
    return {
        "lakeport": {"s": median(lakeport), "peak": peaks["lakeport"]},
        "plain": {"s": median(plain), "peak": peaks["plain"]},
        "same_host": {"s": median(on_host)},
    }


@contextmanager
def _peak_rss(pids):
    """The largest RSS sum of `pids()` seen while the block runs: peak[0] once it has ended."""
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], sum(_rss(pid) for pid in pids()))
            done.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree(root: int) -> list[int]:
    """`root` and its descendants (the plain session's JVM and Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found
