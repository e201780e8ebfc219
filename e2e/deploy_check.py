"""An operator's check of a deployment: does it work end to end, and if not, what to fix.

    make deploy-check BASE_URL=https://lakeport.example E2E_USER=… E2E_PASSWORD=… \\
        E2E_USER2=… E2E_PASSWORD2=… E2E_GROUP=… E2E_S3_ENDPOINT=… E2E_S3_BUCKET=… …

(the variables of `e2e/target.py`; the second user must be a member of E2E_GROUP). Without
BASE_URL it starts a local stack of its own and checks that. In a headless Chromium it signs the
first user in through the identity provider's own login page and makes an API token there; through
the API (`lakeport_client`) it registers a warehouse on the given bucket, starts a compute unit,
saves and runs a two-step workflow (SQL, then Python) and reads its output; in the browser again it
shares the warehouse with the group, has the second user (signed in through the provider too) open
it and read the output table, revokes the share and makes sure the second user lost it. Everything
it makes is named under a prefix of its own and removed at the end through the API (the workflow
that ran stays, as its history does).

Each step prints PASS or FAIL, with what failed and what to fix; a step whose prerequisite failed is
SKIPped. The exit status is 0 only when every step passed. Nothing here is imported by the portal.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from e2e.target import Target, create_token, sign_in
from lakeport_client import ApiError, Client

SQL_STEP = "SELECT id, id * 2 AS twice FROM range(10)"
PYTHON_STEP = """\
from pyspark.sql import functions as F

