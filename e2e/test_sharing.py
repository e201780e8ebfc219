"""Sharing a warehouse with a team, as people do it in a real browser: Alice shares hers with
her group, Bob (in the group) runs a workflow into it on his own unit, Alice revokes the share
and Bob's access ends; both actions are in Alice's audit trail."""

import os
import re

from playwright.sync_api import expect

from e2e.journeys import register_warehouse, start_unit

# The group Alice and Bob share on the identity provider (the local stack's: analytics).
GROUP = os.environ.get("E2E_GROUP", "analytics")


def test_alice_shares_with_her_group_bob_runs_into_it_and_loses_it_at_revocation(
    page, sign_in, sign_out, portal, fill_warehouse_form, confirm, check_page, write_code, target
):
    target.person("bob")  # skips where there is no second user
    warehouse, unit, workflow = (
        target.name("team-lake"),
        target.name("bobs-unit"),
        target.name("team run"),
    )

    sign_in("alice")
    warehouse_url = register_warehouse(page, fill_warehouse_form, warehouse)
    shares = page.get_by_test_id("warehouse-shares")
    shares.get_by_label("Share with").select_option("group")
    shares.get_by_label("Group", exact=True).fill(GROUP)
    shares.get_by_label("May").select_option("write")
    shares.get_by_test_id("share-submit").click()
    expect(shares.locator('tr[data-testid="share"][data-level="write"]')).to_contain_text(GROUP)
    check_page("warehouse-shared")
    sign_out()

    # Bob, in the group, finds it shared with him and runs into it on his own unit.
    sign_in("bob")
    page.get_by_role("link", name="Warehouses").first.click()
    shared = page.get_by_test_id("shared-warehouse-list").locator("tr", has_text=warehouse)
    expect(shared).to_contain_text("write")
    shared.get_by_role("link", name=warehouse).click()
    expect(page.get_by_test_id("your-access")).to_have_text("write")
    expect(page.get_by_test_id("warehouse-actions")).to_have_count(0)
    check_page("warehouse-shared-with-me")

    unit_url = start_unit(page, unit)

    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_test_id("new-workflow").click()
    page.get_by_label("Name").fill(workflow)
    page.get_by_test_id("create-workflow").click()
    step = page.get_by_test_id("step-editor").nth(0)
    step.get_by_label("Name").fill("numbers")
    write_code(step, "SELECT id, id * 2 AS twice FROM range(10)")
    step.get_by_label("Output").check()
    page.get_by_test_id("save-workflow").click()
    expect(page.get_by_text(f"Saved {workflow} as version 1.")).to_be_visible()

    page.goto(unit_url)
    expect(page.get_by_test_id("cu-state")).to_have_text(
        re.compile("WARMING|RUNNING"), timeout=120_000
    )
    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_role("link", name=workflow).click()
    page.get_by_test_id("run-workflow").click()
    unit_select = page.get_by_label("Compute unit")
    unit_select.select_option(unit_select.locator("option", has_text=unit).get_attribute("value"))
    page.get_by_label("Warehouse to write into").select_option(label=warehouse)
    page.get_by_test_id("run").click()
    expect(page).to_have_url(re.compile(r"/executions/\d+$"))
    state = page.get_by_test_id("execution-state")
    expect(state).to_have_text(re.compile("COMPLETED|FAILED|CANCELLED"), timeout=240_000)
    assert state.inner_text() == "COMPLETED", page.get_by_test_id("execution-live").inner_text()

    page.goto(unit_url)
    page.get_by_test_id("terminate").click()
    confirm(f"Terminate {unit}?")
    # The answer sends the browser to the unit's page again; sign out once it has landed, or
    # that navigation closes the user menu under the click.
    expect(page.get_by_text(f"Requested the termination of {unit}.")).to_be_visible()
    sign_out()

    # Alice revokes the share: Bob's next page is refused.
    sign_in("alice")
    page.goto(warehouse_url)
    shares = page.get_by_test_id("warehouse-shares")
    shares.get_by_test_id("revoke-share").click()
    confirm("Revoke this share?")
    expect(shares.locator('tr[data-testid="share"]')).to_have_count(0)
    page.get_by_test_id("user-name").click()
    page.get_by_test_id("audit-link").click()
    events = page.get_by_test_id("audit-events")
    expect(events.locator('tr[data-action="warehouse.share"]').first).to_contain_text(GROUP)
    expect(events.locator('tr[data-action="warehouse.unshare"]').first).to_be_visible()
    sign_out()

    sign_in("bob")
    assert page.request.get(warehouse_url).status == 404
    page.get_by_role("link", name="Warehouses").first.click()
    expect(page.get_by_text(warehouse)).to_have_count(0)


