"""The step editor as a person writes steps: a code editor (CodeMirror 6) with highlighting over
each step's textarea, which keeps the form's value; no CSP violation (the autouse console check)
and no serious accessibility finding."""

from playwright.sync_api import expect


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
