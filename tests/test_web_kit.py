"""The web kit (app/web.py): one redirect after an action, one shares-panel context, every
template filter in one place, and templates that compare states with the enums. Rendered by an
app that reaches no database or provider: these pages' parts need neither."""

from __future__ import annotations

import mimetypes
import re
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from urllib.parse import urlsplit

import jinja2
import pytest
from flask import render_template
from jinja2 import meta

from app import create_app, security, web
from app.charts import StepTiming, step_timeline_svg
from app.compute_units.phase import WARMING
from app.config import PROJECT_ROOT, Config
from app.states import ExecutionState, UnitState
from e2e.target import CHROMIUM, CHROMIUM_ARGS

TEMPLATES = PROJECT_ROOT / "templates"


@pytest.fixture(scope="module")
def offline_app():
    config = Config(
        SECRET_KEY="k" * 32,
        DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
        PUBLIC_URL="http://portal.test",
        OIDC_ISSUER="http://127.0.0.1:1/realms/none",
        OIDC_CLIENT_SECRET="unused",
        LAKEKEEPER_CLIENT_SECRET="unused",
        TESTING=True,
    )
    return create_app(config)


def test_an_action_redirects_htmx_by_its_header_and_a_browser_by_a_302(offline_app):
    url = "/executions/7"
    with offline_app.test_request_context("/", headers={"HX-Request": "true"}):
        answer = web.redirect_to(url)
        assert (answer.status_code, answer.headers["HX-Redirect"]) == (200, url)
    with offline_app.test_request_context("/"):
        answer = web.redirect_to(url)
        assert (answer.status_code, answer.headers["Location"]) == (302, url)
        assert "HX-Redirect" not in answer.headers


def test_no_module_but_the_web_kit_registers_a_template_filter():
    registering = re.compile(r"template_filter|jinja_env\.(filters|tests)|add_template_test")
    elsewhere = [
        str(path.relative_to(PROJECT_ROOT))
        for path in (PROJECT_ROOT / "app").rglob("*.py")
        if path.name != "web.py" and registering.search(path.read_text())
    ]
    assert elsewhere == []


def test_the_apps_own_filters_are_the_web_kits(offline_app):
    jinjas = jinja2.Environment()
    assert set(offline_app.jinja_env.filters) - set(jinjas.filters) == set(web.FILTERS)
    assert set(offline_app.jinja_env.tests) - set(jinjas.tests) == set(web.TESTS)


def test_the_shares_panel_gets_every_name_its_template_reads(offline_app, monkeypatch):
    owner = SimpleNamespace(display_name="Alice", email="alice@example.org")
    monkeypatch.setattr(web, "get_db", lambda: SimpleNamespace(get=lambda model, key: owner))
    source = (TEMPLATES / "_shares.html").read_text()
    # What an including page or Flask provides, and the template's own loop variables.
    provided = {"csrf_token", "url_for", "warehouse"}
    for thing in ("warehouse", "workflow"):
        panel = web.SharesPanel(thing, {"read": "Read"}, "read", "Gone at once.", "Yours.")
        with offline_app.test_request_context("/"):
            context = web.shares_context(
                panel, SimpleNamespace(id=4, owner_id=1), access="owner", shares=[]
            )
            read = meta.find_undeclared_variables(offline_app.jinja_env.parse(source))
            assert read - provided - set(context) == set()
            assert context["share_url"] == f"/{thing}s/4/shares"
            assert context["owner"] is owner
            assert context["share_values"] == {"kind": "group", "level": "read"}


QUOTED_STATE = re.compile(
    r"""["'](%s)["']"""
    % "|".join(sorted({*ExecutionState.__members__, *UnitState.__members__, WARMING}))
)


def test_templates_compare_states_with_the_enums_not_with_quoted_names():
    quoted = []
    for path in TEMPLATES.rglob("*.html"):
        for tag in re.findall(r"{%.*?%}|{{.*?}}", path.read_text(), re.DOTALL):
            quoted += [f"{path.relative_to(TEMPLATES)}: {tag}" for _ in QUOTED_STATE.findall(tag)]
    assert quoted == []


def _execution(state: str, reason: str = "") -> SimpleNamespace:
    now = datetime.now(timezone.utc)
    return SimpleNamespace(
        id=7, state=state, reason=reason, created_at=now - timedelta(minutes=2), run_id="r"
    )


