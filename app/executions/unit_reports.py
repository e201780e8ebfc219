"""What a unit reports of a run, checked and bounded before the portal keeps it.

The unit runs users' code, so its Spark host's replies are an attacker's text (see
app/untrusted.py): a run's progress (steps and log lines), its result (output tables, row
counts, the time by phase) and its lineage are each bounded, and the result's tables must be
the ones this execution's steps write, so a unit's word never points the portal elsewhere.
"""

from __future__ import annotations

import json
import re

from app.untrusted import Limits, bounded, clean_text
from compute.contract import CONSOLE_LOGS, RESULTS, RUNTIME_STATS, Publish, table_name

# How much of what a unit reports is kept: its progress (steps, log lines) and its lineage.
PROGRESS_LIMITS = Limits(string=4000, items=500, depth=6)
LINEAGE_LIMITS = Limits(string=500, items=1000, depth=6)
_STEP_NAME = re.compile(r"[A-Za-z0-9_]{1,100}")


def merged_progress(previous: dict, reported: object) -> str:
    """The host's progress, bounded, keeping the steps and logs known so far until it reports
    its own (a run that has not started yet reports none)."""
    reported = bounded(reported, PROGRESS_LIMITS) if isinstance(reported, dict) else {}
    return json.dumps(
        {
            "steps": reported.get("steps") or previous.get("steps") or [],
            "logs": reported.get("logs") or previous.get("logs") or [],
        }
    )


def reported_result(
    execution_id: int, result: dict, publish_targets: dict[str, tuple[str, str]]
) -> dict:
    """What the unit reports of a COMPLETED run (compute/run/pipeline.py), each part checked: an
    output table must be the one this execution's step writes (`results.e42_step`), and a
    published one the table and mode its step's publish target names (`publish_targets`, step →
    (table, mode)), so a unit's word never points the portal at another table; figures must be
    numbers."""

    def named_entries(key: str) -> list[tuple[str, object]]:
        entries = result.get(key) if isinstance(result.get(key), dict) else {}
        return [
            (name, value)
            for name, value in list(entries.items())[: PROGRESS_LIMITS.items]
            if isinstance(name, str) and _STEP_NAME.fullmatch(name)
        ]

    def number(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    checked = {
        "outputs": {
            step: table
            for step, table in named_entries("outputs")
            if table == table_name(RESULTS, execution_id, step)
        },
        "rows": {
            step: rows for step, rows in named_entries("rows") if rows is None or number(rows)
        },
        "phases_s": {
            phase: seconds for phase, seconds in named_entries("phases_s") if number(seconds)
        },
    }
    for namespace in (RUNTIME_STATS, CONSOLE_LOGS):
        if result.get(namespace) == table_name(namespace, execution_id):
            checked[namespace] = result[namespace]
    published = {
        step: entry
        for step, entry in named_entries("published")
        if _published_entry(entry) and publish_targets.get(step) == (entry["table"], entry["mode"])
    }
    if published:  # named outputs (compute/run/publish.py)
        checked["published"] = published
    if found := reported_checks(result.get("checks")):  # their quality checks
        checked["checks"] = found
    return checked


CHECK_SEVERITIES = ("warn", "fail")
CHECK_SAMPLE_ROWS = 5
CHECK_SAMPLE_CHARS = 400


def reported_checks(entries: object) -> list[dict]:
    """A run's quality checks as the unit reports them (compute/run/checks.py), in the result
    or its steps' progress: each kept only with its expected fields, typed and bounded."""
    if not isinstance(entries, list):
        return []
    kept = []
    for entry in entries[: PROGRESS_LIMITS.items]:
        if not isinstance(entry, dict):
            continue
        step, offending, sample = entry.get("step"), entry.get("offending"), entry.get("sample")
        if (
            not isinstance(step, str)
            or not _STEP_NAME.fullmatch(step)
            or entry.get("severity") not in CHECK_SEVERITIES
            or not isinstance(offending, int)
            or isinstance(offending, bool)
            or not isinstance(entry.get("passed"), bool)
        ):
            continue
        kept.append(
            {
                "step": step,
                "table": clean_text(entry.get("table") or "", 127, one_line=True),
                "kind": clean_text(entry.get("kind") or "", 40, one_line=True),
                "check": clean_text(entry.get("check") or "", 200, one_line=True),
                "severity": entry["severity"],
                "offending": offending,
                "passed": entry["passed"],
                "detail": clean_text(entry.get("detail") or "", 500, one_line=True),
                "sample": [
                    clean_text(row, CHECK_SAMPLE_CHARS, one_line=True)
                    for row in (sample if isinstance(sample, list) else [])[:CHECK_SAMPLE_ROWS]
                ],
            }
        )
    return kept


def _published_entry(entry: object) -> bool:
    """A named output as the unit reports it: a table a step may publish to, its mode, the
    snapshot published and the rows it added."""
    if not isinstance(entry, dict) or set(entry) != {"table", "mode", "snapshot_id", "rows_added"}:
        return False
    target = Publish(str(entry["table"]), str(entry["mode"]))
    return (
        isinstance(entry["table"], str)
        and target.problem() is None
        and isinstance(entry["snapshot_id"], int)
        and (entry["rows_added"] is None or isinstance(entry["rows_added"], int))
    )


def reported_lineage(result: dict) -> dict:
    """What the run read and wrote (compute/contract.py Lineage), bounded."""
    lineage = result.get("lineage")
    return bounded(lineage, LINEAGE_LIMITS) if isinstance(lineage, dict) else {}
