"""Workflows through the portal: versions, the step editor, the checks before a run, ownership."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from sqlmodel import Session, select

from app.models import Execution, User, Workflow, WorkflowVersion
from app.workflows.steps import MAX_STEPS, Step, check_python, check_sql

TWO_STEPS = [
    {"name": "orders", "kind": "sql", "code": "SELECT * FROM datasets.orders"},
    {
        "name": "big",
        "kind": "python",
        "code": "def run(spark, orders):\n    return orders.where('amount > 10')",
        "output": True,
    },
]


def create_workflow(client, auth, name: str = "sales", description: str = "") -> int:
    response = client.post(
        "/workflows/",
        data={"name": name, "description": description, "csrf_token": auth.csrf_token()},
    )
    assert response.status_code == 302, response.get_data(as_text=True)
    match = re.fullmatch(r"/workflows/(\d+)/edit", response.headers["Location"])
    assert match, response.headers["Location"]
    return int(match.group(1))


def steps_form(steps: list[dict], base_version: int = 0) -> dict:
    form = {"base_version": str(base_version)}
    for index, step in enumerate(steps):
        form.update(
            {
                f"steps-{index}-name": step["name"],
                f"steps-{index}-kind": step["kind"],
                f"steps-{index}-code": step["code"],
            }
        )
        if step.get("output"):
            form[f"steps-{index}-output"] = "on"
    return form


def htmx(auth) -> dict:
    return {"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"}


def save(client, auth, workflow_id: int, steps: list[dict], base_version: int):
    return client.post(
        f"/workflows/{workflow_id}/edit", data=steps_form(steps, base_version), headers=htmx(auth)
    )


def editor_steps(page: str) -> list[tuple[str, str]]:
    """(name, code) of each step in a rendered editor, in order."""
    names = re.findall(r'name="steps-(\d+)-name" value="([^"]*)"', page)
    codes = dict(re.findall(r'name="steps-(\d+)-code"[^>]*>\n(.*?)</textarea>', page, re.S))
    return [(name, codes[index]) for index, name in names]


def focused(page: str) -> list[str]:
    """What an editor answer focuses: each autofocused control, as `<step index>:<test id>` (the
    name field as `<index>:name`), or its test id outside the steps."""
    found = []
    for tag in re.findall(r"<(?:input|button)\b[^>]*\bautofocus\b[^>]*>", page):
        field = re.search(r'name="steps-(\d+)-name"', tag)
        if field:
            found.append(f"{field.group(1)}:name")
            continue
        test_id = re.search(r'data-testid="([^"]+)"', tag).group(1)
        url = re.search(r"/editor/(\d+)/", tag)
        found.append(f"{url.group(1)}:{test_id}" if url else test_id)
    return found


def news(page: str) -> str:
    """What the editor's live region is told, out of band."""
    return re.search(r'<p id="editor-news" hx-swap-oob="innerHTML">(.*?)</p>', page, re.S).group(1)


def step_errors(page: str, index: int) -> str:
    match = re.search(rf'<div id="step-{index}-errors".*?</div>', page, re.S)
    assert match, f"no error region for step {index}"
    return match.group(0)


def workflow_row(db_engine, workflow_id: int) -> Workflow:
    with Session(db_engine) as db:
        return db.get(Workflow, workflow_id)


def versions(db_engine, workflow_id: int) -> dict[int, list[dict]]:
    with Session(db_engine) as db:
        rows = db.exec(
            select(WorkflowVersion).where(WorkflowVersion.workflow_id == workflow_id)
        ).all()
        return {row.version: json.loads(row.steps) for row in rows}


