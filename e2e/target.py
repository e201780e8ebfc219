"""What the browser suite runs against: a local stack of its own, or the deployment BASE_URL names.

Against a deployment (`make e2e BASE_URL=https://staging.example E2E_USER=... E2E_PASSWORD=...`):
- E2E_USER / E2E_PASSWORD sign in as "alice"; E2E_USER2 / E2E_PASSWORD2, if given, as "bob"
  (tests that need a second user skip without them); E2E_OPERATOR / E2E_OPERATOR_PASSWORD, if
  given, as "olive", a member of the operators' group; E2E_USER_NAME / E2E_USER2_NAME are their
  display names, if the tests should check them.
- E2E_S3_ENDPOINT, E2E_S3_BUCKET, E2E_S3_REGION, E2E_S3_ACCESS_KEY_ID, E2E_S3_SECRET_ACCESS_KEY
  name the bucket warehouses are registered on (E2E_S3_PATH_STYLE=false for AWS-style hosts).
- E2E_USERNAME_LABEL / E2E_SIGN_IN_BUTTON match another identity provider's login page.
- E2E_GROUP names a group the second user is a member of (default analytics, the local stack's);
  E2E_UNIT_KIND / E2E_RAY_CLUSTER the kind of compute unit to start (default local; `existing`
  needs the name of a cluster the deployment lists).
Everything a test creates there is named under this run's prefix (`Target.name`); at the end the
suite removes it through the API, with a token it makes on the Tokens page: units terminated,
warehouses archived and purged, workflows that never ran deleted (one that ran stays: its
history is kept by design).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from dataclasses import dataclass, field

BASE_URL = os.environ.get("BASE_URL", "").rstrip("/")
# Debian's Chromium, never Playwright's downloaded browsers, with no background traffic to hosts
# this network does not reach.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass(frozen=True)
class Person:
    username: str
    password: str
    display_name: str | None = None  # None: not known, not checked


@dataclass(frozen=True)
class Storage:
    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str
    region: str = "us-east-1"
    path_style: bool = True


@dataclass
class Target:
    portal: str
    people: dict[str, Person]
    buckets: dict[str, Storage]
    stack: object | None = None  # the LocalStack, when the suite runs its own
    prefix: str = field(default_factory=lambda: f"e2e{secrets.token_hex(3)}")
    username_label: str = "Username"
    sign_in_button: str = "Sign in"
    token: str | None = None  # for the clean-up, against a deployment
    group: str = field(default_factory=lambda: os.environ.get("E2E_GROUP", "analytics"))
    unit_kind: str = "local"
    ray_cluster: str = ""

    def name(self, what: str) -> str:
        """A name for something a test creates, under this run's prefix."""
        return f"{self.prefix}-{what}"

    def person(self, role: str) -> Person:
        import pytest

        if role not in self.people:
            pytest.skip(f"no user for {role!r} here (E2E_USER2 / E2E_PASSWORD2)")
        return self.people[role]

    def storage(self, role: str) -> Storage:
        return self.buckets.get(role) or self.buckets["alice"]

    def clean_up(self) -> list[str]:
        """Remove what this run created on the deployment (named under its prefix); what could
        not be removed, in words."""
        if not self.token:
            return ["no token was made: nothing removed"]
        from lakeport_client import ApiError, Client

        left = []
        with Client(self.portal, self.token) as client:
            mine = re.compile(rf"^{re.escape(self.prefix)}\b")
            for unit in client.units():
                if mine.match(unit["name"]) and unit["state"] not in (
                    "TERMINATED",
                    "FAILED",
                    "TERMINATING",
                ):
                    client.terminate_unit(unit["id"])
            for warehouse in client.warehouses():
                if not mine.match(warehouse["name"]):
                    continue
                try:
                    if warehouse["status"] != "archived":
                        client.archive_warehouse(warehouse["id"])
                    client.purge_warehouse(warehouse["id"], warehouse["name"])
                except ApiError as error:
                    left.append(f"warehouse {warehouse['name']}: {error}")
            for workflow in client.workflows():
                if mine.match(workflow["name"]):
                    try:
                        client.delete_workflow(workflow["id"])
                    except ApiError as error:
                        left.append(f"workflow {workflow['name']}: {error.detail}")
            client.revoke_token()
        return left


