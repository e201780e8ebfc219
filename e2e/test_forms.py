"""Forms as a keyboard and screen-reader user meets them: a visible focus ring, and help text
attached to (and sitting with) its own field."""

from playwright.sync_api import expect

# The focused element's outline, and the ids its aria-describedby names.
FOCUS_RING = "() => { const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth]; }"


def focus_ring_after_tab(page) -> list[str]:
    page.keyboard.press("Tab")
    return page.evaluate(FOCUS_RING)


def gap(page, upper, lower) -> float:
    """Pixels between the bottom of `upper` and the top of `lower`."""
    return lower.bounding_box()["y"] - (upper.bounding_box()["y"] + upper.bounding_box()["height"])


def test_fields_show_a_solid_focus_ring_and_their_help_sits_with_them(
    page, sign_in, portal, check_page
):
    sign_in("alice")
    page.goto(portal + "/compute-units/new")
    name = page.get_by_label("Name")
    name.focus()
    cpus = page.get_by_label("CPUs per node")
    page.keyboard.press("Tab")  # Kind
    assert page.evaluate(FOCUS_RING) == ["solid", "3px"]
    assert focus_ring_after_tab(page) == ["solid", "3px"]  # CPUs per node
    expect(cpus).to_be_focused()
    # Its help (the limits) is read with it.
    expect(cpus).to_have_attribute("aria-describedby", "cu-limits error-cpus")
    expect(page.locator("#cu-limits")).to_contain_text("Limits here")
    check_page("new-compute-unit")

    # Buttons get the same ring from the keyboard.
    page.get_by_test_id("start-compute-unit").focus()
    assert page.evaluate(FOCUS_RING) == ["solid", "3px"]

    page.goto(portal + "/warehouses/new")
    name = page.get_by_label("Name")
    hint = page.locator("#hint-name")
    expect(name).to_have_attribute("aria-describedby", "hint-name error-name")
    expect(hint).to_have_text("Lowercase letters, digits and hyphens.")
    # The hint sits under its own field, nearer to it than to the field after it.
    bucket = page.get_by_label("Bucket")
    assert 0 <= gap(page, name, hint) < gap(page, hint, bucket), (
        gap(page, name, hint),
        gap(page, hint, bucket),
    )
    endpoint, endpoint_hint = page.get_by_label("Endpoint"), page.locator("#hint-endpoint")
    expect(endpoint).to_have_attribute("aria-describedby", "hint-endpoint error-endpoint")
    assert 0 <= gap(page, endpoint, endpoint_hint) < 16
    check_page("register-warehouse-form")
