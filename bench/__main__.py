"""`python -m bench [paging groundwork cold warm idle-memory sandbox throughput console portal-load
publish checks incremental compaction] [--scale-factor F]
[--rows N] [--cold-runs N]`: run the benchmarks on a local stack of their own, print each one's
figures against its baseline, then a summary. Exit status 1 if a benchmark could not be measured
(a missed target is a figure, not an error). `warm` also measures `first-run`."""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from datetime import datetime, timezone

from app.config import SETTINGS
from bench import (
    checks,
    cold,
    compaction,
    console,
    groundwork,
    growth,
    idle_memory,
    incremental,
    paging,
    pool,
    portal_load,
    publish,
    sandbox,
    throughput,
    warm,
)
from bench.harness import (
    CU_CPUS,
    CU_MEMORY_GB,
    Bench,
    machine_summary,
    other_test_runs,
    python_loop_s,
)

# Run order: paging and groundwork before any compute unit exists (their figures are the
# portal's alone); cold
# start on fresh units it terminates; the warm pool's claims against that cold figure; then one unit for the rest: warm (its first run, once the
# unit is ready, is the first-run figure), its idle memory while warm, what its sandbox costs a
# request, throughput, how Q1's time grows with the data (growth), and the portal's load while
# it runs an execution; then issue 42's tables that pipelines keep: publishing named tables,
# quality checks, incremental reads and compaction.
BENCHMARKS = {
    module.NAME: module
    for module in (
        paging,
        groundwork,
        cold,
        pool,
        warm,
        idle_memory,
        sandbox,
        throughput,
        console,
        growth,
        portal_load,
        publish,
        checks,
        incremental,
        compaction,
    )
}
ALIASES = {warm.FIRST_RUN: warm.NAME}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "benchmarks",
        nargs="*",
        metavar="BENCHMARK",
        help=f"any of {', '.join([*BENCHMARKS, *ALIASES])} (default: all)",
    )
    parser.add_argument(
        "--scale-factor",
        type=float,
        default=1.0,
        help="TPC-H scale factor of the throughput benchmark (default 1; 0.01 to 1)",
    )
    parser.add_argument(
        "--rows",
        type=int,
        default=paging.ROWS,
        help=f"rows of the paging benchmark's result table (default {paging.ROWS:,})",
    )
    parser.add_argument(
        "--cold-runs", type=int, default=3, help="fresh units the cold benchmark starts (default 3)"
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="LAKEPORT_NAME=VALUE",
        help="a portal setting for this run, e.g. LAKEPORT_RAY_DASHBOARD=false (to measure a lever)",
    )
    options = parser.parse_args(argv)
    options.benchmarks = [ALIASES.get(name, name) for name in options.benchmarks]
    if unknown := sorted(set(options.benchmarks) - set(BENCHMARKS)):
        parser.error(
            f"no benchmark named {', '.join(unknown)}; choose from {', '.join([*BENCHMARKS, *ALIASES])}"
        )
    if options.cold_runs < 1:
        parser.error("--cold-runs must be at least 1")
    known = {setting.env for setting in SETTINGS.values()}
    options.settings = {}
    for item in options.setting:
        name, _, value = item.partition("=")
        if name not in known or not _:
            parser.error(
                f"--setting {item!r}: expected LAKEPORT_NAME=VALUE with a setting of app/config.py"
            )
        options.settings[name] = value
    if options.rows < 2 * paging.PAGE_SIZE:
        parser.error(f"--rows must be at least {2 * paging.PAGE_SIZE}")
    return options


def warn_about_other_test_runs(when: str) -> None:
    if others := other_test_runs():
        print(
            f"WARNING: {len(others)} pytest process(es) running {when}: the figures are skewed "
            f"(e.g. {others[0][:100]})"
        )


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    chosen = [name for name in BENCHMARKS if not options.benchmarks or name in options.benchmarks]
    print(
        f"Lakeport benchmarks ({', '.join(chosen)}), {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    )
    print(
        f"machine: {machine_summary()}; a 10-million-step Python list comprehension in {python_loop_s():.2f} s"
    )
    if set(chosen) - {paging.NAME, groundwork.NAME}:  # these two need no compute unit
        print(f"compute unit: local, {CU_CPUS} CPUs, {CU_MEMORY_GB:g} GiB, no worker nodes")
    warn_about_other_test_runs("at the start")
    started = time.monotonic()
    summaries, failed, speeds = [], [], []
    if options.settings:
        print(
            f"settings: {', '.join(f'{name}={value}' for name, value in options.settings.items())}"
        )
    with Bench(settings=options.settings) as bench:
        for name in chosen:
            try:
                result = BENCHMARKS[name].run(bench, options)
                summaries += result if isinstance(result, list) else [result]
            except Exception:
                traceback.print_exc()
                failed.append(name)
            warn_about_other_test_runs(f"at the end of {name}")
            speeds.append(python_loop_s())
            print(
                f"  (the machine after {name}: a 10-million-step Python list comprehension in {speeds[-1]:.2f} s)"
            )
    print(
        f"\n== summary ({(time.monotonic() - started) / 60:.1f} min; a 10-million-step Python list comprehension in "
        f"{min(speeds):.2f}–{max(speeds):.2f} s over the run)"
    )
    for summary in summaries:
        print(f"  {summary.name:<12} {'met   ' if summary.met else 'MISSED'}  {summary.headline}")
    for name in failed:
        print(f"  {name:<12} FAILED  (see the error above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
