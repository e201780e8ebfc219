"""Every page of the portal, found by walking the app's URL map (not a list), passes axe-core at
1366 px and 390 px, scrolls no sideways at 390 px, logs no console error, and can be used with the
keyboard alone at both widths (every action a tab stop, each with a visible focus ring; the top
bar's menus, the folded navigation of a narrow screen among them, open, are tabbed through and
close from the keyboard).

How a page is chosen: every GET rule of `app.url_map` is requested, its path parameters filled with
the ids of what the signed-in user owns (the fillers `make_one_of_everything` returns; a parameter
without one fails the test and says to add one). Its answer decides: a redirect, a body that is
not `text/html` (the API's JSON, CSV downloads, static files) or HTML that is not a whole document
(an HTMX partial) is not a page; a whole HTML document is a page and is scanned, as is the
portal's page a redirect leads to. The walk runs as a user who owns one of everything, then as an
operator and signed out for the routes without parameters. A new route is walked without anyone
adding it.
"""

from __future__ import annotations

import itertools
import re
import time
from urllib.parse import parse_qsl, urljoin

from playwright.sync_api import expect

from app import create_app
from app.config import Config
from e2e.page_checks import AXE, HTMX_BUSY, PHONE, WIDER_THAN_THE_VIEWPORT

DESKTOP = {"width": 1366, "height": 900}

# axe-core rules the walk accepts, each with why. Empty: every rule of every impact counts.
ACCEPTED_RULES: dict[str, str] = {}

# Routes that need query arguments to show what they are for (they are not in the URL map).
QUERY_FILLERS = {
    "executions.new": "workflow_id={workflow}",
    "executions.compare": "a={completed}&b={failed}",
    "executions.compare_rows": "a={completed}&b={failed}",
}

# Steps of the walk's workflow: version 1 completes and writes a table, version 2 fails.
GOOD_STEP = {
    "name": "numbers",
    "kind": "sql",
    "code": "SELECT id, id * 2 AS twice FROM range(5)",
    "output": True,
}
BROKEN_STEP = {
    "name": "broken",
    "kind": "python",
    "code": "def run(spark):\n    raise ValueError('no good')",
    "output": True,
}


def get_rules() -> list:
    """The GET rules of the portal's URL map (the app is made only to read its routes)."""
    app = create_app(Config(SECRET_KEY="url-map-only", OIDC_CLIENT_SECRET="url-map-only"))
    return sorted(
        (rule for rule in app.url_map.iter_rules() if "GET" in rule.methods),
        key=lambda rule: rule.rule,
    )


# Marks each element a person could act on, watches where Tab takes the focus, and names the
# actions only a mouse can reach (an element that htmx acts on when clicked but no key reaches).
MARK_ACTIONS = """() => {
  // Shown: laid out, and not in a closed dialog or in the folded part of a closed <details>
  // (its <summary> is the tab stop that opens it).
  const folded = e => { const details = e.closest("details:not([open])");
    return details && !details.querySelector(":scope > summary").contains(e); };
  const shown = e => { const box = e.getBoundingClientRect(), style = getComputedStyle(e);
    return box.width > 0 && box.height > 0 && style.visibility !== "hidden" && !e.closest("dialog:not([open]), [inert]")
      && !folded(e); };
  const candidates = document.querySelectorAll(
    "a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]:not([tabindex='-1']), [contenteditable=true]");
  // Inside the code editor only its text is a tab stop (CodeMirror's own parts are not).
  const actions = [...candidates].filter(e => !e.disabled && shown(e) && (!e.closest(".cm-editor") || e.matches(".cm-content")));
  const radios = new Set();
  let index = 0;
  for (const e of actions) {
    if (e.matches("input[type=radio]")) { if (radios.has(e.name)) continue; radios.add(e.name); }
    e.dataset.walkAction = String(index++);
  }
  const mouseOnly = [...document.querySelectorAll("[hx-get], [hx-post]")].filter(e =>
    !e.matches("a[href], button, input, select, textarea, summary, form, [tabindex]") && shown(e)
    && /(^|[\\s,])click/.test(e.getAttribute("hx-trigger") || "click"));
  // Each focus a Tab brings, recorded as it lands (its ring from the element's focus state, which
  // the code editor draws on its outer box through :focus-within): an outline of 2 px or more, or
  // a shadow.
  window.walkFocus = [];
  document.addEventListener("focusin", event => {
    const e = event.target, ring = e.closest(".cm-editor") || e, style = getComputedStyle(ring);
    const visible = (style.outlineStyle !== "none" && parseFloat(style.outlineWidth) >= 2) || style.boxShadow !== "none";
    window.walkFocus.push({action: e.dataset.walkAction ?? null, menuItem: e.dataset.walkMenuItem ?? null, visible,
      what: e.tagName.toLowerCase() + (e.dataset.testid ? `[${e.dataset.testid}]` : "") + " " + (e.textContent || e.name || "").trim().slice(0, 30)});
  }, true);
  return {count: index, mouseOnly: mouseOnly.map(e => e.outerHTML.slice(0, 120))};
}"""

