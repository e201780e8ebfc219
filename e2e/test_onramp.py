"""A first-time user on the local stack: from signing in to a registered warehouse, with no
terminal open (the page offers the stack's storage and the user's development keys)."""

import time

from playwright.sync_api import expect

from devstack.seaweedfs import TEST_USER_KEYS

ONE_MINUTE = 60.0


def test_a_new_user_reaches_a_registered_warehouse_within_a_minute(
    page, sign_in, check_page, stack
):
    started = time.monotonic()
    sign_in("bob")
    checklist = page.get_by_test_id("getting-started")
    expect(checklist).to_be_visible()
    checklist.get_by_role("link", name="Register a warehouse").click()

    page.get_by_test_id("use-local-storage").click()
    expect(page.get_by_label("Endpoint")).to_have_value(stack.seaweed.s3_endpoint)
    expect(page.get_by_label("Bucket")).to_have_value(TEST_USER_KEYS["bob"].bucket)
    expect(page.get_by_label("Region")).to_have_value("us-east-1")
    expect(page.get_by_label("Path-style access")).to_be_checked()
    page.get_by_test_id("use-development-keys").click()
    page.get_by_label("Name").fill("first-lake")
    page.get_by_test_id("create-warehouse").click()

    expect(page.get_by_test_id("warehouse-name")).to_have_text("first-lake")
    expect(page.get_by_test_id("warehouse-contents")).to_contain_text("No namespaces yet")
    elapsed = time.monotonic() - started
    print(f"\nfirst sign-in to a registered warehouse: {elapsed:.1f} s")
    assert elapsed < ONE_MINUTE

    check_page("warehouse")
    page.get_by_role("link", name="Lakeport").click()
    expect(page.get_by_test_id("first-step-warehouse")).to_have_class("done")
    expect(page.get_by_test_id("dashboard-warehouses")).to_contain_text("first-lake")
    check_page("dashboard")


def test_the_register_page_marks_the_field_a_refusal_is_about(
    page, sign_in, portal, check_page, stack
):
    sign_in("alice")
    page.goto(portal + "/warehouses/new")
    # Path-style addressing starts on: the default flavor is S3-compatible.
    expect(page.get_by_label("Path-style access")).to_be_checked()
    expect(page.get_by_test_id("development-keys")).to_contain_text(
        TEST_USER_KEYS["alice"].access_key_id
    )
    check_page("register-warehouse")

    cases = [
        ("Bucket", "not-alices-bucket", "bucket", "it does not exist, or the keys may not"),
        ("Secret access key", "not-the-secret-key", "secret_access_key", "does not match"),
        ("Endpoint", "http://127.0.0.1:9", "endpoint", "Endpoint unreachable"),
    ]
    for label, wrong_value, field, diagnosis in cases:
        page.get_by_test_id("use-local-storage").click()
        page.get_by_test_id("use-development-keys").click()
        page.get_by_label("Name").fill("refused-lake")
        page.get_by_label(label).fill(wrong_value)
        page.get_by_test_id("create-warehouse").click()
        expect(page.locator(f"#error-{field}")).to_contain_text(diagnosis)
        expect(page.locator(f"#{field}")).to_have_attribute("aria-invalid", "true")
        expect(page.locator("[aria-invalid=true]")).to_have_count(1)
