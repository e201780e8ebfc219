"""Compute units as a person starts, watches and stops them, in a real browser."""
from playwright.sync_api import expect


def test_alice_starts_watches_and_terminates_a_compute_unit(page, sign_in, portal):
    sign_in("alice")
    page.get_by_role("link", name="Compute units").first.click()
    page.get_by_test_id("new-compute-unit").click()
    expect(page.get_by_test_id("cu-limits")).to_contain_text("CPUs")
    page.get_by_label("Name").fill("browser-cu")
    page.get_by_label("CPUs per node").fill("1")
    page.get_by_label("Memory per node (GiB)").fill("1")
    page.get_by_test_id("start-compute-unit").click()

    expect(page.get_by_test_id("cu-name")).to_have_text("browser-cu")
    # The status widget polls itself: no reload needed to see it come up.
    expect(page.get_by_test_id("cu-state")).to_have_text("RUNNING", timeout=90_000)
    expect(page.get_by_test_id("cu-node")).to_have_count(1, timeout=15_000)
    expect(page.get_by_test_id("cu-events")).to_contain_text("starting head node")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("terminate").click()
    expect(page.get_by_test_id("cu-state")).to_have_text("TERMINATED", timeout=60_000)

    page.get_by_role("link", name="Compute units").first.click()
    expect(page.get_by_test_id("compute-unit-list")).to_contain_text("TERMINATED")
