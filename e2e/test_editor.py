"""The step editor as a person writes steps: a code editor (CodeMirror 6) with highlighting over
each step's textarea, which keeps the form's value; no CSP violation (the autouse console check)
and no serious accessibility finding."""

from playwright.sync_api import expect

from e2e.page_checks import wait_until_htmx_settled


def code_field(step):
    """The form field behind a step's editor (hidden; the editor writes into it)."""
    return step.locator("textarea[name$='-code']")


def test_alice_writes_steps_in_the_code_editor_and_saves_them(
    page, sign_in, portal, check_page, target
):
    workflow = target.name("editor")
    sign_in("alice")
    page.goto(portal + "/workflows/new")
    page.get_by_label("Name").fill(workflow)
    page.get_by_test_id("create-workflow").click()

    first = page.get_by_test_id("step-editor").nth(0)
    editor = first.locator(".cm-editor")
    expect(editor).to_be_visible()
    expect(code_field(first)).to_be_hidden()
    # The starter SQL is highlighted: keywords carry CodeMirror's token classes, coloured by app.css.
    expect(editor.locator(".tok-keyword").first).to_be_visible()
    assert (
        editor.locator(".tok-keyword").first.evaluate("e => getComputedStyle(e).color")
        == "rgb(160, 17, 62)"
    )

    # She types a query with a mistake: the editor writes into the textarea, and the inline check
    # (which listens to the textarea) points at the line and column.
    content = first.get_by_label("Code")
    content.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.type("SELECT id,, 2 AS two FROM range(3)")
    expect(code_field(first)).to_have_value("SELECT id,, 2 AS two FROM range(3)")
    expect(first.get_by_test_id("step-errors")).to_contain_text(
        "Line 1, column 10: nothing between “,” and “,”", timeout=10_000
    )
    # She fixes it (the second comma goes): the message goes too.
    page.keyboard.press("Home")
    for _ in range(len("SELECT id,")):
        page.keyboard.press("ArrowRight")
    page.keyboard.press("Delete")
    fixed = "SELECT id, 2 AS two FROM range(3)"
    expect(code_field(first)).to_have_value(fixed)
    expect(first.get_by_test_id("step-errors")).to_have_text("", timeout=10_000)
    first.get_by_label("Name").fill("numbers")

    # A PySpark step: the editor added by htmx is highlighted as Python.
    page.get_by_test_id("add-python-step").click()
    expect(page.get_by_test_id("step-editor")).to_have_count(2)
    second = page.get_by_test_id("step-editor").nth(1)
    expect(second.locator(".cm-editor")).to_be_visible()
    expect(second.locator(".cm-editor .tok-keyword", has_text="def")).to_have_count(1)
    # The first step kept what she typed across the swap.
    expect(code_field(page.get_by_test_id("step-editor").nth(0))).to_have_value(fixed)
    second.get_by_label("Output").check()
    check_page("editor-codemirror")

    page.get_by_test_id("save-workflow").click()
    expect(page.get_by_text(f"Saved {workflow} as version 1.")).to_be_visible()
    views = page.get_by_test_id("step-view")
    expect(views).to_have_count(2)
    expect(views.nth(0)).to_contain_text(fixed)


def test_steps_added_moved_and_deleted_from_the_keyboard_keep_the_focus_and_are_announced(
    page, sign_in, portal, target
):
    """As WAI-ARIA's practice has it for an item added to a list: the focus goes to the new step's
    first field, its name (not to the code editor or the whole form), even when another step has
    an error to show, and a polite live region, which stays in place across the editor's swaps,
    says what was added. A step moved or deleted from the keyboard leaves the focus where the
    user can go on, and the region says what happened."""
    sign_in("alice")
    page.goto(portal + "/workflows/new")
    page.get_by_label("Name").fill(target.name("add steps"))
    page.get_by_test_id("create-workflow").click()
    steps = page.get_by_test_id("step-editor")
    expect(steps.nth(0).locator(".cm-editor")).to_be_visible()
    news = page.get_by_test_id("editor-news")
    expect(news).to_have_attribute("role", "status")
    expect(news).to_have_attribute("aria-live", "polite")
    expect(news).to_have_text("")
    news.evaluate("region => { region.dataset.since = 'load'; }")

    # The first step's name emptied: the editor the add brings back shows that error as an alert.
    steps.nth(0).get_by_label("Name").fill("")
    page.get_by_test_id("add-sql-step").focus()
    page.keyboard.press("Enter")
    expect(steps).to_have_count(2)
    expect(steps.nth(0).get_by_role("alert").first).to_be_visible()
    expect(news).to_have_text("Added step 2, a Spark SQL step named step_2.")
    expect(steps.nth(1).get_by_label("Name")).to_be_focused()
    # Still there once htmx has settled and the code editor covers the new step's code.
    expect(steps.nth(1).locator(".cm-editor")).to_be_visible()
    expect(steps.nth(1).get_by_label("Name")).to_be_focused()
    # The same region, updated in place (a region put in anew is not reliably read out).
    expect(news).to_have_attribute("data-since", "load")

    wait_until_htmx_settled(page)
    page.get_by_test_id("add-python-step").focus()
    page.keyboard.press(" ")
    expect(steps).to_have_count(3)
    expect(news).to_have_text("Added step 3, a PySpark function step named step_3.")
    third_name = steps.nth(2).get_by_label("Name")
    expect(third_name).to_be_focused()
    # What she types goes into the new step's name.
    page.keyboard.press("Control+A")
    page.keyboard.type("derive")
    expect(third_name).to_have_value("derive")

    # Moved from the keyboard, the step keeps the focus on its button; at the top, where Move up
    # is disabled, on Move down. The region says where it went.
    wait_until_htmx_settled(page)  # the name's check asked as she typed
    steps.nth(2).get_by_test_id("move-up").focus()
    page.keyboard.press("Enter")
    expect(news).to_have_text("Moved derive to position 2 of 3.")
    expect(steps.nth(1).get_by_label("Name")).to_have_value("derive")
    expect(steps.nth(1).get_by_test_id("move-up")).to_be_focused()
    wait_until_htmx_settled(page)
    page.keyboard.press("Enter")
    expect(news).to_have_text("Moved derive to position 1 of 3.")
    expect(steps.nth(0).get_by_test_id("move-down")).to_be_focused()

    # Deleted: the step that took its place has the focus.
    wait_until_htmx_settled(page)
    steps.nth(0).get_by_test_id("remove-step").focus()
    page.keyboard.press("Enter")
    expect(steps).to_have_count(2)
    expect(news).to_have_text("Deleted derive.")
    expect(steps.nth(0).get_by_label("Name")).to_be_focused()
    expect(news).to_have_attribute("data-since", "load")
