"""Result paging: a 100-million-row result table (written with pyiceberg into `results.` of the
warehouse, with a COMPLETED Execution row pointing at it), read through the portal's results
route: page 1 and the page at row 50,000,000, 100 rows each. Target: median ≤ 150 ms each.
For contrast, the time a full scan of the table takes (what paging without metadata would cost).
"""

from __future__ import annotations

import json
import re
import time

import pyarrow as pa
import pyarrow.compute as pc

from app.models import Execution, ExecutionState
from bench.harness import Bench, BenchError, Summary, median, spread, verdict
from compute.contract import RESULTS, table_name

NAME = "paging"
REQUESTS = 7
PAGE_SIZE = 100
ROWS = 100_000_000
MIDDLE_ROW = 50_000_000
TARGET_MS = 150.0
SCANS = 1
STEP = "big"
# Rows per append (one data file each), all in one commit: the table is never in memory whole.
# Not a divisor of MIDDLE_ROW, so that the middle page starts deep inside a file, not at its start.
ROWS_PER_FILE = 1_200_000
SCHEMA = pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("label", pa.string())])


def run(bench: Bench, options) -> Summary:
    rows = options.rows
    middle_row = min(MIDDLE_ROW, rows // 2)
    print(
        f"\n== paging: {rows:,}-row result table, {PAGE_SIZE} rows per page through the results route, "
        f"median of {REQUESTS}"
    )
    execution_id, table = _result_execution(bench)
    started = time.monotonic()
    _write_rows(bench, table, rows)
    print(f"  {table} written with pyiceberg in {time.monotonic() - started:.1f} s")

    middle_page = middle_row // PAGE_SIZE + 1  # 0-based row `middle_row` starts this page
    cold_ms = _request_ms(bench, execution_id, middle_page, middle_row)
    print(
        f"  first request (the portal's catalog, file plan and footer caches empty): {cold_ms:.0f} ms"
    )
    figures = {}
    for label, page, first_row in (
        ("page 1", 1, 0),
        (f"page at row {middle_row:,}", middle_page, middle_row),
    ):
        timings = [_request_ms(bench, execution_id, page, first_row) for _ in range(REQUESTS)]
        figures[label] = timings
        print(f"  {label}: {spread(timings, 'ms', 0)}")

    with bench.iceberg_catalog() as catalog:
        scans = []
        for _ in range(SCANS):
            started = time.monotonic()
            # Streamed batch by batch: the whole table would not fit in memory many times over.
            scanned = sum(
                batch.num_rows for batch in catalog.load_table(table).scan().to_arrow_batch_reader()
            )
            scans.append((time.monotonic() - started) * 1000)
        if scanned != rows:
            raise BenchError(f"the full scan read {scanned:,} rows, not {rows:,}")
    print(f"  full scan with pyiceberg, for contrast: {spread(scans, 'ms', 0)}")

    worst = max(median(timings) for timings in figures.values())
    met = worst <= TARGET_MS
    print(
        f"  slower page median {worst:.0f} ms (target ≤ {TARGET_MS:.0f} ms); a full scan takes "
        f"{median(scans) / worst:.1f}× as long: {verdict(met)}"
    )
    pages = ", ".join(f"{label} {median(timings):.0f} ms" for label, timings in figures.items())
    return Summary(
        NAME,
        f"{rows:,} rows: {pages}; full scan {median(scans):.0f} ms (target ≤ {TARGET_MS:.0f} ms)",
        met,
    )


def _result_execution(bench: Bench) -> tuple[int, str]:
    """A COMPLETED execution of a one-step workflow whose output is the table to page."""
    workflow_id = bench.create_workflow(
        "bench-paging", [{"name": STEP, "kind": "sql", "code": "SELECT 1 AS id", "output": True}]
    )
    warehouse = bench.warehouse()
    execution = bench.add(
        Execution(
            owner_id=warehouse.owner_id,
            workflow_id=workflow_id,
            workflow_version_id=bench.workflow_version_id(workflow_id),
            workflow_version=1,
            warehouse_id=warehouse.id,
            warehouse_name=warehouse.name,
            state=ExecutionState.COMPLETED,
        )
    )
    table = table_name(RESULTS, execution.id, STEP)
    execution.outputs = json.dumps({"outputs": {STEP: table}})
    bench.add(execution)
    return execution.id, table


def _write_rows(bench: Bench, table: str, rows: int) -> None:
    with bench.iceberg_catalog() as catalog:
        catalog.create_namespace_if_not_exists(RESULTS)
        with catalog.create_table_transaction(table, schema=SCHEMA) as transaction:
            for start in range(0, rows, ROWS_PER_FILE):
                ids = pa.array(range(start, min(start + ROWS_PER_FILE, rows)), pa.int64())
                transaction.append(
                    pa.table(
                        {
                            "id": ids,
                            "amount": pc.multiply(pc.cast(ids, pa.float64()), 0.01),
                            "label": pc.binary_join_element_wise(
                                "row-", pc.cast(ids, pa.string()), ""
                            ),
                        },
                        schema=SCHEMA,
                    )
                )


def _request_ms(bench: Bench, execution_id: int, page: int, first_row: int) -> float:
    """One page through the results route, as the pager asks for it (HTMX partial); checked."""
    path = f"/executions/{execution_id}/results/{STEP}?page={page}&size={PAGE_SIZE}"
    started = time.perf_counter()
    response = bench.client.get(path, headers={"HX-Request": "true"})
    elapsed_ms = (time.perf_counter() - started) * 1000
    body = response.get_data(as_text=True)
    expected = f"Rows {first_row + 1:,}–{first_row + PAGE_SIZE:,} of"
    if (
        response.status_code != 200
        or expected not in body
        or len(re.findall(r"<tr><td[ >]", body)) != PAGE_SIZE
    ):
        error = re.search(r'data-testid="table-error">([^<]*)<', body)
        raise BenchError(
            f"GET {path}: HTTP {response.status_code}, "
            f"{error.group(1) if error else 'not the expected rows ' + repr(expected)}"
        )
    return elapsed_ms