def test_every_save_is_a_new_version_and_old_versions_stay_readable(client, auth, db_engine):
    auth.login("alice")
    workflow_id = create_workflow(client, auth, "versioned sales", "orders over 10")
    editor = client.get(f"/workflows/{workflow_id}/edit").get_data(as_text=True)
    assert editor_steps(editor) == [("step_1", "SELECT 1 AS one")]  # a starter step to edit

    first = save(client, auth, workflow_id, TWO_STEPS, base_version=0)
    assert first.status_code == 200 and first.headers["HX-Redirect"] == f"/workflows/{workflow_id}"
    changed = [
        TWO_STEPS[0],
        {**TWO_STEPS[1], "code": "def run(spark, orders):\n    return orders.limit(5)"},
    ]
    second = save(client, auth, workflow_id, changed, base_version=1)
    assert second.status_code == 200

    assert workflow_row(db_engine, workflow_id).latest_version == 2
    stored = versions(db_engine, workflow_id)
    assert stored[1] == [{**step, "output": bool(step.get("output"))} for step in TWO_STEPS]
    assert stored[2][1]["code"] == "def run(spark, orders):\n    return orders.limit(5)"

    old_page = client.get(f"/workflows/{workflow_id}/versions/1").get_data(as_text=True)
    assert "amount &gt; 10" in old_page and "an older version; the latest is 2" in old_page
    latest_page = client.get(f"/workflows/{workflow_id}").get_data(as_text=True)
    assert "orders.limit(5)" in latest_page and "amount &gt; 10" not in latest_page
    partial = client.get(f"/workflows/{workflow_id}/versions/1", headers={"HX-Request": "true"})
    assert 'id="workflow-version"' in partial.get_data(
        as_text=True
    ) and "<html" not in partial.get_data(as_text=True)
    assert client.get(f"/workflows/{workflow_id}/versions/3").status_code == 404

    listing = client.get("/workflows/").get_data(as_text=True)
    assert "versioned sales" in listing and "<td>2</td>" in listing
    # The editor opens on the latest version.
    assert editor_steps(client.get(f"/workflows/{workflow_id}/edit").get_data(as_text=True))[1][
        1
    ].endswith("orders.limit(5)")


def test_steps_of_a_version_for_executions(app, client, auth, db_engine):
    auth.login("alice")
    workflow_id = create_workflow(client, auth, "for executions")
    save(client, auth, workflow_id, TWO_STEPS, base_version=0)
    with app.app_context():
        from app.db import get_db
        from app.workflows import service

        workflow = get_db().get(Workflow, workflow_id)
        steps = service.steps_of(service.latest_version(workflow))
    assert steps == [
        Step("orders", "sql", "SELECT * FROM datasets.orders", False),
        Step("big", "python", TWO_STEPS[1]["code"], True),
    ]
    assert steps[1].to_dict() == {
        "name": "big",
        "kind": "python",
        "code": TWO_STEPS[1]["code"],
        "output": True,
    }


def test_a_save_from_a_stale_editor_is_refused_once(client, auth, db_engine):
    auth.login("alice")
    workflow_id = create_workflow(client, auth, "two tabs")
    save(client, auth, workflow_id, TWO_STEPS, base_version=0)
    other_tab = [{"name": "only", "kind": "sql", "code": "SELECT 2 AS two"}]
    stale = save(client, auth, workflow_id, other_tab, base_version=0)
    page = stale.get_data(as_text=True)
    assert stale.status_code == 422 and "saved as version 1 after you opened the editor" in page
    assert 'name="base_version" value="1"' in page and editor_steps(page) == [
        ("only", "SELECT 2 AS two")
    ]
    assert save(client, auth, workflow_id, other_tab, base_version=1).status_code == 200
    assert workflow_row(db_engine, workflow_id).latest_version == 2


def test_saving_unchanged_steps_makes_no_version(client, auth, db_engine):
    auth.login("alice")
    workflow_id = create_workflow(client, auth, "unchanged")
    save(client, auth, workflow_id, TWO_STEPS, base_version=0)
    again = save(client, auth, workflow_id, TWO_STEPS, base_version=1)
    assert again.status_code == 422 and "Nothing changed since version 1" in again.get_data(
        as_text=True
    )
    assert workflow_row(db_engine, workflow_id).latest_version == 1


