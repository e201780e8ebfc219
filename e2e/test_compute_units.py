"""Compute units as a person starts, watches and stops them, in a real browser."""

import re

from playwright.sync_api import expect


def test_alice_starts_watches_terminates_and_clears_a_compute_unit(
    page, sign_in, portal, confirm, check_page, target
):
    unit = target.name("browser-cu")
    sign_in("alice")
    page.get_by_role("link", name="Compute units").first.click()
    page.get_by_test_id("new-compute-unit").click()
    expect(page.get_by_test_id("cu-limits")).to_contain_text("CPUs")
    page.get_by_label("Name").fill(unit)
    page.get_by_label("CPUs per node").fill("1")
    page.get_by_label("Memory per node (GiB)").fill("1")
    page.get_by_test_id("start-compute-unit").click()

    expect(page.get_by_test_id("cu-name")).to_have_text(unit)
    # The status widget polls itself: no reload needed to see it come up, then start Spark.
    state = page.get_by_test_id("cu-state")
    expect(state).to_have_text("WARMING", timeout=90_000)
    expect(page.get_by_test_id("cu-step")).to_contain_text(
        re.compile(r"Spark session starting · \d+ s")
    )
    expect(state).to_have_text("RUNNING", timeout=240_000)
    expect(page.get_by_test_id("cu-node")).to_have_count(1, timeout=15_000)
    expect(page.get_by_test_id("cu-events")).to_contain_text("starting head node")

    page.get_by_test_id("terminate").click()
    confirm(f"Terminate {unit}?")
    expect(page.get_by_test_id("cu-state")).to_have_text("TERMINATED", timeout=60_000)

    page.get_by_role("link", name="Compute units").first.click()
    row = page.get_by_test_id("compute-unit-list").locator("tr", has_text=unit)
    expect(row).to_contain_text("TERMINATED")
    check_page("compute-units")
    # The ended unit is cleared from the list, in place.
    row.get_by_test_id("clear-unit").click()
    expect(row).to_have_count(0)
    page.reload()
    expect(page.get_by_text(unit)).to_have_count(0)
