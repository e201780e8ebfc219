"""The web kit (app/web.py): one redirect after an action, one shares-panel context, every
template filter in one place, and templates that compare states with the enums. Rendered by an
app that reaches no database or provider: these pages' parts need neither."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import jinja2
import pytest
from flask import render_template
from jinja2 import meta

from app import create_app, web
from app.config import PROJECT_ROOT, Config
from app.states import ExecutionState, UnitState

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
    r"""["'](%s)["']""" % "|".join(sorted({*ExecutionState.__members__, *UnitState.__members__}))
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
