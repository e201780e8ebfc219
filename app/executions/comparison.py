"""Comparing two executions of one workflow, output by output.

Row counts and schemas come from the tables' Iceberg metadata (the portal's pyiceberg catalog).
The rows present in one output and not the other are computed on a running compute unit of
the user (`JobKind.COMPARISON`, compute/run/comparison.py): the page records a `ComparisonJob`
(`request_rows`), the worker runs it through the door to the unit (`run_rows_job`) with a
catalog token acting as the user for the executions' warehouse, and the page polls the job.
Without such a unit the page says so and shows the metadata part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlmodel import select

from app.compute_units import door
from app.db import get_db
from app.executions import history, results
from app.iceberg_catalogs import ResultReadError
from app.iceberg_reader import TableShape, table_shape
from app.models import ComparisonJob, Execution, JobState, User, utcnow
from app.transitions import compare_and_set
from app.untrusted import Limits, bounded, clean_text
from compute.contract import JobKind

SAMPLE_ROWS = 50
COMPARE_TIMEOUT_SECONDS = 120.0
# What a unit reports of the differing rows is kept within these bounds (users' code ran there).
ROWS_LIMITS = Limits(string=2000, items=SAMPLE_ROWS * 4, depth=5)


@dataclass
class OutputComparison:
    output: str
    a_table: str | None
    b_table: str | None
    a_rows: int | None = None
    b_rows: int | None = None
    # "column x: long in A, string in B", "column y only in B (int)"
    schema_changes: list[str] = field(default_factory=list)
    error: str | None = None


def outputs(a: Execution, b: Execution) -> list[OutputComparison]:
    """Per output step of either execution: tables, row counts and schema differences."""
    tables_a, tables_b = history.output_tables(a), history.output_tables(b)
    compared = []
    for output in sorted(set(tables_a) | set(tables_b)):
        entry = OutputComparison(output, tables_a.get(output), tables_b.get(output))
        try:
            shape_a, shape_b = _shape(a, entry.a_table), _shape(b, entry.b_table)
        except ResultReadError as failure:
            entry.error = failure.args[0]
        else:
            entry.a_rows = shape_a.total_rows if shape_a else None
            entry.b_rows = shape_b.total_rows if shape_b else None
            if shape_a and shape_b:
                entry.schema_changes = schema_changes(shape_a.columns, shape_b.columns)
        compared.append(entry)
    return compared


def _shape(execution: Execution, table: str | None) -> TableShape | None:
    return table_shape(results.catalog_of(execution), table) if table else None


def schema_changes(a: dict[str, str], b: dict[str, str]) -> list[str]:
    changes = [f"column {name} only in A ({kind})" for name, kind in a.items() if name not in b]
    changes += [f"column {name} only in B ({kind})" for name, kind in b.items() if name not in a]
    changes += [
        f"column {name}: {a[name]} in A, {b[name]} in B"
        for name in a
        if name in b and a[name] != b[name]
    ]
    return changes


class RowsUnavailable(Exception):
    """The differing rows cannot be computed now (no unit running, other warehouses); the message says why."""


_NOT_ONE_WAREHOUSE = "The rows are compared only for executions in one warehouse that still exists."
_NO_READY_UNIT = (
    "No compute unit of yours is running with Spark ready: start one to see the differing rows."
)


def _pairs(a: Execution, b: Execution) -> list[dict]:
    tables_a, tables_b = history.output_tables(a), history.output_tables(b)
    return [
        {"output": output, "a": tables_a[output], "b": tables_b[output]}
        for output in sorted(set(tables_a) & set(tables_b))
    ]


def latest_rows_job(a: Execution, b: Execution) -> ComparisonJob | None:
    return (
        get_db()
        .exec(
            select(ComparisonJob)
            .where(ComparisonJob.a_id == a.id, ComparisonJob.b_id == b.id)
            .order_by(ComparisonJob.id.desc())
        )
        .first()
    )


def request_rows(owner: User, a: Execution, b: Execution) -> ComparisonJob | None:
    """Ask the worker for the rows in which A's and B's outputs differ (a job the page polls);
    None when they share no output. A job under way for the pair is the answer. Raises
    RowsUnavailable."""
    if not _pairs(a, b):
        return None
    if results.warehouse_of(a) is None or b.warehouse_id != a.warehouse_id:
        raise RowsUnavailable(_NOT_ONE_WAREHOUSE)
    if not history.running_compute_units(owner):
        raise RowsUnavailable(_NO_READY_UNIT)
    if (latest := latest_rows_job(a, b)) is not None and latest.running:
        return latest
    job = ComparisonJob(owner_id=owner.id, a_id=a.id, b_id=b.id)
    db = get_db()
    db.add(job)
    db.commit()
    return job


def run_rows_job(job_id: int) -> None:
    """The worker's part: compute the differing rows on a ready unit of the owner's (A's own
    unit first) and record them, or why not."""
    db = get_db()
    job = db.get(ComparisonJob, job_id)
    if job is None or not compare_and_set(
        ComparisonJob, job_id, JobState.LIVE, state=JobState.RUNNING
    ):
        return
    a, b = db.get(Execution, job.a_id), db.get(Execution, job.b_id)
    try:
        rows = _differing_rows(db.get(User, job.owner_id), a, b)
    except RowsUnavailable as unavailable:
        compare_and_set(
            ComparisonJob,
            job_id,
            JobState.LIVE,
            state=JobState.FAILED,
            error=clean_text(unavailable.args[0], door.REASON_LIMIT),
            ended_at=utcnow(),
        )
    else:
        compare_and_set(
            ComparisonJob,
            job_id,
            JobState.LIVE,
            state=JobState.DONE,
            result=json.dumps(_checked(rows, _pairs(a, b))),
            ended_at=utcnow(),
        )


def _checked(rows: dict, pairs: list[dict]) -> dict:
    """What the unit reported, kept only in the shape the page shows: per compared output, its
    error, or its columns, the rows only in A and only in B (objects) and their counts."""

    def count(value: object) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    checked = {}
    for output in (pair["output"] for pair in pairs):
        diff = (
            rows.get(output)
            if isinstance(rows.get(output), dict)
            else {"error": "the unit reported nothing"}
        )
        if "error" in diff:
            checked[output] = {"error": clean_text(diff["error"], 500)}
            continue
        columns = [str(column) for column in diff.get("columns") or [] if isinstance(column, str)]
        entry = {"columns": columns}
        for side in ("a", "b"):
            found = (
                diff.get(f"only_in_{side}") if isinstance(diff.get(f"only_in_{side}"), list) else []
            )
            entry[f"only_in_{side}"] = [row for row in found[:SAMPLE_ROWS] if isinstance(row, dict)]
            entry[f"only_in_{side}_count"] = count(diff.get(f"only_in_{side}_count"))
        checked[output] = bounded(entry, ROWS_LIMITS)
    return checked


def _differing_rows(owner: User, a: Execution, b: Execution) -> dict:
    """Output → {"only_in_a", "only_in_b", their counts, "columns"} or {"error"}."""
    warehouse = results.warehouse_of(a)
    if warehouse is None or b.warehouse_id != a.warehouse_id:
        raise RowsUnavailable(_NOT_ONE_WAREHOUSE)
    units = sorted(history.running_compute_units(owner), key=lambda cu: cu.id != a.compute_unit_id)
    if (ready := door.first_ready_host(units)) is None:
        raise RowsUnavailable(_NO_READY_UNIT)
    try:
        token = door.run_token(warehouse, owner)
    except door.NoCatalogToken as failure:
        raise RowsUnavailable(f"The catalog gave no token for the comparison: {failure}") from None
    args = {
        "catalog": door.catalog_binding(warehouse, token),
        "limit": SAMPLE_ROWS,
        "pairs": _pairs(a, b),
        "warehouse": {"lakekeeper_id": warehouse.lakekeeper_id},
    }
    try:
        return door.run_to_end(
            *ready,
            JobKind.COMPARISON,
            args,
            name=f"compare-{a.id}-{b.id}",
            timeout_s=COMPARE_TIMEOUT_SECONDS,
        )
    except (door.UnitUnavailable, door.RunNotCompleted) as error:
        raise RowsUnavailable(f"The comparison did not run on the compute unit: {error}") from None
