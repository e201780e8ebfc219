"""The audit trail and the operators' page, as a person and an operator use them, in a real browser."""

import re

from playwright.sync_api import expect


def test_alice_reads_her_audit_trail_and_filters_it(page, sign_in, check_page, target, portal):
    sign_in("alice")
    token = target.name("audit-token")
    page.goto(portal + "/tokens/")
    page.get_by_label("Name").fill(token)
    page.get_by_test_id("create-token").click()
    expect(page.get_by_test_id("token-created")).to_be_visible()

    page.get_by_test_id("user-name").click()
    page.get_by_test_id("audit-link").click()
    events = page.get_by_test_id("audit-events")
    expect(events.locator('tr[data-action="token.create"]', has_text=token)).to_have_count(1)
    expect(events.locator('tr[data-action="user.sign_in"]').first).to_be_visible()
    check_page("audit")
    # Filtering swaps the table in place (HTMX) and keeps the filter in the URL.
    page.get_by_label("Action starts with").fill("token.")
    page.get_by_label("Action starts with").press("Enter")
    expect(events.locator('tr[data-action="user.sign_in"]')).to_have_count(0)
    expect(events.locator('tr[data-action="token.create"]', has_text=token)).to_have_count(1)
    expect(page).to_have_url(re.compile(r"action=token\."))
    with page.expect_download() as download:
        page.get_by_test_id("audit-export").click()
    assert download.value.suggested_filename == "lakeport-audit.csv"


def test_an_operator_sees_every_user_and_alice_does_not(
    page, sign_in, sign_out, check_page, target, portal
):
    sign_in("alice")
    page.get_by_test_id("user-name").click()
    expect(page.get_by_test_id("operators-link")).to_have_count(0)
    assert (
        page.request.get(portal + "/operators/").status == 404
    )  # not a page for her (no console noise)
    sign_out()

    sign_in("olive")
    page.get_by_test_id("user-name").click()
    page.get_by_test_id("operators-link").click()
    expect(page.get_by_role("heading", name="Operators", exact=True)).to_be_visible()
    expect(page.get_by_test_id("operator-usage")).to_contain_text(
        target.person("alice").display_name or target.person("alice").username
    )
    check_page("operators")
