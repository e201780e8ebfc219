"""Plain helpers of the browser tests (e2e/conftest.py's fixtures and tests that use them
directly): axe-core, the phone-sized viewport, the script that names what makes a page scroll
sideways, the paste the code editors take, and whether htmx is still at work on the page."""

from __future__ import annotations

from app.config import PROJECT_ROOT

AXE = PROJECT_ROOT / "node_modules" / "axe-core" / "axe.min.js"
SCREENSHOTS = PROJECT_ROOT / "test-artifacts" / "screenshots"
PHONE = {"width": 390, "height": 844}


# The elements that reach past the viewport's right edge and are not inside a scrolling (or
# clipping) box: what makes a page scroll sideways.
WIDER_THAN_THE_VIEWPORT = """() => {
  const past = e => e.getBoundingClientRect().right > window.innerWidth + 0.5;
  const clipped = e => { for (let a = e.parentElement; a; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== "visible") return a !== document.documentElement && a !== document.body; }
    return false; };
  return [...document.querySelectorAll("body *")].filter(e => past(e) && !clipped(e))
    .slice(-5).map(e => `${e.tagName.toLowerCase()}${e.id ? "#" + e.id : ""}${[...e.classList].map(c => "." + c).join("")}`
                        + ` (right ${Math.round(e.getBoundingClientRect().right)})`);
}"""


# A paste into a code editor, as a person's: CodeMirror takes it itself (Playwright's fill() edits
# a contenteditable through editing commands, whose inline styles the CSP refuses).
PASTE = """(content, text) => {
  const data = new DataTransfer();
  data.setData("text/plain", text);
  content.dispatchEvent(new ClipboardEvent("paste", {clipboardData: data, bubbles: true, cancelable: true}));
}"""


# Whether htmx is between asking and settling somewhere on the page. htmx 2 (its swap() in
# app/static/vendor/htmx.min.js) puts htmx-request on the asking element or its indicator before it
# sends, htmx-swapping on the target, and keeps htmx-settling on the new content until its settle
# tasks, which ask for the new content's load-triggered parts, have run: no gap between one request
# and the next it brings.
HTMX_BUSY = "!!document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')"


def wait_until_htmx_settled(page) -> None:
    """Until htmx is done with every request and swap on the page. A control swapped in takes the
    focus (autofocus) before htmx has given it its handlers, as the swap settles: a key a test
    presses in those milliseconds (a person's never falls in them) did nothing, seen as an Enter
    on a just-focused Move up that moved no step."""
    page.wait_for_function(f"() => !({HTMX_BUSY})")