# The top bar's menus (<details class="dropdown">): the navigation folded into "Menu" below 768 px,
# and the user menu.
MENUS = "header details.dropdown"

# Marks the actions of an open menu (its summary aside) in order; returns what each is.
MARK_MENU_ITEMS = """menu => [...menu.querySelectorAll(":scope > :not(summary) :is(a[href], button, input:not([type=hidden]), select, textarea, [tabindex]:not([tabindex='-1']))")]
  .filter(e => !e.disabled && e.getBoundingClientRect().width > 0)
  .map((e, index) => { e.dataset.walkMenuItem = String(index); return e.tagName.toLowerCase() + " " + e.textContent.trim(); })"""

UNREACHED = """() => [...document.querySelectorAll("[data-walk-action]")]
  .filter(e => !window.walkFocus.some(f => f.action === e.dataset.walkAction)).map(e => e.outerHTML.slice(0, 120))"""


class Walk:
    """Scans pages with one browser page; collects what is wrong, per page."""

    def __init__(self, page, portal: str):
        self.page, self.portal = page, portal
        self.problems: list[str] = []
        self.walked: list[str] = []
        self.not_pages: dict[str, str] = {}
        self.console: list[str] = []
        self.seen: set[tuple] = set()  # (who, page): the pages scanned, see page_of()
        # The page's requests still on the wire, for settle().
        self.in_flight: set = set()
        page.on("request", lambda request: self.in_flight.add(request))
        page.on("requestfinished", lambda request: self.in_flight.discard(request))
        page.on("requestfailed", lambda request: self.in_flight.discard(request))
        page.on(
            "console",
            lambda message: (
                message.type == "error"
                and self.console.append(f"{message.text} ({message.location.get('url')})")
            ),
        )
        page.on("pageerror", lambda error: self.console.append(f"uncaught: {error}"))
        # Any failed load, the portal's or not (a missing favicon, font or source map included).
        page.on(
            "response",
            lambda response: (
                response.status >= 400
                and self.console.append(f"{response.status} for {response.url}")
            ),
        )
        # (A request the browser drops as it leaves the page, a poll in flight, is not a failure.)
        page.on(
            "requestfailed",
            lambda request: (
                "ERR_ABORTED" not in (request.failure or "")
                and self.console.append(f"failed: {request.url} ({request.failure})")
            ),
        )

    def kind(self, path: str) -> tuple[str, int, str | None]:
        """What the route answers: 'page', or why it is not a page; and for a redirect to the
        portal's own page, that page's path."""
        response = self.page.request.get(self.portal + path, max_redirects=0)
        content_type = response.headers.get("content-type", "")
        if 300 <= response.status < 400:
            to = urljoin(self.portal + path, response.headers.get("location", ""))
            return (
                "a redirect",
                response.status,
                to.removeprefix(self.portal) if (to.startswith(self.portal + "/")) else None,
            )
        if not content_type.startswith("text/html"):
            return f"not HTML ({content_type.split(';')[0] or 'no body'})", response.status, None
        if not response.text().lstrip()[:15].lower().startswith("<!doctype html"):
            return "an HTML fragment (a partial)", response.status, None
        return "page", response.status, None

    def settle(self) -> None:
        """Wait until the page has loaded what it loads by itself (htmx's load-triggered parts and
        whatever they bring): no request on the wire and none of htmx's request, swap or settle
        classes, for 150 ms on end. (Playwright's networkidle waits 500 ms after the last
        request on every load; this waits on the page's own signals.) A page never quiet for
        10 s falls back to networkidle."""
        deadline, quiet_since = time.monotonic() + 10, None
        while time.monotonic() < deadline:
            busy = bool(self.in_flight) or self.page.evaluate(HTMX_BUSY)
            now = time.monotonic()
            if busy:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= 0.15:
                return
            self.page.wait_for_timeout(25)
        self.page.wait_for_load_state("networkidle")

    def scan(self, path: str, who: str, status: int = 200) -> None:
        self.seen.add((who, page_of(path)))
        self.walked.append(f"{path} ({who}{', answers ' + str(status) if status != 200 else ''})")
        for width, viewport in (("1366 px", DESKTOP), ("390 px", PHONE)):
            self.page.set_viewport_size(viewport)
            self.console.clear()
            self.page.goto(self.portal + path)
            self.settle()
            where = f"{path} as {who} at {width}"
            self.page.evaluate(AXE.read_text())
            results = self.page.evaluate("axe.run(document, {resultTypes: ['violations']})")
            for violation in results["violations"]:
                if violation["id"] not in ACCEPTED_RULES:
                    self.problems.append(
                        f"{where}: {violation['id']} ({violation['impact']}) "
                        f"{[node['target'] for node in violation['nodes']][:3]}"
                    )
            if viewport is PHONE:
                scroll, inner = self.page.evaluate(
                    "[document.documentElement.scrollWidth, window.innerWidth]"
                )
                if scroll > inner:
                    self.problems.append(
                        f"{where}: scrolls sideways ({scroll} > {inner}): "
                        f"{self.page.evaluate(WIDER_THAN_THE_VIEWPORT)}"
                    )
            else:
                self.icons(where)
            self.keyboard(where)
            self.menus(where)
            # An error page's own status is what it says, not a failure of the page.
            own = [line for line in self.console if status >= 400 and (self.portal + path) in line]
            self.problems += [
                f"{where}: console: {line}" for line in self.console if line not in own
            ]

    def icons(self, where: str) -> None:
        """The page's icons load (the browser fetches them outside the page's own requests, so a
        missing one shows in neither the page's responses nor its console)."""
        for href in self.page.evaluate(
            "[...document.querySelectorAll('link[rel~=icon]')].map(link => link.href)"
        ):
            if (status := self.page.request.get(href).status) >= 400:
                self.problems.append(f"{where}: its icon {href} answers {status}")

    def keyboard(self, where: str) -> None:
        """Tab through the page: every action is reached, each with a visible focus ring."""
        marked = self.page.evaluate(MARK_ACTIONS)
        self.problems += [f"{where}: mouse-only action: {html}" for html in marked["mouseOnly"]]
        self.page.evaluate("document.activeElement && document.activeElement.blur()")
        for _ in range(marked["count"] + 2):
            self.page.keyboard.press("Tab")
        trail = self.page.evaluate("window.walkFocus")
        self.problems += [
            f"{where}: no visible focus on {stop['what']}" for stop in trail if not stop["visible"]
        ]
        self.problems += [
            f"{where}: Tab never reaches {html}" for html in self.page.evaluate(UNREACHED)
        ]

    def menus(self, where: str) -> None:
        """Each of the top bar's menus shown at this width works from the keyboard (Tab reaching
        its summary is keyboard()'s to prove)."""
        menus = self.page.locator(MENUS)
        for n in range(menus.count()):
            menu = menus.nth(n)
            if menu.locator(":scope > summary").is_visible():
                self.problems += self.menu_by_keyboard(menu, where)
            menu.evaluate("details => { details.open = false; }")

    def menu_by_keyboard(self, menu, where: str) -> list[str]:
        """A menu works as a disclosure does: Enter on its summary opens it; Tab goes through each
        of its actions in order, each with a visible focus ring, then out of it, which closes it
        (no trap, and no open menu left over what the focus went to); Space opens it again, and
        Escape from inside it closes it and gives the focus back to its summary."""
        keys, summary = self.page.keyboard, menu.locator(":scope > summary")
        name = f"{where}: menu {summary.inner_text().strip()!r}"
        summary.focus()
        keys.press("Enter")
        if not is_open(menu):
            return [f"{name}: Enter on its summary does not open it"]
        problems = []
        items = menu.evaluate(MARK_MENU_ITEMS)
        if not items:
            problems.append(f"{name}: opens with no action in it")
        self.page.evaluate("window.walkFocus = []")
        for _ in items:
            keys.press("Tab")
        trail = self.page.evaluate("window.walkFocus")
        if [stop["menuItem"] for stop in trail] != [str(index) for index in range(len(items))]:
            problems.append(f"{name}: Tab goes to {[stop['what'] for stop in trail]}, not {items}")
        problems += [f"{name}: no visible focus on {s['what']}" for s in trail if not s["visible"]]
        keys.press("Tab")
        if menu.evaluate("details => details.contains(document.activeElement)"):
            problems.append(f"{name}: Tab does not leave it (a focus trap)")
        elif stays_open(menu):
            problems.append(f"{name}: stays open over the page once Tab has left it")
        summary.focus()
        keys.press(" ")
        if not is_open(menu):
            return problems + [f"{name}: Space on its summary does not open it"]
        keys.press("Tab")
        keys.press("Escape")
        if is_open(menu):
            problems.append(f"{name}: Escape does not close it")
        if not summary.evaluate("summary => summary === document.activeElement"):
            problems.append(f"{name}: Escape does not give the focus back to its summary")
        return problems

    def walk(self, rules, fillers: dict, who: str, only_without_parameters: bool = False) -> None:
        """Scan every route that renders a page. A route with parameters must show its page for
        some filling of them; one without may answer an error page (e.g. the sign-in callback
        without the provider's code, the operators' page to a user), which is scanned too."""
        for rule in rules:
            if only_without_parameters and rule.arguments:
                continue
            missing = sorted(set(rule.arguments) - set(fillers))
            if missing:
                self.problems.append(
                    f"{rule.rule}: no filler for {', '.join(missing)}: add a filler for it "
                    f"in make_one_of_everything (e2e/test_accessibility_walk.py)"
                )
                continue
            names = sorted(rule.arguments)
            shown = False
            for values in itertools.product(*(fillers[name] for name in names)):
                path = rule.build(dict(zip(names, values)), append_unknown=False)[1]
                if rule.endpoint in QUERY_FILLERS:
                    path += "?" + QUERY_FILLERS[rule.endpoint].format(**fillers["_query"])
                if (who, page_of(path)) in self.seen:
                    shown = True
                    continue
                kind, status, to = self.kind(path)
                if kind != "page":  # whatever its status: the API's problems, a partial's 404
                    self.not_pages[f"{rule.rule} ({who})"] = f"{kind}, {status}" + (
                        f" to {to}" if to else ""
                    )
                    shown = True
                    if (
                        to
                        and (who, page_of(to)) not in self.seen
                        and self.kind(to)[:2] == ("page", 200)
                    ):
                        self.scan(to, who)  # a page reached only through a redirect
                elif status < 400 or not names:
                    self.scan(path, who, status)
                    shown = True
            if not shown:
                self.problems.append(
                    f"{rule.rule} as {who}: answered an error for every filling of "
                    f"{', '.join(names)}: give make_one_of_everything a filler it shows a page for"
                )