@pytest.mark.parametrize(
    ("state", "shows_reason"),
    [
        (ExecutionState.FAILED, True),
        (ExecutionState.CANCELLED, True),
        (ExecutionState.RUNNING, False),
        (ExecutionState.COMPLETED, False),
    ],
)
def test_an_executions_reason_shows_once_it_failed_or_was_cancelled(
    offline_app, state, shows_reason
):
    with offline_app.test_request_context("/"):
        html = render_template("executions/_state.html", execution=_execution(state, "why"))
    assert ('data-testid="execution-reason"' in html) is shows_reason


@pytest.mark.parametrize(
    ("state", "polls"),
    [(UnitState.STARTING, True), (UnitState.RUNNING, True)]
    + [(state, False) for state in UnitState.FINAL],
)
def test_a_units_row_polls_until_the_unit_ended(offline_app, state, polls):
    unit = SimpleNamespace(
        id=3,
        name="u",
        kind="local",
        cpus=1,
        memory_gb=2.0,
        worker_nodes=0,
        state=state,
        reason="",
        progress_step="",
        created_at=datetime.now(timezone.utc),
    )
    phase = SimpleNamespace(name=state, elapsed_seconds=lambda: 0)
    with offline_app.test_request_context("/"):
        html = render_template("compute_units/_row.html", cu=unit, phase=phase)
    assert ("hx-get" in html) is polls
    assert ('data-testid="clear-unit"' in html) is not polls


def test_breakable_lets_a_name_wrap_after_its_underscores_and_dots_and_escapes_it():
    assert web.breakable("sales_eu.orders<b>") == "sales_<wbr>eu.<wbr>orders&lt;b&gt;"


# --- Pages in a browser: Chromium loads them as the portal answers them (its CSP included) ---

PORTAL = "http://portal.test"
STATIC = PROJECT_ROOT / "app" / "static"
DESKTOP = {"width": 1366, "height": 768}


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    # The machine's Chromium, as the browser tests use it (e2e/conftest.py).
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


def _render(app, template: str, **context) -> tuple[str, str]:
    """The page and the Content-Security-Policy the portal sends with it."""
    with app.test_request_context("/"):
        return render_template(template, **context), security.content_security_policy(app)


def show(page, html: str, csp: str, parts: dict[str, str] | None = None) -> list[str]:
    """Open `html` in `page` as the portal would answer it, its static files beside it and each
    of `parts` (path prefix → HTML) answering the partials it asks for; returns what the console
    reported as errors (a refused inline style among them)."""
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.on("pageerror", lambda error: errors.append(str(error)))

    def answer(route):
        path = urlsplit(route.request.url).path
        file = STATIC / path.removeprefix("/static/")
        if path == "/page" or any(path.startswith(prefix) for prefix in parts or {}):
            body = (
                html if path == "/page" else next(v for k, v in parts.items() if path.startswith(k))
            )
            headers = {"Content-Type": "text/html", "Content-Security-Policy": csp}
            route.fulfill(status=200, body=body, headers=headers)
        elif path.startswith("/static/") and file.is_file():
            kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
            route.fulfill(status=200, body=file.read_bytes(), headers={"Content-Type": kind})
        else:
            route.fulfill(status=204, body="")

    page.set_viewport_size(DESKTOP)
    page.route(f"{PORTAL}/**", answer)
    page.goto(f"{PORTAL}/page")
    page.wait_for_load_state("networkidle")
    return errors


def _recent_executions() -> list[SimpleNamespace]:
    """A dashboard's rows as a first user had them: long names, one failure's long reason."""
    now = datetime.now(timezone.utc)
    failure = (
        "step 'daily_revenue' failed: AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] The table or"
        " view `tpch`.`lineitems` cannot be found"
    )
    rows = []
    for number, (state, warehouse) in enumerate(
        [
            (ExecutionState.COMPLETED, "analytics_sandbox_2026"),
            (ExecutionState.FAILED, "finance_reporting_prod"),
            (ExecutionState.RUNNING, "marketing-eu-west"),
            (ExecutionState.CANCELLED, "sandbox"),
        ]
    ):
        execution = SimpleNamespace(
            id=100 + number,
            workflow_id=3,
            workflow_version=12,
            warehouse_name=warehouse,
            outputs_purged=False,
            state=state,
            reason=failure if state == ExecutionState.FAILED else "",
            created_at=now - timedelta(minutes=5),
            started_at=now - timedelta(minutes=4),
            ended_at=None if state == ExecutionState.RUNNING else now,
        )
        rows.append(
            SimpleNamespace(
                execution=execution,
                workflow_name=f"orders_daily_rollup_{number}",
                compute_unit_name="shared-analytics-unit-large",
            )
        )
    return rows