def test_editor_adds_reorders_and_deletes_steps(client, auth, db_engine):
    auth.login("alice")
    workflow_id = create_workflow(client, auth, "editing")
    base = f"/workflows/{workflow_id}/editor"
    steps = [{"name": "orders", "kind": "sql", "code": "SELECT * FROM datasets.orders"}]

    page = client.post(f"{base}/add/sql", data=steps_form(steps), headers=htmx(auth)).get_data(
        as_text=True
    )
    assert editor_steps(page) == [
        ("orders", "SELECT * FROM datasets.orders"),
        ("step_2", "SELECT * FROM orders"),
    ]
    assert "<html" not in page  # the editor partial only
    steps.append({"name": "step_2", "kind": "sql", "code": "SELECT * FROM orders"})
    page = client.post(f"{base}/add/python", data=steps_form(steps), headers=htmx(auth)).get_data(
        as_text=True
    )
    assert editor_steps(page)[2] == ("step_3", "def run(spark, step_2):\n    return step_2")
    steps.append(
        {"name": "step_3", "kind": "python", "code": "def run(spark, step_2):\n    return step_2"}
    )

    page = client.post(f"{base}/2/up", data=steps_form(steps), headers=htmx(auth)).get_data(
        as_text=True
    )
    assert [name for name, _ in editor_steps(page)] == ["orders", "step_3", "step_2"]
    # The moved step keeps the focus on the button pressed, and the live region says where it went.
    assert focused(page) == ["1:move-up"]
    assert news(page) == "Moved step_3 to position 2 of 3."
    assert "“step_2” is a later step" in step_errors(page, 1)  # the move broke what step_3 reads
    page = client.post(f"{base}/0/down", data=steps_form(steps), headers=htmx(auth)).get_data(
        as_text=True
    )
    assert [name for name, _ in editor_steps(page)] == ["step_2", "orders", "step_3"]
    assert focused(page) == ["1:move-down"]
    page = client.post(f"{base}/0/up", data=steps_form(steps), headers=htmx(auth)).get_data(
        as_text=True
    )
    assert [name for name, _ in editor_steps(page)] == [
        "orders",
        "step_2",
        "step_3",
    ]  # the first stays first
    assert focused(page) == [] and news(page) == ""  # nothing moved, nothing said
    page = client.post(f"{base}/1/remove", data=steps_form(steps), headers=htmx(auth)).get_data(
        as_text=True
    )
    assert [name for name, _ in editor_steps(page)] == ["orders", "step_3"]
    # The step that took the deleted one's place has the focus.
    assert focused(page) == ["1:name"] and news(page) == "Deleted step_2."
    for index, action, moved_to, button in ((1, "down", 3, "move-up"), (1, "up", 1, "move-down")):
        # At an end the button pressed is disabled: the focus goes to the other one.
        page = client.post(
            f"{base}/{index}/{action}", data=steps_form(steps), headers=htmx(auth)
        ).get_data(as_text=True)
        assert focused(page) == [f"{moved_to - 1}:{button}"], action
    page = client.post(f"{base}/2/remove", data=steps_form(steps), headers=htmx(auth)).get_data(
        as_text=True
    )
    assert focused(page) == ["1:name"]  # the last deleted: the one before it
    page = client.post(f"{base}/0/remove", data=steps_form(steps[:1]), headers=htmx(auth)).get_data(
        as_text=True
    )
    assert focused(page) == ["add-sql-step"]
    assert news(page) == "Deleted orders; the workflow has no steps."
    # Nothing is saved until Save.
    assert workflow_row(db_engine, workflow_id).latest_version == 0

    # Outputs survive an edit, and the editor works without JavaScript too (full page).
    steps[0]["output"] = True
    full = client.post(
        f"{base}/add/sql", data={**steps_form(steps), "csrf_token": auth.csrf_token()}
    )
    assert "<html" in full.get_data(as_text=True)
    assert re.search(r'name="steps-0-output" checked', full.get_data(as_text=True))


def test_the_editor_stops_adding_at_the_step_limit(client, auth):
    auth.login("alice")
    workflow_id = create_workflow(client, auth, "many steps")
    full = [{"name": f"s{i}", "kind": "sql", "code": "SELECT 1 AS one"} for i in range(MAX_STEPS)]
    page = client.post(
        f"/workflows/{workflow_id}/editor/add/sql", data=steps_form(full), headers=htmx(auth)
    )
    assert len(editor_steps(page.get_data(as_text=True))) == MAX_STEPS
    assert f"at most {MAX_STEPS} steps" in page.get_data(as_text=True)
    too_many = save(
        client,
        auth,
        workflow_id,
        full + [{"name": "one_more", "kind": "sql", "code": "SELECT 1"}],
        0,
    )
    assert too_many.status_code == 422 and f"at most {MAX_STEPS} steps" in too_many.get_data(
        as_text=True
    )
    none = save(client, auth, workflow_id, [], 0)
    assert none.status_code == 422 and "at least one step" in none.get_data(as_text=True)