def sign_in(page, target: Target, person: Person, password: str | None = None) -> None:
    """Sign `person` in through the identity provider's login page, as a person does."""
    page.goto(target.portal + "/")
    page.get_by_test_id("sign-in").click()
    page.get_by_label(target.username_label).fill(person.username)
    # Exactly "Password": Keycloak's login page also has a "Show password" button beside the field
    # (keycloak/keycloak themes/src/main/resources/theme/keycloak.v2/login/field.ftl, macro password).
    page.get_by_label("Password", exact=True).fill(password or person.password)
    page.get_by_role("button", name=target.sign_in_button).click()


def create_token(page, target: Target, name: str) -> str:
    """A personal access token (scope run, one day) of the signed-in user, made on the Tokens page."""
    page.goto(target.portal + "/tokens/")
    form = page.get_by_test_id("token-form")
    form.get_by_label("Name").fill(name)
    form.get_by_label("Scope").select_option("run")
    form.get_by_label("Expires in (days)").fill("1")
    form.get_by_test_id("create-token").click()
    return page.get_by_test_id("token-text").inner_text().strip()


def make_token(browser, target: Target) -> str:
    """A personal access token of the first user, made on the Tokens page, for the clean-up."""
    context = browser.new_context()
    try:
        page = context.new_page()
        sign_in(page, target, target.people["alice"])
        return create_token(page, target, target.name("cleanup"))
    finally:
        context.close()


def local_target(stack) -> Target:
    from devstack.oidc_provider import TEST_USERS
    from devstack.seaweedfs import TEST_USER_KEYS

    return Target(
        portal=stack.portal_url,
        stack=stack,
        people={
            role: Person(user.username, user.password, user.name)
            for role, user in TEST_USERS.items()
        },
        buckets={
            role: Storage(
                stack.seaweed.s3_endpoint, keys.bucket, keys.access_key_id, keys.secret_access_key
            )
            for role, keys in TEST_USER_KEYS.items()
        },
    )


def remote_target() -> Target:
    env = os.environ
    missing = [
        name
        for name in (
            "E2E_USER",
            "E2E_PASSWORD",
            "E2E_S3_ENDPOINT",
            "E2E_S3_BUCKET",
            "E2E_S3_ACCESS_KEY_ID",
            "E2E_S3_SECRET_ACCESS_KEY",
        )
        if not env.get(name)
    ]
    if missing:
        raise RuntimeError(f"BASE_URL is set: set {', '.join(missing)} too (see e2e/target.py)")
    people = {"alice": Person(env["E2E_USER"], env["E2E_PASSWORD"], env.get("E2E_USER_NAME"))}
    if env.get("E2E_USER2") and env.get("E2E_PASSWORD2"):
        people["bob"] = Person(env["E2E_USER2"], env["E2E_PASSWORD2"], env.get("E2E_USER2_NAME"))
    if env.get("E2E_OPERATOR") and env.get("E2E_OPERATOR_PASSWORD"):
        people["olive"] = Person(
            env["E2E_OPERATOR"], env["E2E_OPERATOR_PASSWORD"], env.get("E2E_OPERATOR_NAME")
        )
    storage = Storage(
        env["E2E_S3_ENDPOINT"],
        env["E2E_S3_BUCKET"],
        env["E2E_S3_ACCESS_KEY_ID"],
        env["E2E_S3_SECRET_ACCESS_KEY"],
        env.get("E2E_S3_REGION", "us-east-1"),
        env.get("E2E_S3_PATH_STYLE", "true").lower() != "false",
    )
    return Target(
        portal=BASE_URL,
        people=people,
        buckets={"alice": storage},
        username_label=env.get("E2E_USERNAME_LABEL", "Username"),
        sign_in_button=env.get("E2E_SIGN_IN_BUTTON", "Sign in"),
        unit_kind=env.get("E2E_UNIT_KIND", "local"),
        ray_cluster=env.get("E2E_RAY_CLUSTER", ""),
    )
