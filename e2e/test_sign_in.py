"""Single sign-on as a person does it, in a real browser."""

import re

import pytest
from playwright.sync_api import expect


def test_alice_signs_in_and_sees_her_name(page, sign_in, portal, target):
    sign_in("alice")
    expect(page).to_have_url(portal + "/")
    name = target.person("alice").display_name or re.compile(
        r"\S"
    )  # any name, where it is not known
    expect(page.get_by_test_id("welcome-name")).to_have_text(name)
    expect(page.get_by_test_id("user-name")).to_have_text(name)


def test_wrong_password_shows_the_provider_error(page, sign_in, stack):
    sign_in("alice", "not-her-password")
    expect(page.get_by_text("Invalid username or password.")).to_be_visible()
    expect(page).to_have_url(re.compile(re.escape(stack.oidc.issuer)))


def test_logout_returns_to_the_login_screen(page, sign_in, portal):
    sign_in("alice")
    page.get_by_test_id("user-name").click()
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(re.escape(portal) + r"/auth/login"))
    expect(page.get_by_text("You have signed out.")).to_be_visible()
    expect(page.get_by_test_id("sign-in")).to_be_visible()
    # The provider session ended too: signing in again asks for the password.
    page.get_by_test_id("sign-in").click()
    expect(page.get_by_label("Password")).to_be_visible()


def test_bob_sees_bob_not_alice(page, sign_in, target):
    bob, alice = target.person("bob"), target.person("alice")
    if not (bob.display_name and alice.display_name):
        pytest.skip("the users' display names are not known here (E2E_USER_NAME, E2E_USER2_NAME)")
    sign_in("bob")
    expect(page.get_by_test_id("welcome-name")).to_have_text(bob.display_name)
    expect(page.get_by_text(alice.display_name)).to_have_count(0)
