"""`python -m bench [warm throughput cold paging] [--scale-factor F] [--rows N]`: run the
benchmarks on a local stack of their own, print each one's figures against its baseline, then
a summary. Exit status 1 if a benchmark could not be measured (a missed target is a figure, not
an error)."""
from __future__ import annotations

import argparse
import sys
import time
import traceback
from datetime import datetime, timezone

from bench import cold, paging, throughput, warm
from bench.harness import CU_CPUS, CU_MEMORY_GB, Bench, machine_summary, other_test_runs

# Run order: paging before any compute unit exists (its figures are the portal's alone), then
# cold start, whose fresh unit then serves warm and throughput.
BENCHMARKS = {module.NAME: module for module in (paging, cold, warm, throughput)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("benchmarks", nargs="*", metavar="BENCHMARK",
                        help=f"any of {', '.join(BENCHMARKS)} (default: all)")
    parser.add_argument("--scale-factor", type=float, default=1.0,
                        help="TPC-H scale factor of the throughput benchmark (default 1; 0.01 to 1)")
    parser.add_argument("--rows", type=int, default=10_000_000,
                        help="rows of the paging benchmark's result table (default 10,000,000)")
    options = parser.parse_args(argv)
    if unknown := sorted(set(options.benchmarks) - set(BENCHMARKS)):
        parser.error(f"no benchmark named {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    if options.rows < 2 * paging.PAGE_SIZE:
        parser.error(f"--rows must be at least {2 * paging.PAGE_SIZE}")
    return options


def warn_about_other_test_runs(when: str) -> None:
    if others := other_test_runs():
        print(f"WARNING: {len(others)} pytest process(es) running {when}: the figures are skewed "
              f"(e.g. {others[0][:100]})")


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    chosen = [name for name in BENCHMARKS if not options.benchmarks or name in options.benchmarks]
    print(f"Lakeport benchmarks ({', '.join(chosen)}), {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {machine_summary()}")
    if set(chosen) != {paging.NAME}:  # paging alone needs no compute unit
        print(f"compute unit: local, {CU_CPUS} CPUs, {CU_MEMORY_GB:g} GiB, no worker nodes")
    warn_about_other_test_runs("at the start")
    started = time.monotonic()
    summaries, failed = [], []
    with Bench() as bench:
        for name in chosen:
            try:
                summaries.append(BENCHMARKS[name].run(bench, options))
            except Exception:
                traceback.print_exc()
                failed.append(name)
            warn_about_other_test_runs(f"at the end of {name}")
    print(f"\n== summary ({(time.monotonic() - started) / 60:.1f} min)")
    for summary in summaries:
        print(f"  {summary.name:<11} {'met   ' if summary.met else 'MISSED'}  {summary.headline}")
    for name in failed:
        print(f"  {name:<11} FAILED  (see the error above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
