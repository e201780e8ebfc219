"""Browser tests: Debian's Chromium driven by Playwright against a running portal.

Without BASE_URL they start a whole local stack of their own, on free ports with a fresh
database, so they run beside a developer's `make run`; its portal has the production shape
(gunicorn with four web workers, and the worker process). With BASE_URL they run against that
deployment (staging, or a second local stack), as the users and with the storage the
environment names (`e2e/target.py`); what they create is named under a prefix of this run's
and removed afterwards. Tests that need the local stack's insides skip there. Screenshots of
failures land in test-artifacts/.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from devstack.database import drop_postgres_database, fresh_postgres_database_with_roles
from devstack.stack import LocalStack, StackPorts
from e2e.page_checks import AXE, PASTE, PHONE, SCREENSHOTS, WIDER_THAN_THE_VIEWPORT
from e2e.target import (
    BASE_URL,
    CHROMIUM,
    CHROMIUM_ARGS,
    Target,
    local_target,
    make_token,
    remote_target,
)
from e2e.target import sign_in as sign_in_through_provider


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    # Never Playwright's downloaded browsers: the machine's Chromium, with no background
    # traffic to hosts this network does not reach.
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def target(request) -> Target:
    """What the suite runs against: a deployment (BASE_URL), or a local stack of its own."""
    if BASE_URL:
        target = remote_target()
        target.token = make_token(request.getfixturevalue("browser"), target)
        yield target
        for what in target.clean_up():
            print(f"e2e clean-up: not removed: {what}")
        return
    # A database of the stack's own: its worker runs all session long, and in the database of
    # tests/ it would fire their schedules, deliver their notifications and stop their units.
    name, portal_url, owner_url = fresh_postgres_database_with_roles("lakeport_e2e")
    stack = LocalStack(
        request.getfixturevalue("run_dir") / "e2e-stack",
        StackPorts.free(),
        database_url=portal_url,
        database_owner_url=owner_url,
    )
    try:
        stack.start(say=lambda _message: None)
        yield local_target(stack)
    finally:
        stack.stop()
        drop_postgres_database(name)


@pytest.fixture
def stack(target):
    """The local stack itself, for tests of its insides (skipped against a deployment)."""
    if target.stack is None:
        pytest.skip("needs the local stack's insides; BASE_URL names another deployment")
    return target.stack


@pytest.fixture
def portal(target) -> str:
    return target.portal


@pytest.fixture
def sign_in(page, target):
    """Sign a user in through the identity provider's login page (`role`: alice or bob)."""

    def sign_in(role: str = "alice", password: str | None = None):
        sign_in_through_provider(page, target, target.person(role), password)

    return sign_in


@pytest.fixture
def sign_out(page):
    """Sign out through the user menu, as a person does (the portal, then the provider), and
    wait for the signed-out landing page, so the next sign-in starts from a clean slate."""

    def sign_out():
        if not page.get_by_test_id("sign-out").is_visible():  # the menu may be open already
            page.get_by_test_id("user-name").click()
        page.get_by_test_id("sign-out").click()
        expect(page.get_by_test_id("sign-in")).to_be_visible(timeout=30_000)

    return sign_out


@pytest.fixture
def fill_warehouse_form(page, target):
    """Fill the register-warehouse form with a user's bucket and keys (`secret` replaces the
    real secret, e.g. to see a failing connection test)."""

    def fill(name: str, secret: str | None = None, user: str = "alice"):
        storage = target.storage(user)
        page.get_by_label("Name").fill(name)
        page.get_by_label("Bucket").fill(storage.bucket)
        page.get_by_label("Key prefix").fill(f"e2e/{name}")
        page.get_by_label("Endpoint").fill(storage.endpoint)
        page.get_by_label("Region").fill(storage.region)
        page.get_by_label("Path-style access").set_checked(storage.path_style)
        page.get_by_label("Access key id").fill(storage.access_key_id)
        page.get_by_label("Secret access key").fill(secret or storage.secret_access_key)

    return fill


FORM_REFUSED = "Failed to load resource: the server responded with a status of 422"


@pytest.fixture(autouse=True)
def console_errors(page, portal):
    """Every browser test fails on a console error, an uncaught exception or a CSP violation
    (Chromium reports those on the console) in the portal's pages. The identity provider's own
    pages stand in for an outside service and are not checked."""
    errors: list[str] = []

    def on_console(message):
        # A 422 is the portal's answer to a form that needs fixing, which the tests check
        # themselves; Chromium still reports its status on the console.
        if message.text.startswith(FORM_REFUSED):
            return
        if message.type == "error" and page.url.startswith(portal):
            errors.append(
                f"console error: {message.text} at {message.location.get('url')} on {page.url}"
            )

    page.on("console", on_console)
    page.on(
        "pageerror",
        lambda error: page.url.startswith(portal) and errors.append(f"uncaught: {error}"),
    )
    yield errors
    assert not errors, "\n".join(errors)


@pytest.fixture
def check_page(page):
    """The checks every main-flow page passes: axe-core finds no serious or critical accessibility
    violation, and at 390 px the page needs no horizontal scrolling. `name` also saves desktop
    and 390 px screenshots under test-artifacts/screenshots/."""

    def check(name: str):
        page.wait_for_load_state("networkidle")
        # Not add_script_tag: it inserts an inline <script>, which the portal's CSP blocks (and
        # the console-error check would report). Evaluated through DevTools, CSP does not apply.
        page.evaluate(AXE.read_text())
        results = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
        serious = [
            f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']][:3]}"
            for v in results["violations"]
            if v["impact"] in ("serious", "critical")
        ]
        assert not serious, f"{name}: " + "\n".join(serious)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}-desktop.png"), full_page=True)
        desktop = page.viewport_size
        page.set_viewport_size(PHONE)
        try:
            widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            page.screenshot(path=str(SCREENSHOTS / f"{name}-390px.png"), full_page=True)
            assert widths[0] <= widths[1], (
                f"{name} scrolls sideways at 390 px: {widths[0]} > {widths[1]}; "
                f"too wide: {page.evaluate(WIDER_THAN_THE_VIEWPORT)}"
            )
        finally:
            page.set_viewport_size(desktop)

    return check


@pytest.fixture
def confirm(page, console_errors):
    """Accept the page's in-page confirmation dialog (never the browser's confirm())."""

    def accept(expected_text: str | None = None):
        dialog = page.locator("#confirm-dialog")
        expect(dialog).to_be_visible()
        if expected_text:
            expect(dialog).to_contain_text(expected_text)
        dialog.get_by_test_id("confirm-accept").click()
        expect(dialog).to_be_hidden()

    def native_dialog(native):
        console_errors.append(f"a native dialog appeared: {native.message}")
        native.dismiss()

    page.on("dialog", native_dialog)
    return accept


@pytest.fixture
def write_code():
    """Replace a step's code in its code editor as a person pasting it does. (Playwright's fill()
    edits a contenteditable through the browser's editing commands, which add inline style
    attributes that the CSP refuses; CodeMirror takes a paste itself.)"""

    def write(step, code: str):
        # Once the page's script has put the editor over the textarea.
        expect(step.locator(".cm-editor")).to_be_visible()
        content = step.get_by_label("Code")
        content.click()
        content.press("Control+A")
        content.evaluate(PASTE, code)
        expect(step.locator("textarea[name$='-code']")).to_have_value(code)

    return write