def is_open(menu) -> bool:
    return menu.evaluate("details => details.open")


def stays_open(menu) -> bool:
    """Whether a menu the focus has left is still open a second later (the page closes it once the
    focus has landed, a task after the focus left)."""
    deadline = time.monotonic() + 1
    while is_open(menu) and time.monotonic() < deadline:
        menu.page.wait_for_timeout(25)
    return is_open(menu)


def page_of(path: str) -> tuple[str, tuple[str, ...]]:
    """A page as the walk counts it: its path and the names of its query arguments (the console
    with ?query= is another page than without; the sign-in page is one page whatever its ?next=)."""
    path, _, query = path.partition("?")
    return path, tuple(sorted(name for name, _ in parse_qsl(query, keep_blank_values=True)))


def share_and_sample(page, portal: str, warehouse_id: int) -> None:
    """Share the warehouse with alice's group and have the worker write TPC-H sample tables into it."""
    page.goto(portal + "/workflows/datasets")
    page.locator("#sample-warehouse").select_option(str(warehouse_id))
    page.get_by_label(re.compile("Scale factor")).fill("0.01")
    page.get_by_test_id("generate-sample").click()
    expect(page.locator(f"#sample-status-{warehouse_id}")).to_be_visible()
    page.goto(portal + f"/warehouses/{warehouse_id}")
    shares = page.get_by_test_id("warehouse-shares")
    shares.get_by_label("Share with").select_option("group")
    shares.get_by_label("Group", exact=True).fill("analytics")
    shares.get_by_label("May").select_option("read")
    shares.get_by_test_id("share-submit").click()
    expect(shares.get_by_test_id("share")).to_have_count(1)