def test_syntax_errors_are_shown_per_step_and_nothing_is_saved(client, auth, db_engine):
    auth.login("alice")
    workflow_id = create_workflow(client, auth, "broken")
    broken = [
        {"name": "orders", "kind": "sql", "code": "SELECT (amount FROM datasets.orders"},
        {"name": "big", "kind": "python", "code": "def run(spark, later):\n    return later"},
        {"name": "later", "kind": "python", "code": "def run(spark:\n    pass"},
        {"name": "orders", "kind": "sql", "code": "SELECT 1; SELECT 2"},
        {"name": "Bad-Name", "kind": "sql", "code": "DROP TABLE datasets.orders"},
    ]
    response = save(client, auth, workflow_id, broken, base_version=0)
    page = response.get_data(as_text=True)
    assert response.status_code == 422 and "Fix the steps marked below" in page
    assert "this “(” is not closed" in step_errors(page, 0)
    assert "“later” is a later step" in step_errors(page, 1)
    assert "Line 1:" in step_errors(page, 2)
    assert "already called “orders”" in step_errors(
        page, 3
    ) and "one query per step" in step_errors(page, 3)
    assert "lowercase letters" in step_errors(
        page, 4
    ) and "start it with SELECT or WITH" in step_errors(page, 4)
    assert workflow_row(db_engine, workflow_id).latest_version == 0

    # The same checks inline, one step at a time, as the user types.
    inline = client.post(
        f"/workflows/{workflow_id}/editor/1/check", data=steps_form(broken), headers=htmx(auth)
    )
    assert inline.status_code == 200
    assert 'id="step-1-errors"' in inline.get_data(
        as_text=True
    ) and "later step" in inline.get_data(as_text=True)
    fixed = [broken[0] | {"code": "SELECT amount FROM datasets.orders"}]
    clean = client.post(
        f"/workflows/{workflow_id}/editor/0/check", data=steps_form(fixed), headers=htmx(auth)
    )
    assert 'role="alert"' not in clean.get_data(as_text=True)
    assert (
        client.post(
            f"/workflows/{workflow_id}/editor/5/check", data=steps_form(fixed), headers=htmx(auth)
        ).status_code
        == 404
    )


@pytest.mark.parametrize(
    "code, problem",
    [
        ("SELECT * FROM orders", None),
        ("WITH big AS (SELECT * FROM orders WHERE amount > 10) SELECT * FROM big", None),
        (
            "select o.id, 'a (quoted' AS x, `odd``name` FROM orders o JOIN datasets.customers c ON o.c = c.id;",
            None,
        ),
        ("-- a comment ( with ' quotes\nSELECT 1 /* and ( here */", None),
        ("SELECT 'it\\'s'", None),
        ("", "Write a query"),
        ("SELECT 'open", "string opened with ' is not closed"),
        ("SELECT `open", "identifier opened with ` is not closed"),
        ("SELECT 1 /* open", "comment is not closed"),
        ("SELECT 1)", "has no matching"),
        ("SELECT 1;\nSELECT 2", "Line 1: one query per step"),
        ("INSERT INTO t VALUES (1)", "start it with SELECT or WITH"),
        ("SELECT * FROM report", "“report” is a later step"),
        ("SELECT * FROM me", "reads itself"),
        ("WITH report AS (SELECT 1) SELECT * FROM report", None),  # a CTE shadows the later step
        ("SELECT * FROM datasets.report", None),  # a table, not the step
        # Spark's grammar (sqlglot, Spark dialect), pointing at line and column.
        (
            "SELECT id, TRANSFORM(tags, t -> upper(t)) FROM orders LATERAL VIEW explode(tags) x AS tag",
            None,
        ),
        ("SELECT amount\nFROM orders\nWHERE", "Line 3, column 5: WHERE is incomplete"),
        ("SELECT *\nFROM orders\nWHERE amount = = 1", "Line 3, column 16: = is incomplete"),
        ("SELECT a b c FROM orders", "Line 1, column 12: Invalid expression / Unexpected token"),
        # An empty item in a list, which sqlglot lets through and Spark refuses.
        ("SELECT region,, amount FROM orders", "Line 1, column 14: nothing between “,” and “,”"),
        ("SELECT id,\n  amount,\nFROM orders", "Line 2, column 9: nothing between “,” and “FROM”"),
        ("SELECT coalesce(a, ) FROM orders", "nothing between “,” and “)”"),
        ("SELECT `a,`, ',' AS comma FROM orders", None),
    ],
)
def test_sql_checks(code, problem):
    errors = check_sql(code, "me", earlier=["orders"], later=["report"])
    if problem is None:
        assert errors == []
    else:
        assert any(problem in error for error in errors), errors


