"""Compute units as a person starts, watches and stops them, in a real browser."""

import re
from urllib.parse import urlparse

from playwright.sync_api import expect

from e2e.page_checks import wait_until_htmx_settled


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
    unit_path = urlparse(page.url).path
    # The status widget polls itself: no reload needed to see it come up, then start Spark.
    state = page.get_by_test_id("cu-state")
    expect(state).to_have_text("WARMING", timeout=90_000)
    expect(page.get_by_test_id("cu-step")).to_contain_text(
        re.compile(r"Spark session starting · \d+ s")
    )
    expect(state).to_have_text("RUNNING", timeout=240_000)
    expect(page.get_by_test_id("cu-node")).to_have_count(1, timeout=15_000)
    expect(page.get_by_test_id("cu-events")).to_contain_text("starting head node")

    # The status part polls itself (every 3 s) while the dialog asks: it waits until the dialog is
    # answered, so the poll neither replaces the button that asked (whose request htmx would then
    # drop) nor stops.
    page.evaluate(
        """() => {
            window.unitPolls = 0;
            document.addEventListener("htmx:beforeRequest", (event) => {
                if (event.detail.elt.id === "cu-status") window.unitPolls += 1;
            });
        }"""
    )

    def open_and_wait_for_a_poll():
        polls = page.evaluate("() => window.unitPolls")
        page.get_by_test_id("terminate").click()
        page.wait_for_function("(polls) => window.unitPolls > polls", arg=polls)
        wait_until_htmx_settled(page)

    open_and_wait_for_a_poll()
    with page.expect_response(lambda response: response.url.endswith(unit_path)):
        page.locator("#confirm-dialog").get_by_role("button", name="Cancel").click()
    expect(state).to_have_text("RUNNING")

    open_and_wait_for_a_poll()
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
