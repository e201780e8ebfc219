"""The SQL console as a person uses it, in a real browser: alice writes TPC-H sample data at scale
factor 0.01 into her warehouse; on the Query page the editor completes `tpch.lineitem` and one of
its columns; on a real local compute unit she runs TPC-H Q1 with Ctrl+Enter, sorts its rows,
exports them as CSV, cancels a long query, and finds both in her history."""

import csv
import re

from playwright.sync_api import expect

from e2e.journeys import register_warehouse, start_unit, terminate_units, wait_until_unit_runs
from e2e.page_checks import PASTE

# TPC-H Q1, as the benchmarks ask it (bench/throughput.py).
Q1 = """SELECT l_returnflag, l_linestatus,
       sum(l_quantity) AS sum_qty,
       sum(l_extendedprice) AS sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
       avg(l_quantity) AS avg_qty,
       avg(l_extendedprice) AS avg_price,
       avg(l_discount) AS avg_disc,
       count(*) AS count_order
FROM tpch.lineitem
WHERE l_shipdate <= date '1998-12-01' - interval '90' day
GROUP BY l_returnflag, l_linestatus
ORDER BY l_returnflag, l_linestatus"""
Q1_COLUMNS = [
    "l_returnflag",
    "l_linestatus",
    "sum_qty",
    "sum_base_price",
    "sum_disc_price",
    "sum_charge",
    "avg_qty",
    "avg_price",
    "avg_disc",
    "count_order",
]
# Q1's groups at any scale factor: (A, F), (N, F), (N, O), (R, F).
Q1_ROWS = 4


def test_alice_completes_runs_q1_sorts_exports_cancels_and_finds_her_history(
    page, sign_in, portal, fill_warehouse_form, check_page, target, tmp_path
):
    warehouse, unit = target.name("console"), target.name("asker")
    sign_in("alice")
    warehouse_id = int(register_warehouse(page, fill_warehouse_form, warehouse).rsplit("/", 1)[1])
    unit_url = start_unit(page, unit)
    try:
        # TPC-H at scale factor 0.01, written by the worker while the unit comes up.
        page.get_by_role("link", name="Workflows").first.click()
        page.get_by_test_id("data-sources").click()
        page.locator("#sample-warehouse").select_option(label=warehouse)
        page.get_by_label(re.compile("Scale factor")).fill("0.01")
        page.get_by_test_id("generate-sample").click()
        expect(page.locator(f"#sample-status-{warehouse_id}")).to_contain_text(
            "done", timeout=180_000
        )
        wait_until_unit_runs(page, unit_url, warming=True)

        # The Query page: her warehouse and unit; the editor completes a table and a column.
        page.get_by_role("link", name="Query").first.click()
        form = page.get_by_test_id("query-form")
        form.get_by_label("Warehouse").select_option(label=warehouse)
        units = form.get_by_label("Compute unit")
        units.select_option(units.locator("option", has_text=unit).get_attribute("value"))
        status = page.get_by_test_id("completion-status")
        expect(status).to_contain_text(f"of {warehouse}", timeout=30_000)
        expect(status).to_contain_text("Completes")
        content = form.get_by_label("SQL")
        content.click()
        content.press("Control+A")
        content.press("Delete")
        page.keyboard.type("SELECT * FROM tpch.linei")
        choose(page, "lineitem")
        page.keyboard.type(" WHERE l_retur")
        choose(page, "l_returnflag")
        expect(form.locator("textarea[name='sql-code']")).to_have_value(
            "SELECT * FROM tpch.lineitem WHERE l_returnflag"
        )
        check_page("console-completion")

        # Q1, run with Ctrl+Enter.
        ask(page, Q1)
        content.press("Control+Enter")
        state = page.get_by_test_id("query-state")
        expect(state).to_have_text(re.compile("completed|failed|cancelled"), timeout=240_000)
        assert state.inner_text() == "completed", page.get_by_test_id("query-result").inner_text()
        expect(page.get_by_test_id("query-row-count")).to_have_text(str(Q1_ROWS))
        results = page.get_by_test_id("result-table")
        headers = [text.split()[0] for text in results.locator("thead th").all_inner_texts()]
        assert headers == Q1_COLUMNS

        # Sorted on the page by sum_qty, largest first.
        column = Q1_COLUMNS.index("sum_qty") + 1
        cells = results.locator(f"tbody tr td:nth-child({column})")
        expect(cells).to_have_count(Q1_ROWS)
        shown = cells.all_inner_texts()
        largest_first = sorted(shown, key=lambda text: float(text.replace(",", "")), reverse=True)
        assert largest_first != shown  # Q1 comes ordered by its flags, not by quantity
        page.get_by_test_id("sort-column").select_option(label="sum_qty")
        page.get_by_test_id("sort-order").select_option(label="descending")
        page.get_by_test_id("sort-rows").click()
        expect(cells).to_have_text(largest_first)
        check_page("console")

        with page.expect_download() as download_info:
            page.get_by_test_id("query-csv").click()
        saved = tmp_path / "q1.csv"
        download_info.value.save_as(saved)
        with saved.open(newline="") as handle:
            rows = list(csv.reader(handle))
        assert rows[0] == Q1_COLUMNS and len(rows) == Q1_ROWS + 1
        assert sorted(row[:2] for row in rows[1:]) == [
            ["A", "F"],
            ["N", "F"],
            ["N", "O"],
            ["R", "F"],
        ]

        # A long one, cancelled.
        ask(page, "SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b")
        page.get_by_test_id("run-query").click()
        expect(page.get_by_test_id("query-state")).to_have_text("running", timeout=120_000)
        page.get_by_test_id("cancel-query").click()
        expect(page.get_by_test_id("query-state")).to_have_text("cancelled", timeout=60_000)

        # Hers from this test (other tests of the run may have queried as alice too).
        history = page.get_by_test_id("history-row").filter(has_text=warehouse)
        expect(history).to_have_count(2)
        expect(history.first).to_contain_text("cancelled")
        expect(history.last).to_contain_text("completed")
    finally:
        terminate_units(page, portal, [unit])


def choose(page, label: str) -> None:
    """Take the completion `label` once the editor offers it selected."""
    options = page.locator(".cm-tooltip-autocomplete li")
    expect(options.filter(has_text=label).first).to_have_attribute("aria-selected", "true")
    # CodeMirror ignores Enter for 75 ms after it opens a completion (interactionDelay).
    page.wait_for_timeout(150)
    page.keyboard.press("Enter")


def ask(page, sql: str) -> None:
    """Replace the statement in the code editor as a person pasting it does."""
    form = page.get_by_test_id("query-form")
    expect(form.locator(".cm-editor")).to_be_visible()
    content = form.get_by_label("SQL")
    content.click()
    content.press("Control+A")
    content.evaluate(PASTE, sql)
    expect(form.locator("textarea[name='sql-code']")).to_have_value(sql)
