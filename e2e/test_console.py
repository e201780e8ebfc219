"""The SQL console as a person uses it, in a real browser: the editor completes her warehouse's
tables and columns; on a real local compute unit, a query run with Ctrl+Enter, its rows sorted
and exported, a long one cancelled, both in the history."""

import csv
import re

from playwright.sync_api import expect

from e2e.page_checks import PASTE

ROWS = 12


def test_alice_queries_her_warehouse_sorts_exports_and_cancels(
    page, sign_in, portal, fill_warehouse_form, check_page, target, tmp_path
):
    warehouse, unit = target.name("console"), target.name("asker")
    csv_file = tmp_path / "orders.csv"
    with csv_file.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "amount"])
        writer.writerows([number, number * 10] for number in range(1, ROWS + 1))
    sign_in("alice")

    page.get_by_role("link", name="Warehouses").first.click()
    page.get_by_test_id("register-warehouse").click()
    fill_warehouse_form(warehouse)
    page.get_by_test_id("create-warehouse").click()
    expect(page.get_by_test_id("warehouse-name")).to_have_text(warehouse, timeout=30_000)
    page.get_by_role("link", name="Compute units").first.click()
    page.get_by_test_id("new-compute-unit").click()
    page.get_by_label("Name").fill(unit)
    page.get_by_label("CPUs per node").fill("2")
    page.get_by_label("Memory per node (GiB)").fill("3")
    page.get_by_label("Worker nodes").fill("0")
    page.get_by_test_id("start-compute-unit").click()
    expect(page.get_by_test_id("cu-name")).to_have_text(unit)
    unit_url = page.url
    try:
        page.get_by_role("link", name="Workflows").first.click()
        page.get_by_test_id("data-sources").click()
        upload = page.get_by_test_id("upload-form")
        upload.get_by_label("Warehouse").select_option(label=warehouse)
        upload.get_by_label("Table").fill("orders")
        upload.get_by_label("File").set_input_files(csv_file)
        page.get_by_test_id("upload").click()
        expect(page.get_by_test_id("upload-result")).to_contain_text(
            f"Imported {ROWS} rows", timeout=60_000
        )
        page.goto(unit_url)
        expect(page.get_by_test_id("cu-state")).to_have_text(
            re.compile("WARMING|RUNNING"), timeout=120_000
        )

        # The Query page: her warehouse and unit, the statement pasted, Ctrl+Enter runs it.
        page.get_by_role("link", name="Query").first.click()
        form = page.get_by_test_id("query-form")
        form.get_by_label("Warehouse").select_option(label=warehouse)
        units = form.get_by_label("Compute unit")
        units.select_option(units.locator("option", has_text=unit).get_attribute("value"))
        ask(page, "SELECT id, amount FROM datasets.orders WHERE id <= 10")
        page.get_by_label("SQL").press("Control+Enter")
        state = page.get_by_test_id("query-state")
        expect(state).to_have_text(re.compile("completed|failed|cancelled"), timeout=240_000)
        assert state.inner_text() == "completed", page.get_by_test_id("query-result").inner_text()
        expect(page.get_by_test_id("query-row-count")).to_have_text("10")
        results = page.get_by_test_id("result-table")
        expect(results.locator("thead th")).to_have_text(["id long", "amount long"])

        page.get_by_test_id("sort-column").select_option(label="amount")
        page.get_by_test_id("sort-order").select_option(label="descending")
        page.get_by_test_id("sort-rows").click()
        expect(results.locator("tbody tr").first.locator("td")).to_have_text(["10", "100"])
        check_page("console")

        with page.expect_download() as download_info:
            page.get_by_test_id("query-csv").click()
        saved = tmp_path / "query.csv"
        download_info.value.save_as(saved)
        with saved.open(newline="") as handle:
            rows = list(csv.reader(handle))
        assert rows[0] == ["id", "amount"] and len(rows) == 11

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
        page.goto(unit_url)
        if page.get_by_test_id("cu-state").inner_text() not in ("TERMINATED", "FAILED"):
            page.get_by_test_id("terminate").click()
            page.get_by_test_id("confirm-accept").click()


def test_the_editor_completes_a_table_and_its_columns_from_her_warehouse(
    page, sign_in, fill_warehouse_form, check_page, target, tmp_path
):
    warehouse = target.name("completes")
    csv_file = tmp_path / "orders.csv"
    csv_file.write_text("id,amount\n1,10\n2,20\n")
    sign_in("alice")
    page.get_by_role("link", name="Warehouses").first.click()
    page.get_by_test_id("register-warehouse").click()
    fill_warehouse_form(warehouse)
    page.get_by_test_id("create-warehouse").click()
    expect(page.get_by_test_id("warehouse-name")).to_have_text(warehouse, timeout=30_000)
    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_test_id("data-sources").click()
    upload = page.get_by_test_id("upload-form")
    upload.get_by_label("Warehouse").select_option(label=warehouse)
    upload.get_by_label("Table").fill("orders")
    upload.get_by_label("File").set_input_files(csv_file)
    page.get_by_test_id("upload").click()
    expect(page.get_by_test_id("upload-result")).to_contain_text("Imported 2 rows", timeout=60_000)

    page.get_by_role("link", name="Query").first.click()
    form = page.get_by_test_id("query-form")
    form.get_by_label("Warehouse").select_option(label=warehouse)
    status = page.get_by_test_id("completion-status")
    expect(status).to_contain_text(f"of {warehouse}", timeout=30_000)
    expect(status).to_contain_text("Completes")
    content = form.get_by_label("SQL")
    content.click()
    content.press("Control+A")
    content.press("Delete")
    options = page.locator(".cm-tooltip-autocomplete li")

    def choose(label: str) -> None:
        expect(options.filter(has_text=label).first).to_have_attribute("aria-selected", "true")
        # CodeMirror ignores Enter for 75 ms after it opens a completion (interactionDelay).
        page.wait_for_timeout(150)
        page.keyboard.press("Enter")

    # A table of a namespace, then a column of the table the statement names.
    page.keyboard.type("SELECT * FROM datasets.ord")
    choose("orders")
    page.keyboard.type(" WHERE amou")
    choose("amount")
    expect(form.locator("textarea[name='sql-code']")).to_have_value(
        "SELECT * FROM datasets.orders WHERE amount"
    )
    page.get_by_test_id("refresh-completions").click()
    expect(status).to_contain_text("Completes")
    check_page("console-completion")


def ask(page, sql: str) -> None:
    """Replace the statement in the code editor as a person pasting it does."""
    form = page.get_by_test_id("query-form")
    expect(form.locator(".cm-editor")).to_be_visible()
    content = form.get_by_label("SQL")
    content.click()
    content.press("Control+A")
    content.evaluate(PASTE, sql)
    expect(form.locator("textarea[name='sql-code']")).to_have_value(sql)
