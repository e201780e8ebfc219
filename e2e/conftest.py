"""Browser tests: Debian's Chromium driven by Playwright against a whole local stack.

The stack here is a second one on free ports with its own fresh database, so it runs
beside a developer's `make run`. Screenshots of failures land in test-artifacts/.
"""
from __future__ import annotations

import shutil

import pytest

from devstack.stack import LocalStack, StackPorts

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    # Never Playwright's downloaded browsers: the machine's Chromium, with no background
    # traffic to hosts this network does not reach.
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    }


@pytest.fixture(scope="session")
def stack(run_dir, database_url):
    stack = LocalStack(run_dir / "e2e-stack", StackPorts.free(), database_url=database_url)
    stack.start(say=lambda _message: None)
    yield stack
    stack.stop()


@pytest.fixture
def portal(stack) -> str:
    return stack.portal_url


@pytest.fixture
def sign_in(page, portal):
    """Sign a test user in through the provider's real login page."""
    from devstack.oidc_provider import TEST_USERS

    def sign_in(username: str = "alice", password: str | None = None):
        page.goto(portal + "/")
        page.get_by_test_id("sign-in").click()
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password or TEST_USERS[username].password)
        page.get_by_role("button", name="Sign in").click()

    return sign_in


@pytest.fixture
def fill_warehouse_form(page, stack):
    """Fill the register-warehouse form with a user's local SeaweedFS bucket and keys
    (`secret` replaces the real secret, e.g. to see a failing connection test)."""
    from devstack.seaweedfs import TEST_USER_KEYS

    def fill(name: str, secret: str | None = None, user: str = "alice"):
        keys = TEST_USER_KEYS[user]
        page.get_by_label("Name").fill(name)
        page.get_by_label("Bucket").fill(keys.bucket)
        page.get_by_label("Key prefix").fill(f"e2e/{name}")
        page.get_by_label("Endpoint").fill(stack.seaweed.s3_endpoint)
        page.get_by_label("Region").fill("us-east-1")
        page.get_by_label("Path-style access").check()
        page.get_by_label("Access key id").fill(keys.access_key_id)
        page.get_by_label("Secret access key").fill(secret or keys.secret_access_key)

    return fill
