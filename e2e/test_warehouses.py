"""Warehouses as a person manages them, in a real browser."""

import re

from playwright.sync_api import expect


def test_register_rename_archive_and_purge(
    page, sign_in, portal, fill_warehouse_form, confirm, target
):
    lake, renamed = target.name("browser-lake"), target.name("renamed-lake")
    secret = target.storage("alice").secret_access_key
    sign_in("alice")
    page.get_by_role("link", name="Warehouses").first.click()
    page.get_by_test_id("register-warehouse").click()

    # Inline validation as she types.
    page.get_by_label("Bucket").fill("Not_A_Bucket")
    expect(page.locator("#error-bucket")).to_contain_text("Not a valid bucket name")

    fill_warehouse_form(lake, secret="this-is-the-wrong-secret")
    page.get_by_test_id("test-connection").click()
    expect(page.get_by_test_id("probe-result")).to_contain_text("Connection failed.")
    expect(page.get_by_test_id("check-write")).to_contain_text("failed")

    page.get_by_label("Secret access key").fill(secret)
    page.get_by_test_id("test-connection").click()
    expect(page.get_by_test_id("probe-result")).to_contain_text("Connection works.")
    for check in ("write", "read", "list", "delete"):
        expect(page.get_by_test_id(f"check-{check}")).to_contain_text("passed")

    page.get_by_test_id("create-warehouse").click()
    expect(page.get_by_test_id("warehouse-name")).to_have_text(lake)
    expect(page.get_by_test_id("warehouse-contents")).to_contain_text("No namespaces yet")
    expect(page.get_by_test_id("connect-panel")).to_contain_text(lake)
    expect(page.get_by_test_id("connect-panel")).not_to_contain_text(secret)

    page.get_by_role("link", name="Warehouses").first.click()
    expect(page.get_by_test_id("warehouse-list")).to_contain_text(lake)
    expect(page.get_by_test_id("warehouse-list")).to_contain_text("active")
    page.get_by_role("link", name=lake).click()

    page.get_by_label("Rename").fill(renamed)
    page.get_by_test_id("rename").click()
    expect(page.get_by_test_id("warehouse-name")).to_have_text(renamed)

    page.get_by_test_id("archive").click()
    confirm(f"Archive {renamed}?")
    expect(page.get_by_test_id("warehouse-status")).to_have_text("archived")
    expect(page.locator("#purge-form")).to_contain_text("cannot be undone")
    expect(page.locator("#purge-form")).to_be_in_viewport()  # right under the title, no scrolling

    page.get_by_label(re.compile("to confirm")).fill(renamed[:-1])
    page.get_by_test_id("purge").click()
    expect(page.locator("#purge-form")).to_contain_text("Type the warehouse's name exactly")
    expect(page.get_by_label(re.compile("to confirm"))).to_have_value(
        renamed[:-1]
    )  # kept, to correct
    page.get_by_label(re.compile("to confirm")).fill(renamed)
    page.get_by_test_id("purge").click()
    expect(page).to_have_url(portal + "/warehouses/")
    expect(page.get_by_text(f"Warehouse {renamed} is purged")).to_be_visible()
    expect(page.get_by_role("link", name=renamed)).to_have_count(0)


def test_an_endpoint_the_network_policy_refuses_is_marked_on_its_field(
    page, sign_in, portal, fill_warehouse_form, target
):
    sign_in("alice")
    page.goto(portal + "/warehouses/new")
    fill_warehouse_form(target.name("metadata-lake"))
    page.get_by_label("Endpoint").fill("http://169.254.169.254")
    refused = "169.254.169.254 is not allowed by this portal's network policy."

    page.get_by_test_id("test-connection").click()
    expect(page.get_by_test_id("probe-result")).to_contain_text(
        "Fix the highlighted fields first: endpoint."
    )
    expect(page.locator("#error-endpoint")).to_have_text(refused)

    page.get_by_test_id("create-warehouse").click()
    expect(page.locator("#error-endpoint")).to_have_text(refused)
    expect(page.get_by_label("Endpoint")).to_have_attribute("aria-invalid", "true")
