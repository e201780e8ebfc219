"""The benchmarks' list (bench/__main__.py) against their documentation and arguments, and the
breakdowns a benchmark reads from a run's log; no benchmark runs here (`make bench` does)."""

from __future__ import annotations

import re

from app.config import PROJECT_ROOT
from bench.__main__ import ALIASES, BENCHMARKS, parse_args
from bench.checks import check_seconds
from bench.harness import RunTiming


def documented_benchmarks() -> set[str]:
    """The names in the first column of bench/README.md's "What each benchmark measures"."""
    text = (PROJECT_ROOT / "bench" / "README.md").read_text()
    section = text.split("## What each benchmark measures", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([\w-]+)`", section, flags=re.MULTILINE))


def test_every_benchmark_and_alias_has_a_row_in_the_readme():
    assert set(BENCHMARKS) | set(ALIASES) <= documented_benchmarks()


def test_the_issue_42_benchmarks_are_listed_and_chosen_by_name():
    assert {"publish", "checks", "incremental", "compaction"} <= set(BENCHMARKS)
    chosen = parse_args(["compaction", "publish"]).benchmarks
    assert chosen == ["compaction", "publish"]


def test_each_checks_time_is_read_from_the_run_log_after_the_step():
    timing = RunTiming(
        execution_id=1,
        total_s=9.0,
        submitted_s=0.1,
        on_unit_s=8.0,
        steps_s=5.0,
        noticed_s=0.02,
        submitted_at=100.0,
        phases_s={},
        steps=({"name": "lineitem", "started_at": 100.0, "ended_at": 105.0},),
        logs=(
            {"ts": 104.0, "message": "step lineitem done in 4.00 s"},
            {"ts": 106.5, "message": "check unique(l_orderkey) on bench.t passed"},
            {"ts": 107.0, "message": "check row_count on bench.t passed"},
            {"ts": 107.1, "message": "published 1 table"},
        ),
    )
    assert [(label, round(seconds, 2)) for label, seconds in check_seconds(timing)] == [
        ("unique(l_orderkey)", 1.5),
        ("row_count", 0.5),
    ]
