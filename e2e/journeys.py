"""Steps many browser tests take the same way a person does: register a warehouse, start a
compute unit and wait until it runs, upload a CSV as a dataset, terminate units at the end.
Each takes the page (and what it fills in) and leaves the page where the step ends."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect


def register_warehouse(page: Page, fill_warehouse_form, name: str) -> str:
    """A warehouse of the signed-in user's own, in their bucket; returns its page's URL."""
    page.get_by_role("link", name="Warehouses").first.click()
    page.get_by_test_id("register-warehouse").click()
    fill_warehouse_form(name)
    page.get_by_test_id("create-warehouse").click()
    expect(page.get_by_test_id("warehouse-name")).to_have_text(name, timeout=30_000)
    return page.url


def start_unit(page: Page, name: str) -> str:
    """Start a one-node compute unit (2 CPUs, 3 GiB); returns its page's URL. It comes up while
    the test goes on: `wait_until_unit_runs` waits for it."""
    page.get_by_role("link", name="Compute units").first.click()
    page.get_by_test_id("new-compute-unit").click()
    page.get_by_label("Name").fill(name)
    page.get_by_label("CPUs per node").fill("2")
    page.get_by_label("Memory per node (GiB)").fill("3")
    page.get_by_label("Worker nodes").fill("0")
    page.get_by_test_id("start-compute-unit").click()
    expect(page.get_by_test_id("cu-name")).to_have_text(name)
    return page.url


def wait_until_unit_runs(page: Page, unit_url: str, warming: bool = False) -> None:
    """On the unit's page (which polls itself), until it is RUNNING (or WARMING too, when a run
    started by hand may take it then)."""
    page.goto(unit_url)
    expect(page.get_by_test_id("cu-state")).to_have_text(
        re.compile("WARMING|RUNNING" if warming else "RUNNING"), timeout=240_000
    )


def upload_csv(page: Page, warehouse: str, table: str, csv_file: Path, rows: int) -> None:
    """Upload a CSV as `datasets.<table>` of the warehouse (replacing the table if it exists)."""
    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_test_id("data-sources").click()
    upload = page.get_by_test_id("upload-form")
    upload.get_by_label("Warehouse").select_option(label=warehouse)
    upload.get_by_label("Table").fill(table)
    upload.get_by_label("File").set_input_files(csv_file)
    page.get_by_test_id("upload").click()
    expect(page.get_by_test_id("upload-result")).to_contain_text(
        f"Imported {rows} rows", timeout=60_000
    )


def terminate_units(page: Page, portal: str, names: list[str]) -> None:
    """Terminate each named unit through the UI, in a page of its own (so a failure's screenshot
    still shows where the test failed); a name never created is passed over."""
    for name in names:
        cleanup = page.context.new_page()
        try:
            cleanup.goto(portal + "/compute-units/")
            link = cleanup.get_by_role("link", name=name, exact=True)
            if link.count() == 0:
                continue
            link.click()
            state = cleanup.get_by_test_id("cu-state")
            if state.inner_text() not in ("TERMINATED", "FAILED"):
                cleanup.get_by_test_id("terminate").click()
                cleanup.get_by_test_id("confirm-accept").click()
                expect(state).to_have_text(re.compile("TERMINATED|FAILED"), timeout=90_000)
        finally:
            cleanup.close()