def test_a_version_saved_while_bob_looks_at_the_run_form_is_shown_to_him_before_anything_runs(
    page, browser, sign_in, sign_out, fill_warehouse_form, confirm, check_page, write_code, target
):
    """Alice shares a workflow with her group to run; Bob opens its run form on version 1 and reads
    whose code it is; Alice saves version 2 meanwhile (in a browser of her own); Bob's Run starts
    nothing and shows him version 1 against 2 with the step's code changes; his second Run starts
    version 2, and its page says again whose code runs with his credentials, and where."""
    target.person("bob")  # skips where there is no second user
    workflow, warehouse, unit = (
        target.name("seen version"),
        target.name("bobs-lake"),
        target.name("bobs-seen-cu"),
    )

    sign_in("alice")
    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_test_id("new-workflow").click()
    page.get_by_label("Name").fill(workflow)
    page.get_by_test_id("create-workflow").click()
    step = page.get_by_test_id("step-editor").nth(0)
    step.get_by_label("Name").fill("numbers")
    write_code(step, "SELECT 1 AS n")
    step.get_by_label("Output").check()
    page.get_by_test_id("save-workflow").click()
    expect(page.get_by_text(f"Saved {workflow} as version 1.")).to_be_visible()
    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_role("link", name=workflow).click()
    workflow_url = page.url
    shares = page.get_by_test_id("workflow-shares")
    shares.get_by_label("Share with").select_option("group")
    shares.get_by_label("Group", exact=True).fill(GROUP)
    shares.get_by_label("May").select_option("run")
    shares.get_by_test_id("share-submit").click()
    expect(shares.locator('tr[data-testid="share"][data-level="run"]')).to_contain_text(GROUP)
    sign_out()

    sign_in("bob")
    page.get_by_role("link", name="Warehouses").first.click()
    page.get_by_test_id("register-warehouse").click()
    fill_warehouse_form(warehouse, user="bob")
    page.get_by_test_id("create-warehouse").click()
    expect(page.get_by_test_id("warehouse-name")).to_have_text(warehouse, timeout=30_000)
    unit_url = start_unit(page, unit)
    expect(page.get_by_test_id("cu-state")).to_have_text(
        re.compile("WARMING|RUNNING"), timeout=120_000
    )

    page.goto(workflow_url)
    page.get_by_test_id("run-workflow").click()
    unit_select = page.get_by_label("Compute unit")
    unit_select.select_option(unit_select.locator("option", has_text=unit).get_attribute("value"))
    page.get_by_label("Warehouse to write into").select_option(label=warehouse)
    expect(page.get_by_test_id("code-author")).to_contain_text(
        re.compile(r"This runs code written by .+ with your credentials, into")
    )
    check_page("run-form-shared-code")

    # Meanwhile Alice, in her own browser, saves version 2.
    alice_context = browser.new_context()
    try:
        alice = alice_context.new_page()
        person = target.person("alice")
        alice.goto(target.portal + "/")
        alice.get_by_test_id("sign-in").click()
        alice.get_by_label(target.username_label).fill(person.username)
        alice.get_by_label("Password").fill(person.password)
        alice.get_by_role("button", name=target.sign_in_button).click()
        alice.goto(workflow_url)
        alice.get_by_test_id("edit-workflow").click()
        write_code(alice.get_by_test_id("step-editor").nth(0), "SELECT 2 AS n")
        alice.get_by_test_id("save-workflow").click()
        expect(alice.get_by_text(f"Saved {workflow} as version 2.")).to_be_visible()
    finally:
        alice_context.close()

    page.get_by_test_id("run").click()
    changed = page.get_by_test_id("version-changed")
    expect(changed).to_be_visible()
    expect(changed.get_by_test_id("seen-version")).to_have_text("1")
    expect(changed.get_by_test_id("latest-version")).to_have_text("2")
    diff = changed.locator(
        '[data-testid="changed-step"][data-step="numbers"] [data-testid="step-diff"]'
    )
    expect(diff.locator("del")).to_have_text("-SELECT 1 AS n")
    expect(diff.locator("ins")).to_have_text("+SELECT 2 AS n")
    check_page("run-form-version-changed")
    page.get_by_role("button", name="Run version 2").click()
    expect(page).to_have_url(re.compile(r"/executions/\d+$"))
    expect(page.get_by_test_id("code-author")).to_contain_text(
        re.compile(
            rf"This runs code written by .+ with your credentials, into {re.escape(warehouse)}"
        )
    )
    expect(page.locator("hgroup p").first).to_contain_text(f"{workflow} v2 on")

    page.goto(unit_url)
    page.get_by_test_id("terminate").click()
    confirm(f"Terminate {unit}?")
    # The answer sends the browser to the unit's page again; sign out once it has landed, or
    # that navigation closes the user menu under the click.
    expect(page.get_by_text(f"Requested the termination of {unit}.")).to_be_visible()
    sign_out()