def test_the_dashboards_recent_executions_fit_their_card_at_1366_px(offline_app, page):
    overview = SimpleNamespace(
        getting_started=False,
        first_steps=[],
        live_units=[],
        warehouses=[],
        recent_executions=_recent_executions(),
    )
    html, csp = _render(
        offline_app,
        "main/dashboard.html",
        user=SimpleNamespace(display_name="Alice"),
        overview=overview,
    )
    assert show(page, html, csp) == []
    card = page.get_by_test_id("dashboard-executions")
    region = card.locator(".table-scroll")
    # The table scrolls sideways in its region only when it is wider than the card's inside.
    widths = region.evaluate("region => [region.scrollWidth, region.clientWidth]")
    assert widths[0] <= widths[1], f"the table is {widths[0]} px wide in a {widths[1]} px card"
    assert (
        region.bounding_box()["x"] + widths[1]
        <= card.bounding_box()["x"] + card.bounding_box()["width"]
    )


# --- The portal's CSP allows no inline style: none is written, and the pages log no refusal ---

INLINE_STYLE = re.compile(r"""<style\b|\sstyle\s*=|setAttribute\(\s*["']style|\.style\.cssText""")


JINJA_COMMENT = re.compile(r"{#.*?#}", re.DOTALL)


def test_no_template_or_script_of_the_portals_writes_an_inline_style():
    own = [
        *TEMPLATES.rglob("*.html"),
        *(STATIC / "js").rglob("*.js"),
        PROJECT_ROOT / "app/charts.py",
    ]
    writing = [
        str(path.relative_to(PROJECT_ROOT))
        for path in own
        if INLINE_STYLE.search(JINJA_COMMENT.sub("", path.read_text()))
    ]
    assert writing == []


def test_the_browser_check_sees_a_refused_inline_style(offline_app, page):
    html, csp = _render(offline_app, "error.html", title="T", message="M")
    assert show(page, html.replace("<h1>", '<h1 style="color: red">'), csp) != []


def _execution_page(offline_app, state: str) -> tuple[str, str, dict[str, str]]:
    """An execution's page in `state`, with the parts it loads (its live part, usage, stats)."""
    now = datetime.now(timezone.utc)
    ended = state in ExecutionState.FINAL
    execution = SimpleNamespace(
        **vars(_execution(state, "step 'daily' failed: boom" if ended else "")),
        workflow_id=3,
        workflow_version=2,
        warehouse_id=5,
        warehouse_name="sandbox",
        outputs_purged=False,
        started_at=now - timedelta(minutes=1),
        ended_at=now if ended else None,
        outputs_expired_at=None,
        stats_expired_at=None,
        cancel_requested_at=None,
    )
    progress = {
        "steps": [
            {"name": "load", "state": "done", "rows_out": 3},
            {"name": "daily", "state": "running"},
        ],
        "logs": [{"ts": now.timestamp(), "level": "INFO", "message": "loaded 3 rows"}],
        "phase": "",
    }
    live = {
        "execution": execution,
        "progress": progress,
        "outputs": {"daily": "results.e7_daily"} if state == ExecutionState.COMPLETED else {},
        "lineage": {"read": [], "wrote": []},
        "failed_step": "daily" if state == ExecutionState.FAILED else None,
        "others": [],
    }
    html, csp = _render(
        offline_app,
        "executions/detail.html",
        workflow=SimpleNamespace(id=3, name="daily"),
        cu=SimpleNamespace(name="unit"),
        pinned={},
        code_author=None,
        **live,
    )
    timings = [StepTiming("load", "done", 0.0, 1.5, 3), StepTiming("daily", "done", 1.5, 2.0, 1)]
    parts = {
        "/executions/7/stats": _render(
            offline_app,
            "executions/_stats.html",
            execution=execution,
            error=None,
            from_progress=False,
            chart=step_timeline_svg(timings),
        )[0],
        "/executions/7/usage": _render(
            offline_app,
            "usage/_execution_usage.html",
            execution=execution,
            compute=SimpleNamespace(cpu_seconds=1.0, gib_seconds=2.0, seconds=3.0),
            usage=SimpleNamespace(bytes_written=2048, files_written=1),
        )[0],
        "/executions/7": _render(offline_app, "executions/_live.html", poll_delay=1, **live)[0],
    }
    return html, csp, parts


@pytest.mark.parametrize(
    "state", [ExecutionState.RUNNING, ExecutionState.COMPLETED, ExecutionState.FAILED]
)
def test_an_executions_page_logs_no_error_under_the_portals_csp(offline_app, page, state):
    html, csp, parts = _execution_page(offline_app, state)
    assert show(page, html, csp, parts) == []
    if state == ExecutionState.RUNNING:
        page.wait_for_timeout(1500)  # its live part polls and swaps itself in
    assert page.get_by_test_id("execution-live").is_visible()
