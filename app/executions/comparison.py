"""Comparing two executions of one workflow, output by output.

Row counts and schemas come from the tables' Iceberg metadata (the portal's pyiceberg catalog);
the rows present in one output and not the other are computed on a running compute unit of
the user (`COMPARE_CODE`, compute/comparison.py), submitted to its Spark host like an execution,
with a catalog token acting as the user for the executions' warehouse. Without such a unit the
page says so and shows the metadata part.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from app.compute_units import lifecycle
from app.executions import history, results, run_spec, runner, unit_reports
from app.iceberg_reader import ResultReadError, TableShape, table_shape
from app.models import Execution, User
from app.ray_clusters.spark_host_client import SparkHostClient, SparkHostError
from compute.contract import COMPARE_CODE

SAMPLE_ROWS = 50
COMPARE_TIMEOUT_SECONDS = 120.0


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
            shape_a = _shape(a, entry.a_table)
            shape_b = _shape(b, entry.b_table)
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
    changes += [f"column {name}: {a[name]} in A, {b[name]} in B" for name in a if name in b and a[name] != b[name]]
    return changes


class RowsUnavailable(Exception):
    """The differing rows cannot be computed now (no unit ready, other warehouses); the message says why."""


def differing_rows(owner: User, a: Execution, b: Execution) -> dict:
    """Output → {"only_in_a", "only_in_b", their counts, "columns"} or {"error"}, computed on a
    running unit of `owner` (A's own unit first). Raises RowsUnavailable."""
    tables_a, tables_b = history.output_tables(a), history.output_tables(b)
    pairs = [{"output": output, "a": tables_a[output], "b": tables_b[output]}
             for output in sorted(set(tables_a) & set(tables_b))]
    if not pairs:
        return {}
    warehouse = results.warehouse_of(a)
    if warehouse is None or b.warehouse_id != a.warehouse_id:
        raise RowsUnavailable("The rows are compared only for executions in one warehouse that still exists.")
    handle = _ready_unit(owner, a)
    try:
        token = run_spec.execution_token(warehouse, owner)
    except run_spec.NoCatalogToken as failure:
        raise RowsUnavailable(f"The catalog gave no token for the comparison: {failure}") from None
    args = {"catalog": run_spec.catalog_spec(warehouse, token), "limit": SAMPLE_ROWS, "pairs": pairs,
            "warehouse": {"lakekeeper_id": warehouse.lakekeeper_id}}
    try:
        with SparkHostClient(handle, timeout=runner.HOST_CALL_TIMEOUT_SECONDS) as client:
            run = client.wait(client.submit(COMPARE_CODE, args, name=f"compare-{a.id}-{b.id}")["run_id"],
                              timeout_s=COMPARE_TIMEOUT_SECONDS)
    except SparkHostError as error:
        raise RowsUnavailable(f"The compute unit did not compare the rows: {error}") from None
    if run["state"] != "COMPLETED":
        raise RowsUnavailable(f"The comparison failed on the compute unit: {unit_reports.failure_reason(run.get('error'))}")
    return run.get("result") or {}


def _ready_unit(owner: User, a: Execution):
    """The handle of a running unit of `owner` whose Spark host is ready, A's unit first."""
    units = history.running_compute_units(owner)
    units.sort(key=lambda cu: cu.id != a.compute_unit_id)
    for cu in units:
        handle = lifecycle.handle_of(cu)
        if handle is None or not handle.spark_host_url:
            continue
        try:
            with SparkHostClient(handle, timeout=runner.HOST_CALL_TIMEOUT_SECONDS) as client:
                if client.info().get("state") == "ready":
                    return handle
        except SparkHostError:
            continue
    raise RowsUnavailable("No compute unit of yours is running with Spark ready: start one to see the differing rows.")