@pytest.mark.parametrize(
    "code, problem",
    [
        ("def run(spark, orders):\n    return orders", None),
        ("import math\n\ndef run(spark, *, orders):\n    print(math.pi)\n    return orders", None),
        ("def run(spark):\n    return spark.range(3)", None),
        ("def run(spark, orders)\n    return orders", "Line 1:"),
        ("return 1", "Line 1:"),
        ("x = 1", "Define a top-level function run(spark, …)"),
        (
            "class C:\n    def run(self, spark):\n        pass",
            "Define a top-level function run(spark, …)",
        ),
        ("async def run(spark):\n    pass", "not async def"),
        ("def run(session, orders):\n    return orders", "first parameter must be spark"),
        ("def run(spark, **steps):\n    return steps['orders']", "instead of *args or **kwargs"),
        ("def run(spark, report):\n    return report", "“report” is a later step"),
        ("def run(spark, me):\n    return me", "reads itself"),
        (
            "def run(spark, customers):\n    return customers",
            "no step above has that name (steps above: orders)",
        ),
    ],
)
def test_python_checks(code, problem):
    errors = check_python(code, "me", earlier=["orders"], later=["report"])
    if problem is None:
        assert errors == []
    else:
        assert any(problem in error for error in errors), errors


def test_create_validates_name_and_uniqueness(client, auth):
    auth.login("alice")
    token = auth.csrf_token()
    bad = client.post("/workflows/", data={"name": "", "description": "", "csrf_token": token})
    assert bad.status_code == 422 and "Give the workflow a name" in bad.get_data(as_text=True)
    bad = client.post("/workflows/", data={"name": "<script>", "csrf_token": token})
    assert bad.status_code == 422 and "letters, digits" in bad.get_data(as_text=True)
    create_workflow(client, auth, "unique name")
    again = client.post("/workflows/", data={"name": "unique name", "csrf_token": token})
    assert again.status_code == 422 and "already have a workflow with this name" in again.get_data(
        as_text=True
    )


def test_delete_removes_the_workflow_unless_it_has_run(client, auth, db_engine):
    auth.login("alice")
    disposable = create_workflow(client, auth, "disposable")
    save(client, auth, disposable, TWO_STEPS, 0)
    deleted = client.post(f"/workflows/{disposable}/delete", headers=htmx(auth))
    assert deleted.status_code == 200 and deleted.headers["HX-Redirect"] == "/workflows/"
    assert workflow_row(db_engine, disposable) is None and versions(db_engine, disposable) == {}

    has_run = create_workflow(client, auth, "has run")
    save(client, auth, has_run, TWO_STEPS, 0)
    with Session(db_engine) as db:
        version = db.exec(
            select(WorkflowVersion).where(WorkflowVersion.workflow_id == has_run)
        ).one()
        owner_id = db.get(Workflow, has_run).owner_id
        db.add(
            Execution(
                owner_id=owner_id,
                workflow_id=has_run,
                workflow_version_id=version.id,
                workflow_version=1,
                warehouse_name="somewhere",
                state="COMPLETED",
            )
        )
        db.commit()
    refused = client.post(f"/workflows/{has_run}/delete", headers=htmx(auth))
    assert refused.headers["HX-Redirect"] == f"/workflows/{has_run}"
    assert "has 1 execution" in client.get(f"/workflows/{has_run}").get_data(as_text=True)
    assert workflow_row(db_engine, has_run) is not None


