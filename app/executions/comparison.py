"""Comparing two executions of one workflow, output by output.

Row counts and schemas come from the tables' Iceberg metadata (the portal's pyiceberg catalog).
The rows present in one output and not the other are computed on a running compute unit of
the user (`JobKind.COMPARISON`, compute/run/comparison.py): the page records a `ComparisonJob`
(`request_rows`), the worker runs it through the door to the unit (app/executions/work.py
`run_rows_job`) with a catalog token acting as the user for the executions' warehouse, and the
page polls the job.
Without such a unit the page says so and shows the metadata part.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlmodel import select

from app.db import get_db
from app.executions import queries, results
from app.iceberg_catalogs import ResultReadError
from app.iceberg_reader import TableShape, table_shape
from app.models import ComparisonJob, Execution, User

SAMPLE_ROWS = 50


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
    tables_a, tables_b = queries.output_tables(a), queries.output_tables(b)
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


NOT_ONE_WAREHOUSE = "The rows are compared only for executions in one warehouse that still exists."
NO_READY_UNIT = (
    "No compute unit of yours is running with Spark ready: start one to see the differing rows."
)


def pairs(a: Execution, b: Execution) -> list[dict]:
    tables_a, tables_b = queries.output_tables(a), queries.output_tables(b)
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
    if not pairs(a, b):
        return None
    if results.warehouse_of(a) is None or b.warehouse_id != a.warehouse_id:
        raise RowsUnavailable(NOT_ONE_WAREHOUSE)
    if not queries.running_compute_units(owner):
        raise RowsUnavailable(NO_READY_UNIT)
    if (latest := latest_rows_job(a, b)) is not None and latest.running:
        return latest
    job = ComparisonJob(owner_id=owner.id, a_id=a.id, b_id=b.id)
    db = get_db()
    db.add(job)
    db.commit()
    return job