def check_focus_after_swaps(page, portal: str, warehouse_id: int) -> None:
    """After an htmx swap asked for from the keyboard, the focus is where the person expects: a
    control whose change brought new rows keeps it (htmx gives it to its replacement, found by
    id), and a link to other rows hands it to those rows."""
    page.goto(portal + f"/warehouses/{warehouse_id}/tables/tpch.customer")
    summary = page.get_by_test_id("page-summary")
    expect(summary).to_contain_text("Rows 1–50 of 1,500")
    page.get_by_test_id("page-size").focus()
    page.keyboard.press("ArrowDown")  # 50 -> 100 rows a page
    expect(summary).to_contain_text("Rows 1–100 of 1,500")
    expect(page.get_by_test_id("page-size")).to_be_focused()
    page.get_by_test_id("next-page").focus()
    page.keyboard.press("Enter")
    expect(summary).to_contain_text("Rows 101–200 of 1,500")
    expect(page.get_by_test_id("table-page")).to_be_focused()


def make_one_of_everything(page, portal, target, sign_in) -> dict:
    """As alice, through the pages and the API the way the other browser tests do: a token, a
    warehouse shared with her group with TPC-H sample data, a running unit, a workflow with two
    versions and a schedule, one completed and one failed execution (the completed one writes a
    table) and their comparison. Returns the fillers: each path parameter's values."""
    from lakeport_client import Client

    sign_in("alice")
    page.goto(portal + "/tokens/")
    form = page.get_by_test_id("token-form")
    form.get_by_label("Name").fill(target.name("walk"))
    form.get_by_label("Scope").select_option("run")
    form.get_by_test_id("create-token").click()
    token = page.get_by_test_id("token-text").inner_text().strip()
    client = Client(portal, token)
    unit = client.create_unit(target.name("walk-unit"), cpus=2, memory_gb=3, worker_nodes=0)
    storage = target.storage("alice")
    warehouse = client.register_warehouse(
        name=target.name("walk-lake"),
        bucket=storage.bucket,
        key_prefix=f"e2e/{target.name('walk-lake')}",
        endpoint=storage.endpoint,
        region=storage.region,
        path_style_access=storage.path_style,
        access_key_id=storage.access_key_id,
        secret_access_key=storage.secret_access_key,
    )

    share_and_sample(page, portal, warehouse["id"])
    page.goto(portal + "/workflows/new")
    page.get_by_label("Name").fill(target.name("walk flow"))
    page.get_by_test_id("create-workflow").click()
    expect(page.get_by_test_id("save-workflow")).to_be_visible()
    workflow_id = int(re.search(r"/workflows/(\d+)", page.url).group(1))
    client.save_version(workflow_id, client.workflow(workflow_id)["latest_version"], [GOOD_STEP])

    deadline_state = re.compile("WARMING|RUNNING")
    page.goto(portal + f"/compute-units/{unit['id']}")
    expect(page.get_by_test_id("cu-state")).to_have_text(deadline_state, timeout=120_000)
    completed = client.start(workflow_id, unit["id"], warehouse["id"], version=1)
    client.save_version(workflow_id, 1, [BROKEN_STEP])
    failed = client.start(workflow_id, unit["id"], warehouse["id"], version=2)

    page.goto(portal + f"/schedules/workflow/{workflow_id}")
    page.get_by_label("Cron expression").fill("30 6 * * 1-5")
    page.get_by_test_id("create-schedule").click()
    expect(page.get_by_test_id("schedule")).to_have_count(1)

    for execution, expected in ((completed, "COMPLETED"), (failed, "FAILED")):
        page.goto(portal + f"/executions/{execution['id']}")
        state = page.get_by_test_id("execution-state")
        expect(state).to_have_text(re.compile("COMPLETED|FAILED|CANCELLED"), timeout=240_000)
        assert state.inner_text() == expected, page.get_by_test_id("execution-live").inner_text()
    tables = [f"{table['namespace']}.{table['name']}" for table in client.tables(warehouse["id"])]
    query = client.start_query("SELECT 1 AS n", warehouse["id"], unit["id"])
    deadline = time.monotonic() + 120
    while client.query(query["id"])["state"] not in ("completed", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"query {query['id']} did not end"
        time.sleep(0.5)
    client.close()
    return {
        "warehouse_id": [warehouse["id"]],
        "cu_id": [unit["id"]],
        "workflow_id": [workflow_id],
        "execution_id": [completed["id"], failed["id"]],
        "query_id": [query["id"]],
        "step": [GOOD_STEP["name"]],
        "number": [1, 2],
        "name": [name for name in tables if name.startswith("results.")][:1],
        "filename": ["css/app.css"],
        "_query": {"completed": completed["id"], "failed": failed["id"], "workflow": workflow_id},
    }


def test_every_page_walked_from_the_url_map_is_accessible_at_both_widths(
    page, portal, target, sign_in, sign_out, console_errors
):
    fillers = make_one_of_everything(page, portal, target, sign_in)
    rules = get_rules()
    walk = Walk(page, portal)
    before = len(console_errors)
    walk.walk(rules, fillers, "alice")
    page.set_viewport_size(DESKTOP)
    check_focus_after_swaps(page, portal, fillers["warehouse_id"][0])
    sign_out()
    sign_in("olive")
    walk.walk(rules, fillers, "an operator", only_without_parameters=True)
    page.set_viewport_size(DESKTOP)
    sign_out()
    walk.walk(rules, fillers, "signed out", only_without_parameters=True)
    print(f"walked {len(walk.walked)} pages:\n  " + "\n  ".join(walk.walked))
    print(
        "not pages:\n  "
        + "\n  ".join(f"{route}: {kind}" for route, kind in sorted(walk.not_pages.items()))
    )
    del console_errors[before:]  # the walk reports them per page, above
    assert not walk.problems, f"{len(walk.problems)} problems:\n" + "\n".join(walk.problems)
    assert any("/executions/" in walked for walked in walk.walked) and any(
        "/operators/" in w for w in walk.walked
    )


def test_focus_follows_a_swapped_message(page, portal, sign_in):
    """A form that answers in a message region takes the focus there (here: the connection test
    of an empty form says which fields to fix)."""
    sign_in("alice")
    page.goto(portal + "/warehouses/new")
    page.get_by_test_id("test-connection").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("probe-result").get_by_role("alert")).to_be_visible()
    expect(page.get_by_test_id("probe-result").get_by_role("alert")).to_be_focused()
