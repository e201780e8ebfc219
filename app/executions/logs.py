"""An execution's console logs as the logs viewer shows them: filtered by level, step and text
on the server (the filters live in the URL), then paged like every other table."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial, reduce

import pyarrow as pa
import pyarrow.compute as pc

from app import iceberg_reader
from app.executions import queries, results
from app.iceberg_reader import Page
from app.models import Execution
from app.table_pages import table_page_context

MAX_QUERY_LENGTH = 200


@dataclass(frozen=True)
class LogFilters:
    level: str = ""
    step: str = ""
    text: str = ""

    @classmethod
    def from_args(cls, args) -> LogFilters:
        return cls(
            level=(args.get("level") or "").strip(),
            step=(args.get("step") or "").strip(),
            text=(args.get("q") or "").strip()[:MAX_QUERY_LENGTH],
        )

    @property
    def params(self) -> dict[str, str]:
        """The query parameters that carry these filters (none for an empty filter)."""
        return {
            name: value
            for name, value in (("level", self.level), ("step", self.step), ("q", self.text))
            if value
        }


@dataclass(frozen=True)
class LogView:
    """The filtered logs and the choices the filter offers (from all of the logs)."""

    whole: iceberg_reader.WholeTable
    levels: list[str]
    steps: list[str]

    def page(self, page_number: int, size: int) -> Page:
        return self.whole.page(page_number, size)


def _choices(rows: pa.Table, column: str) -> list[str]:
    if column not in rows.column_names:
        return []
    return sorted(value for value in pc.unique(rows[column]).to_pylist() if value)


def filtered(rows: pa.Table, filters: LogFilters) -> pa.Table:
    """The log lines that match every filter, in time order; the text matches the message, case
    ignored."""
    conditions = [
        match(rows[column], value)
        for column, value, match in (
            ("level", filters.level, pc.equal),
            ("step", filters.step, pc.equal),
            ("message", filters.text, partial(pc.match_substring, ignore_case=True)),
        )
        if value and column in rows.column_names
    ]
    chosen = (
        rows.filter(pc.fill_null(reduce(pc.and_kleene, conditions), False)) if conditions else rows
    )
    return chosen.sort_by("ts") if "ts" in chosen.column_names else chosen


def log_view(execution: Execution, filters: LogFilters) -> LogView:
    """The execution's console logs, filtered. Raises ResultReadError if they cannot be read."""
    whole = iceberg_reader.read_whole(
        results.catalog_of(execution), queries.console_logs_table(execution)
    )
    return LogView(
        whole=iceberg_reader.WholeTable(filtered(whole.rows, filters), whole.types),
        levels=_choices(whole.rows, "level"),
        steps=_choices(whole.rows, "step"),
    )


def page_context(execution: Execution, filters: LogFilters, pager_url: str) -> dict:
    """What the logs viewer renders: the table page of the filtered logs (or its error), the
    filters, and the levels and steps to choose from."""
    views: list[LogView] = []

    def read(page_number: int, size: int) -> Page:
        views.append(log_view(execution, filters))
        return views[0].page(page_number, size)

    context = table_page_context(
        read, queries.console_logs_table(execution), pager_url, params=filters.params
    )
    return {
        **context,
        "filters": filters,
        "levels": views[0].levels if views else [],
        "steps": views[0].steps if views else [],
    }