def run(spark, numbers):
    return numbers.withColumn("label", F.concat(F.lit("n"), F.col("id").cast("string"))).orderBy("id")"""
OUTPUT_STEP = "labelled"
EXPECTED_ROWS = [[str(n), str(2 * n), f"n{n}"] for n in range(10)]
PAGE_WAIT_MS = 30_000

# What to look at when a step fails, by the part of the deployment it exercises.
FIX = {
    "sign-in": "check LAKEPORT_PUBLIC_URL and LAKEPORT_OIDC_ISSUER / _CLIENT_ID / _CLIENT_SECRET, and that the "
    "provider's client allows the redirect URI <LAKEPORT_PUBLIC_URL>/auth/callback "
    "(Keycloak: Clients > lakeport-portal > Valid redirect URIs); the portal's log names the refusal",
    "api token": "the Tokens page failed: see the portal's log",
    "storage": "the portal could not write, read, list and delete a probe object with these keys: check the "
    "S3 endpoint (reachable from the portal; a private address needs LAKEPORT_OUTBOUND_ALLOW_PRIVATE), "
    "the bucket, the region, path-style access and the key pair's rights",
    "warehouse": "Lakekeeper refused the warehouse: check the token exchange (Keycloak: the service account of "
    "LAKEPORT_LAKEKEEPER_CLIENT_ID holds realm-management's impersonation role and the lakekeeper "
    "client's token-exchange permission names it), LAKEPORT_LAKEKEEPER_URL / _AUDIENCE, the service "
    "client's project_admin grant, and that Lakekeeper reaches the storage endpoint",
    "unit": "the compute unit never reached RUNNING: check the unit kind (local needs the worker's bubblewrap "
    "sandbox, cgroups and loop devices; existing needs LAKEPORT_RAY_CLUSTERS; kuberay needs the operator "
    ">= 1.6 and LAKEPORT_KUBERAY_IMAGE) and the worker's log; the unit's reason is above",
    "workflow": "the workflow could not be created or saved: see the portal's log",
    "run": "the execution did not complete: check the token exchange for the user (a run's catalog token), "
    "that units reach Lakekeeper and the storage endpoint (LAKEPORT_CU_ALLOWED_ENDPOINTS, the units' "
    "network policy), and the execution's log shown above",
    "results": "the output table could not be read back: check that the portal reaches the storage endpoint "
    "and Lakekeeper's vended credentials for this warehouse",
    "share": "the share form refused the group: see the message above",
    "second user": "the portal learns a user's groups from the identity provider's `groups` claim at each "
    "sign-in: check the group-membership mapper on the portal's client (Keycloak: Clients > "
    "lakeport-portal > Client scopes > dedicated > Group Membership, claim `groups`, full path off, "
    "in the ID token) and that the second user is a member of the group",
    "revoke": "the revocation failed: see the message above and the portal's log",
    "lost access": "a revoked share must end the second user's access at once: see the portal's log",
    "clean up": "remove what is listed by hand (names under this run's prefix)",
}


class StepFailed(Exception):
    def __init__(self, what: str, fix: str | None = None) -> None:
        super().__init__(what)
        self.what, self.fix = what, fix


@dataclass
class Verdict:
    step: str
    outcome: str  # PASS, FAIL or SKIP
    detail: str
    fix: str = ""
    seconds: float = 0.0

    def lines(self) -> list[str]:
        said = [f"{self.outcome:<4}  {self.step} ({self.seconds:.1f} s): {self.detail}"]
        return said + ([f"      fix: {self.fix}"] if self.fix else [])


@dataclass
class DeployCheck:
    """One check of `target` (a deployment or a local stack) in `browser` (Playwright's)."""

    target: Target
    browser: object
    say: Callable[[str], None] = print
    unit_timeout: float = 600.0
    run_timeout: float = 600.0
    verdicts: list[Verdict] = field(default_factory=list)
    made: dict = field(default_factory=dict)  # what the steps made, for the later ones

    def steps(self) -> list[tuple[str, tuple[str, ...], Callable[[], str]]]:
        """(name, the steps it needs, what it does) in order; the clean-up runs whatever happened."""
        return [
            ("sign-in", (), self.sign_in),
            ("api token", ("sign-in",), self.api_token),
            ("storage", ("api token",), self.storage),
            ("warehouse", ("storage",), self.register_warehouse),
            ("unit", ("api token",), self.start_unit),
            ("workflow", ("api token",), self.save_workflow),
            ("run", ("warehouse", "unit", "workflow"), self.run_workflow),
            ("results", ("run",), self.read_results),
            ("share", ("warehouse",), self.share),
            ("second user", ("share", "results"), self.second_user_reads),
            ("revoke", ("share",), self.revoke),
            ("lost access", ("revoke", "second user"), self.second_user_lost_it),
        ]

    def run(self) -> bool:
        """Every step, each verdict said as it comes; True when all passed."""
        self.say(f"checking {self.target.portal} (everything made is named {self.target.prefix}-…)")
        try:
            for name, needs, action in self.steps():
                failed = [need for need in needs if self.outcome(need) != "PASS"]
                if failed:
                    self.record(Verdict(name, "SKIP", f"not run: needs {', '.join(failed)}"))
                else:
                    self.attempt(name, action)
        finally:
            self.attempt("clean up", self.clean_up)
            for context in self.made.get("contexts", []):
                context.close()
        failures = [v.step for v in self.verdicts if v.outcome == "FAIL"]
        self.say(
            f"deploy check: {'PASSED' if not failures else 'FAILED at ' + failures[0]} "
            f"({sum(v.outcome == 'PASS' for v in self.verdicts)} of {len(self.verdicts)} steps passed)"
        )
        return not failures

    def attempt(self, name: str, action: Callable[[], str]) -> None:
        began = time.monotonic()
        try:
            verdict = Verdict(name, "PASS", action())
        except StepFailed as failed:
            verdict = Verdict(name, "FAIL", failed.what, failed.fix or FIX[name])
        except (ApiError, PlaywrightError, AssertionError, OSError, httpx.HTTPError) as error:
            verdict = Verdict(
                name, "FAIL", f"{type(error).__name__}: {_first_lines(str(error))}", FIX[name]
            )
        verdict.seconds = time.monotonic() - began
        self.record(verdict)

    def record(self, verdict: Verdict) -> None:
        self.verdicts.append(verdict)
        for line in verdict.lines():
            self.say(line)

    def outcome(self, step: str) -> str | None:
        return next((v.outcome for v in self.verdicts if v.step == step), None)

    # --- the browser ------------------------------------------------------------------------------

    def page_of(self, role: str):
        """A signed-in page of the user in `role` (alice, bob), in a browser context of its own."""
        if role not in self.made:
            context = self.browser.new_context()
            self.made.setdefault("contexts", []).append(context)
            page = context.new_page()
            person = self.target.people[role]
            sign_in(page, self.target, person)
            try:
                expect(page.get_by_test_id("user-name")).to_be_visible(timeout=PAGE_WAIT_MS)
            except AssertionError:
                at_provider = urlsplit(page.url).netloc != urlsplit(self.target.portal).netloc
                fix = (
                    (
                        f"the provider did not let {person.username} in: check their name and password (the "
                        "E2E_* variables) and that the user is enabled; if the page is an error of the "
                        "provider's, check LAKEPORT_OIDC_CLIENT_ID and the client's redirect URI "
                        "<LAKEPORT_PUBLIC_URL>/auth/callback"
                    )
                    if at_provider
                    else FIX["sign-in"]
                )
                raise StepFailed(
                    f"{person.username} was not signed in: the browser ended at {page.url} "
                    f"showing {_shown(page)!r}",
                    fix,
                ) from None
            self.made[role] = page
        return self.made[role]

    def sign_in(self) -> str:
        page = self.page_of("alice")
        return f"{self.target.people['alice'].username} signed in through the provider's page ({page.url})"

    def api_token(self) -> str:
        token = create_token(self.page_of("alice"), self.target, self.target.name("check"))
        if not token.startswith("lkp_"):
            raise StepFailed(f"the Tokens page showed no token but {token[:80]!r}")
        self.target.token = token
        self.made["client"] = Client(self.target.portal, token)
        return "a run-scoped API token made on the Tokens page"

    # --- the API ----------------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        return self.made["client"]

    def storage_fields(self) -> dict:
        storage = self.target.storage("alice")
        return {
            "bucket": storage.bucket,
            "endpoint": storage.endpoint,
            "region": storage.region,
            "path_style_access": storage.path_style,
            "access_key_id": storage.access_key_id,
            "secret_access_key": storage.secret_access_key,
        }

    def storage(self) -> str:
        report = self.client.test_connection(
            **self.storage_fields(), key_prefix=f"check/{self.target.prefix}"
        )
        if not report["ok"]:
            failed = "; ".join(
                f"{c['name']}: {c['message']}" for c in report["checks"] if c["outcome"] != "ok"
            )
            raise StepFailed(f"the connection test of {report['location']} failed: {failed}")
        return f"write, read, list and delete work at {report['location']}"

    def register_warehouse(self) -> str:
        name = self.target.name("check-lake")
        try:
            warehouse = self.client.register_warehouse(
                name=name, key_prefix=f"check/{name}", **self.storage_fields()
            )
        except ApiError as refused:
            raise StepFailed(f"registering {name} was refused: {refused}") from None
        self.made["warehouse"] = warehouse
        return f"{name} registered (id {warehouse['id']}, {warehouse['status']})"

    def start_unit(self) -> str:
        name = self.target.name("check-unit")
        unit = self.client.create_unit(
            name,
            kind=self.target.unit_kind,
            ray_cluster=self.target.ray_cluster,
            cpus=2,
            memory_gb=3,
            worker_nodes=0,
        )
        self.made["unit"] = unit
        unit = self.wait(
            lambda: self.client.unit(self.made["unit"]["id"]),
            ("RUNNING", "TERMINATED", "FAILED"),
            self.unit_timeout,
            f"unit {name} never reached RUNNING",
        )
        if unit["state"] != "RUNNING":
            raise StepFailed(
                f"unit {name} ({unit['kind']}) ended {unit['state']}: "
                f"{unit['reason'] or 'no reason given'}"
            )
        return f"{unit['kind']} unit {name} RUNNING"

    def save_workflow(self) -> str:
        # The API saves versions of a workflow; making one is the editor's (its New workflow form).
        name = self.target.name("check-flow")
        page = self.page_of("alice")
        page.goto(self.target.portal + "/workflows/")
        page.get_by_test_id("new-workflow").click()
        page.get_by_label("Name").fill(name)
        page.get_by_test_id("create-workflow").click()
        try:
            expect(page.get_by_test_id("step-editor").first).to_be_visible(timeout=PAGE_WAIT_MS)
        except AssertionError:
            raise StepFailed(
                f"the New workflow form did not open the editor: it showed {_shown(page)!r}"
            ) from None
        workflow = next((w for w in self.client.workflows() if w["name"] == name), None)
        if workflow is None:
            raise StepFailed(
                f"the New workflow form made no workflow {name}: it showed {_shown(page)!r}"
            )
        steps = [
            {"name": "numbers", "kind": "sql", "code": SQL_STEP},
            {"name": OUTPUT_STEP, "kind": "python", "code": PYTHON_STEP, "output": True},
        ]
        self.made["workflow"] = self.client.save_version(
            workflow["id"], workflow["latest_version"], steps
        )
        return f"{name} saved as version {self.made['workflow']['latest_version']} (a SQL step, then a Python step)"

    def run_workflow(self) -> str:
        workflow, unit, warehouse = self.made["workflow"], self.made["unit"], self.made["warehouse"]
        try:
            started = self.client.start(
                workflow["id"], unit["id"], warehouse["id"], version=workflow["latest_version"]
            )
        except ApiError as refused:
            raise StepFailed(f"the run was refused: {refused}") from None
        ended = self.wait(
            lambda: self.client.execution(started["id"]),
            ("COMPLETED", "FAILED", "CANCELLED"),
            self.run_timeout,
            f"execution {started['id']} did not end",
        )
        self.made["execution"] = ended
        if ended["state"] != "COMPLETED":
            tail = " | ".join(
                line.get("message", "") for line in self.client.log_tail(ended["id"])[-5:]
            )
            raise StepFailed(
                f"execution {ended['id']} ended {ended['state']}: {ended['reason']}"
                + (f"; its log ends: {tail[-400:]}" if tail else "")
            )
        return f"execution {ended['id']} COMPLETED into {ended['outputs'].get(OUTPUT_STEP)}"

    def read_results(self) -> str:
        execution = self.made["execution"]
        page = self.client.results(execution["id"], OUTPUT_STEP)
        rows = [[str(cell) for cell in row] for row in page["rows"]]
        if page["columns"] != ["id", "twice", "label"] or rows != EXPECTED_ROWS:
            raise StepFailed(
                f"the output holds {page['columns']} {rows[:3]}…, not the expected "
                f"['id', 'twice', 'label'] {EXPECTED_ROWS[:3]}…",
                FIX["results"],
            )
        return f"{page['total_rows']} rows read back through the API, as computed"

    def wait(
        self, read: Callable[[], dict], final: tuple[str, ...], timeout: float, what: str
    ) -> dict:
        deadline = time.monotonic() + timeout
        while (row := read())["state"] not in final:
            if time.monotonic() > deadline:
                raise StepFailed(
                    f"{what} within {timeout:.0f} s: still {row['state']}"
                    + (f" ({row['reason']})" if row.get("reason") else "")
                )
            time.sleep(2)
        return row

    # --- sharing, in the browser --------------------------------------------------------------------

    def warehouse_url(self) -> str:
        return f"{self.target.portal}/warehouses/{self.made['warehouse']['id']}"

    def share(self) -> str:
        page, group = self.page_of("alice"), self.target.group
        page.goto(self.warehouse_url())
        shares = page.get_by_test_id("warehouse-shares")
        shares.get_by_label("Share with").select_option("group")
        shares.get_by_label("Group", exact=True).fill(group)
        shares.get_by_label("May").select_option("read")
        shares.get_by_test_id("share-submit").click()
        shared = shares.locator('tr[data-testid="share"][data-level="read"]', has_text=group)
        try:
            expect(shared).to_have_count(1, timeout=PAGE_WAIT_MS)
        except AssertionError:
            raise StepFailed(
                f"sharing with group {group} did not show in the panel: {_shown(shares)!r}"
            ) from None
        return f"shared with group {group} (read)"

    def second_user_reads(self) -> str:
        bob, name = self.target.people["bob"], self.made["warehouse"]["name"]
        page = self.page_of("bob")
        page.goto(self.target.portal + "/warehouses/")
        listed = page.get_by_test_id("shared-warehouse-list").locator("tr", has_text=name)
        try:
            expect(listed).to_have_count(1, timeout=10_000)
        except AssertionError:
            raise StepFailed(
                f"{bob.username} does not see {name} among the warehouses shared with them, though "
                f"it is shared with group {self.target.group}: the portal did not get that group "
                f"in {bob.username}'s `groups` claim"
            ) from None
        listed.get_by_role("link", name=name).click()
        expect(page.get_by_test_id("your-access")).to_have_text("read", timeout=PAGE_WAIT_MS)
        table = self.made["execution"]["outputs"][OUTPUT_STEP]
        page.goto(f"{self.warehouse_url()}/tables/{table}")
        try:
            expect(page.get_by_test_id("total-rows")).to_have_text("10", timeout=PAGE_WAIT_MS)
        except AssertionError:
            raise StepFailed(
                f"{bob.username} sees {name} but cannot read {table}: {_shown(page)!r}",
                "a group share reaches the catalog as a group role: check the worker's grants pass "
                "in its log, and that Lakekeeper's project roles work (LAKEPORT_LAKEKEEPER_*)",
            ) from None
        return f"{bob.username} (group {self.target.group}) read the 10 rows of {table}"

    def revoke(self) -> str:
        page = self.page_of("alice")
        page.goto(self.warehouse_url())
        shares = page.get_by_test_id("warehouse-shares")
        shares.locator('tr[data-testid="share"]', has_text=self.target.group).get_by_test_id(
            "revoke-share"
        ).click()
        page.locator("#confirm-dialog").get_by_test_id("confirm-accept").click()
        expect(shares.locator('tr[data-testid="share"]')).to_have_count(0, timeout=PAGE_WAIT_MS)
        return f"the share with group {self.target.group} revoked"

    def second_user_lost_it(self) -> str:
        page, username = self.page_of("bob"), self.target.people["bob"].username
        status = page.request.get(self.warehouse_url()).status
        table = self.made["execution"]["outputs"][OUTPUT_STEP]
        table_status = page.request.get(f"{self.warehouse_url()}/tables/{table}").status
        if (status, table_status) != (404, 404):
            raise StepFailed(
                f"after the revocation {username} still gets HTTP {status} for the warehouse and "
                f"{table_status} for its table (404 expected)"
            )
        return f"{username} gets 404 for the warehouse and its table"

    def clean_up(self) -> str:
        if "client" not in self.made:
            return "nothing to remove: no API token was made"
        self.made.pop("client").close()
        left = self.target.clean_up()  # revokes the token too
        # A workflow that ran stays by design (its history stays readable): not a failure.
        ran = f"workflow {self.made['workflow']['name']}:" if "execution" in self.made else None
        kept = [what for what in left if ran and what.startswith(ran)]
        if failed := [what for what in left if what not in kept]:
            raise StepFailed("not removed: " + "; ".join(failed))
        return "units terminated, warehouses archived and purged, the token revoked" + (
            f"; {self.made['workflow']['name']} stays, as a workflow that ran does" if kept else ""
        )


def _shown(where) -> str:
    """What a page (or part of one) shows, in a line: its alerts if it has any, else its main
    content, else all of it."""
    root = where.locator("body") if hasattr(where, "goto") else where
    for part in (root.locator("[role=alert]"), root.locator("main"), root):
        try:
            texts = [text for text in part.all_inner_texts() if text.strip()]
        except PlaywrightError:
            continue
        if texts:
            return _first_lines(re.sub(r"\s+", " ", " / ".join(texts)))
    return "(nothing readable)"


def _first_lines(text: str, limit: int = 300) -> str:
    text = text.strip().splitlines()[0] if text.strip() else ""
    return text if len(text) <= limit else text[:limit] + "…"


def check(target: Target, browser, **options) -> DeployCheck:
    """Run the check on a copy of `target` under a prefix of its own; the check, with its verdicts."""
    own = dataclasses.replace(target, prefix=f"{target.prefix}dc{secrets.token_hex(2)}", token=None)
    deploy_check = DeployCheck(own, browser, **options)
    deploy_check.run()
    return deploy_check


def main() -> int:
    """`python -m e2e.deploy_check`: against BASE_URL, or a local stack of its own; 0 when all passed."""
    import tempfile
    from pathlib import Path

    from playwright.sync_api import sync_playwright

    from e2e.target import BASE_URL, CHROMIUM, CHROMIUM_ARGS, local_target, remote_target

    stack = None
    try:
        if BASE_URL:
            target = remote_target()
            if "bob" not in target.people:
                raise RuntimeError(
                    "set E2E_USER2 and E2E_PASSWORD2: a second user, a member of E2E_GROUP"
                )
        else:
            from devstack.stack import LocalStack, StackPorts

            print("no BASE_URL: starting a local stack of its own")
            stack = LocalStack(
                Path(tempfile.mkdtemp(prefix="lakeport-deploy-check-")), StackPorts.free()
            )
            target = local_target(stack.start(say=lambda _message: None))
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                return 0 if DeployCheck(target, browser).run() else 1
            finally:
                browser.close()
    except RuntimeError as error:
        print(f"deploy check: {error}", file=sys.stderr)
        return 2
    finally:
        if stack is not None:
            stack.stop()


if __name__ == "__main__":
    sys.exit(main())
