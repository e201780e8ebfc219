"""An execution's tables in its warehouse (outputs, runtime stats, console logs), read through
the portal's per-warehouse pyiceberg catalogs (`app.iceberg_reader`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

from app import iceberg_reader
from app.charts import StepTiming
from app.db import get_db
from app.executions import queries
from app.iceberg_catalogs import ResultReadError, catalog_for
from app.iceberg_reader import Page
from app.models import Execution, ExecutionState, Warehouse

RUNTIME_STATS_ROWS = 500


def warehouse_of(execution: Execution) -> Warehouse | None:
    return get_db().get(Warehouse, execution.warehouse_id) if execution.warehouse_id else None


def catalog_of(execution: Execution):
    warehouse = warehouse_of(execution)
    if warehouse is None or execution.outputs_purged:
        raise ResultReadError(
            f"The warehouse {execution.warehouse_name} was purged: its tables are gone."
        )
    return catalog_for(warehouse)


def page(execution: Execution, table: str, page_number: int, size: int) -> Page:
    return iceberg_reader.read_page(catalog_of(execution), table, page_number, size)


def csv_chunks(execution: Execution, table: str) -> Iterator[bytes]:
    return iceberg_reader.stream_csv(catalog_of(execution), table)


def ran_on_the_unit(execution: Execution) -> bool:
    """The execution ended after its run was submitted, so it may have written stats and logs."""
    return execution.state in ExecutionState.FINAL and bool(execution.run_id)


def step_timings(execution: Execution) -> list[StepTiming]:
    """Per step, when it ran relative to the first step and what it produced, from runtime_stats
    (step, status, rows_out, started_at, duration_ms, ...: compute/run/pipeline.py writes it)."""
    stats = page(execution, queries.runtime_stats_table(execution), 1, RUNTIME_STATS_ROWS)
    rows = [dict(zip(stats.columns, row)) for row in stats.rows]
    return _timeline(
        [
            (
                str(row["step"]),
                str(row.get("status") or ""),
                row.get("started_at"),
                (row.get("duration_ms") or 0) / 1000,
                row.get("rows_out"),
            )
            for row in rows
        ]
    )


def progress_timings(execution: Execution) -> list[StepTiming]:
    """The steps that started, as the run reported them while it went (its progress): what a run
    that ended before recording its runtime stats still has."""
    rows = []
    for step in queries.progress_of(execution)["steps"]:
        started, ended = as_datetime(step.get("started_at")), as_datetime(step.get("ended_at"))
        if started is None:
            continue
        rows.append(
            (
                str(step.get("name")),
                str(step.get("state") or ""),
                started,
                max(0.0, (ended - started).total_seconds()) if ended else 0.0,
                step.get("rows_out"),
            )
        )
    return _timeline(rows)


def _timeline(rows: list[tuple[str, str, datetime | None, float, int | None]]) -> list[StepTiming]:
    """(step, status, started at, seconds, rows out) → timings relative to the first start."""
    origin = min((started for _, _, started, _, _ in rows if started), default=None)
    timings, cursor = [], 0.0
    for name, status, started, duration, rows_out in rows:
        # A step that never started is drawn, empty, after the one before it.
        offset = (started - origin).total_seconds() if started else cursor
        timings.append(
            StepTiming(
                name=name, status=status, start_s=offset, duration_s=duration, rows_out=rows_out
            )
        )
        cursor = offset + duration
    return timings


def as_datetime(value: datetime | float | None) -> datetime | None:
    """A log line's moment: epoch seconds in the live progress, a datetime in console_logs."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(value, timezone.utc)