def test_run_link_and_execution_history_appear_with_the_executions_feature(app, client, auth):
    # Stand-ins where the executions feature is not installed, so both branches render.
    for endpoint in ("executions.new", "executions.for_workflow"):
        if endpoint not in app.view_functions:
            app.add_url_rule(
                f"/stand-in/{endpoint}/<int:workflow_id>",
                endpoint=endpoint,
                view_func=lambda workflow_id: "",
            )
    auth.login("alice")
    workflow_id = create_workflow(client, auth, "runnable")
    unsaved = client.get(f"/workflows/{workflow_id}").get_data(as_text=True)
    assert 'data-testid="run-workflow"' not in unsaved  # nothing to run yet
    save(client, auth, workflow_id, TWO_STEPS, 0)
    page = client.get(f"/workflows/{workflow_id}").get_data(as_text=True)
    with app.test_request_context():
        from flask import url_for

        run_url = url_for("executions.new", workflow_id=workflow_id)
        history_url = url_for("executions.for_workflow", workflow_id=workflow_id)
    assert f'href="{run_url}" data-testid="run-workflow"' in page
    assert re.search(rf'<div id="workflow-executions" hx-get="{re.escape(history_url)}"', page)
    assert 'href="/workflows/"' in page  # the navigation entry


def test_bob_gets_404_on_every_route_of_alices_workflow(client, auth, db_engine):
    auth.login("alice")
    workflow_id = create_workflow(client, auth, "alices pipeline")
    save(client, auth, workflow_id, TWO_STEPS, 0)
    auth.logout()
    auth.login("bob")
    bobs_workflows_before = bobs_workflow_ids(
        db_engine
    )  # the suite's other tests may have made some
    token = {"X-CSRFToken": auth.csrf_token()}
    form = steps_form([{"name": "stolen", "kind": "sql", "code": "SELECT 1"}], base_version=1)
    routes = [
        ("GET", ""),
        ("GET", "/versions/1"),
        ("GET", "/edit"),
        ("POST", "/edit"),
        ("POST", "/delete"),
        ("POST", "/editor/add/sql"),
        ("POST", "/editor/0/up"),
        ("POST", "/editor/0/down"),
        ("POST", "/editor/0/remove"),
        ("POST", "/editor/0/check"),
        ("POST", "/shares"),
        ("POST", "/shares/1/revoke"),
        ("POST", "/copy"),
    ]
    for method, suffix in routes:
        for headers in (token, {**token, "HX-Request": "true"}):
            response = client.open(
                f"/workflows/{workflow_id}{suffix}", method=method, headers=headers, data=form
            )
            assert response.status_code == 404, (method, suffix, response.status_code)
    assert "alices pipeline" not in client.get("/workflows/").get_data(as_text=True)
    assert workflow_row(db_engine, workflow_id).latest_version == 1
    assert bobs_workflow_ids(db_engine) == bobs_workflows_before  # no copy was made


def bobs_workflow_ids(db_engine) -> set[int]:
    with Session(db_engine) as db:
        # Every user row of the provider's bob: a test of another provider (another issuer)
        # may have signed a bob in too.
        bobs = select(User.id).where(User.email == "bob@example.test")
        return set(db.exec(select(Workflow.id).where(Workflow.owner_id.in_(bobs))).all())


def test_the_editor_page_allows_its_code_editor_style_by_a_nonce_of_its_own(client, auth):
    auth.login("alice")
    workflow_id = create_workflow(client, auth, name=f"nonce-{uuid.uuid4().hex[:6]}")
    nonces = []
    for _ in range(2):
        page = client.get(f"/workflows/{workflow_id}/edit")
        policy = page.headers["Content-Security-Policy"]
        nonce = re.search(r"style-src 'self' 'nonce-([\w-]+)'", policy).group(1)
        html = page.get_data(as_text=True)
        # The editor's script is given the nonce; scripts stay 'self' only.
        assert f'src="/static/vendor/editor.js" defer data-style-nonce="{nonce}"' in html
        assert "script-src 'self';" in policy
        nonces.append(nonce)
    assert nonces[0] != nonces[1]  # one per response
    # Pages without the code editor allow no inline style at all.
    assert (
        "style-src 'self';"
        in client.get(f"/workflows/{workflow_id}").headers["Content-Security-Policy"]
    )
