"""A run runs the version its runner saw, and says whose code it runs with whose credentials.

bob may run alice's workflow. He opens the run form on version 1, alice saves version 2, bob
submits: nothing is queued and the form shows him v1 against v2 and each changed step's code; he
submits again having seen v2 and v2 is what is queued. The API answers 409 naming both versions;
with the latest it starts as before. A start naming no version runs the latest of one's own
workflow only. Nobody's run can name a version of another workflow. No Spark: the rows are what
the worker would run (`Execution.workflow_version_id`)."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner
from sqlmodel import Session, select

from app.executions import service as execution_service
from app.models import Execution, User, WorkflowVersion
from lakeport_client import Client, cli
from tests.factories import (
    Api,
    csrf,
    execution_count,
    make_user,
    sign_in_as,
    text,
    token_for,
    unit_row,
    warehouse_row,
    workflow_for,
)

V1_STEPS = [
    {"name": "people", "kind": "sql", "code": "SELECT 1 AS n\nFROM range(1)", "output": True},
    {"name": "retired", "kind": "sql", "code": "SELECT 'old' AS s", "output": False},
]
V2_STEPS = [
    {"name": "people", "kind": "sql", "code": "SELECT 2 AS n\nFROM range(1)", "output": True},
    {
        "name": "exfiltrate",
        "kind": "python",
        "code": "def run(spark):\n    print(spark.conf.get('catalog.token'))\n    return spark.range(1)",
        "output": False,
    },
]


@pytest.fixture
def sharing(app, db_engine):
    """alice's workflow at version 1, shared with bob to run; bob's running unit and warehouse; a
    signed-in client each."""
    alice, bob = make_user(db_engine), make_user(db_engine)
    clients = {}
    for name, user in (("alice", alice), ("bob", bob)):
        clients[name] = app.test_client()
        sign_in_as(clients[name], user)
    workflow = workflow_for(db_engine, alice, V1_STEPS)
    shared = clients["alice"].post(
        f"/workflows/{workflow.id}/shares",
        headers={"HX-Request": "true"},
        data={
            "kind": "user",
            "email": bob.email,
            "level": "run",
            "csrf_token": csrf(clients["alice"]),
        },
    )
    assert shared.status_code == 200, text(shared)[:1000]
    return alice, bob, clients, workflow, unit_row(db_engine, bob), warehouse_row(db_engine, bob)


def save_v2(app, client, alice: User, workflow) -> None:
    """alice saves version 2 through the API, as her editor or a script would."""
    saved = Api(client, token_for(app, alice)).call(
        "POST", f"/api/v1/workflows/{workflow.id}/versions", {"base_version": 1, "steps": V2_STEPS}
    )
    assert saved.status_code == 201, saved.get_json()


def bobs_executions(db_engine, bob: User) -> list[Execution]:
    with Session(db_engine) as db:
        return list(db.exec(select(Execution).where(Execution.owner_id == bob.id)))


def version_id(db_engine, workflow, number: int) -> int:
    with Session(db_engine) as db:
        return db.exec(
            select(WorkflowVersion.id).where(
                WorkflowVersion.workflow_id == workflow.id, WorkflowVersion.version == number
            )
        ).one()


def submit(client, workflow, cu, warehouse, version: str | None):
    return client.post(
        f"/executions/new?workflow_id={workflow.id}",
        data={
            **({"version": version} if version is not None else {}),
            "compute_unit_id": str(cu.id),
            "warehouse_id": str(warehouse.id),
            "csrf_token": csrf(client),
        },
    )


def hidden_version(page: str) -> str:
    return page.split('name="version" value="', 1)[1].split('"', 1)[0]


def test_a_version_saved_while_the_sharee_looked_starts_nothing_until_he_has_seen_it(
    app, client, db_engine, sharing
):
    alice, bob, clients, workflow, cu, warehouse = sharing
    form = text(clients["bob"].get(f"/executions/new?workflow_id={workflow.id}"))
    assert hidden_version(form) == "1"
    notice = form.split('data-testid="code-author"', 1)[1].split("</article>", 1)[0]
    assert (
        f"This runs code written by <strong>{alice.email}</strong> with your credentials, into "
        f"<code>{warehouse.name}</code>" in notice
    )

    save_v2(app, client, alice, workflow)
    refused = submit(clients["bob"], workflow, cu, warehouse, "1")
    page = text(refused)
    assert refused.status_code == 422 and bobs_executions(db_engine, bob) == []
    assert 'data-testid="seen-version">1<' in page and 'data-testid="latest-version">2<' in page
    changes = {
        step.split('data-step="', 1)[1].split('"', 1)[0]: step
        for step in page.split('data-testid="changed-step"')[1:]
    }
    assert {
        name: step.split('data-change="', 1)[1].split('"', 1)[0] for name, step in changes.items()
    } == {"people": "changed", "exfiltrate": "added", "retired": "removed"}
    assert (
        "<del>-SELECT 1 AS n</del>" in changes["people"]
        and "<ins>+SELECT 2 AS n</ins>" in changes["people"]
    )
    assert (
        "FROM range(1)" in changes["people"] and "<del>-FROM range(1)" not in changes["people"]
    )  # context
    assert "<ins>+    print(spark.conf.get('catalog.token'))</ins>" in changes["exfiltrate"]
    assert "<del>-SELECT 'old' AS s</del>" in changes["retired"]
    assert (
        hidden_version(page) == "2" and "Run version 2" in page
    )  # the form now carries what he was shown
    assert (
        f'<option value="{warehouse.id}" selected' in page
        and f'<option value="{cu.id}" selected' in page
    )

    again = submit(clients["bob"], workflow, cu, warehouse, hidden_version(page))
    assert again.status_code == 302, text(again)[:1500]
    (execution,) = bobs_executions(db_engine, bob)
    assert (execution.workflow_version, execution.workflow_version_id) == (
        2,
        version_id(db_engine, workflow, 2),
    )
    shown = text(clients["bob"].get(f"/executions/{execution.id}"))
    assert (
        f"This runs code written by <strong>{alice.email}</strong> with your credentials, into "
        f"<code>{warehouse.name}</code>" in shown
    )


def test_the_owner_sees_no_author_notice_and_may_name_no_version_a_sharee_may_not(
    app, client, db_engine, sharing
):
    alice, bob, clients, workflow, cu, warehouse = sharing
    refused = submit(clients["bob"], workflow, cu, warehouse, None)
    assert refused.status_code == 422 and "named no version" in text(refused)
    assert hidden_version(text(refused)) == "1" and bobs_executions(db_engine, bob) == []
    unknown = submit(clients["bob"], workflow, cu, warehouse, "99")
    assert unknown.status_code == 422 and "Version 99 is not a version of this workflow" in text(
        unknown
    )
    assert bobs_executions(db_engine, bob) == []

    own_cu, own_warehouse = unit_row(db_engine, alice), warehouse_row(db_engine, alice)
    assert 'data-testid="code-author"' not in text(
        clients["alice"].get(f"/executions/new?workflow_id={workflow.id}")
    )
    started = submit(
        clients["alice"], workflow, own_cu, own_warehouse, None
    )  # her own code: the latest
    assert started.status_code == 302 and execution_count(db_engine, alice) == 1
    assert 'data-testid="code-author"' not in text(
        clients["alice"].get(started.headers["Location"])
    )
    save_v2(app, client, alice, workflow)
    stale = submit(
        clients["alice"], workflow, own_cu, own_warehouse, "1"
    )  # her own stale form is refused too
    assert stale.status_code == 422 and execution_count(db_engine, alice) == 1


def test_the_api_answers_409_with_both_versions_and_starts_the_one_seen(
    app, client, db_engine, sharing
):
    alice, bob, clients, workflow, cu, warehouse = sharing
    api = Api(client, token_for(app, bob))
    body = {"workflow_id": workflow.id, "compute_unit_id": cu.id, "warehouse_id": warehouse.id}
    save_v2(app, client, alice, workflow)
    stale = api.call("POST", "/api/v1/executions", {**body, "version": 1})
    assert stale.status_code == 409 and stale.content_type == "application/problem+json"
    problem = stale.get_json()
    assert (problem["seen_version"], problem["latest_version"], problem["field"]) == (
        1,
        2,
        "version",
    )
    unnamed = api.call("POST", "/api/v1/executions", body).get_json()
    assert (unnamed["status"], unnamed["seen_version"], unnamed["latest_version"]) == (409, None, 2)
    assert bobs_executions(db_engine, bob) == []
    # Before he names v2, bob reads the code it runs; someone it is not shared with gets 404.
    latest = api.call("GET", f"/api/v1/workflows/{workflow.id}")
    assert latest.status_code == 200 and latest.get_json()["latest_version"] == 2
    assert [step["name"] for step in latest.get_json()["steps"]] == ["people", "exfiltrate"]
    carol = Api(client, token_for(app, make_user(db_engine)))
    assert carol.call("GET", f"/api/v1/workflows/{workflow.id}").status_code == 404

    started = api.call("POST", "/api/v1/executions", {**body, "version": 2})
    assert started.status_code == 201, started.get_json()
    answer = started.get_json()
    assert (answer["workflow_version"], answer["code_author"], answer["state"]) == (
        2,
        alice.email,
        "QUEUED",
    )
    (execution,) = bobs_executions(db_engine, bob)
    assert execution.workflow_version_id == version_id(db_engine, workflow, 2)
    assert (
        api.call("GET", f"/api/v1/executions/{execution.id}").get_json()["code_author"]
        == alice.email
    )

    own = Api(client, token_for(app, alice))
    mine = own.call(
        "POST",
        "/api/v1/executions",
        {
            "workflow_id": workflow.id,
            "compute_unit_id": unit_row(db_engine, alice).id,
            "warehouse_id": warehouse_row(db_engine, alice).id,
        },
    )  # no version: her latest
    assert mine.status_code == 201 and (
        mine.get_json()["workflow_version"],
        mine.get_json()["code_author"],
    ) == (2, None)


def test_no_start_runs_a_version_of_another_workflow(app, db_engine, sharing):
    """The attack: bob may run alice's shared workflow; he names it, with the version row of
    another of her workflows (one not shared with him), hoping the worker runs that row."""
    alice, bob, _clients, workflow, cu, warehouse = sharing
    private = workflow_for(db_engine, alice, V2_STEPS)
    with app.test_request_context(), Session(db_engine) as db:
        other = db.get(WorkflowVersion, version_id(db_engine, private, 1))
        with pytest.raises(execution_service.RunRefused) as refused:
            execution_service.start(db.get(User, bob.id), workflow, other, cu, warehouse)
    assert refused.value.field == "version" and bobs_executions(db_engine, bob) == []


class Recording(httpx.BaseTransport):
    """The portal in this process, with the bodies of the calls the client made."""

    def __init__(self, app) -> None:
        self.inner, self.bodies = httpx.WSGITransport(app=app), []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.bodies.append(json.loads(request.read() or b"null"))
        response = self.inner.handle_request(request)
        return httpx.Response(
            response.status_code, headers=response.headers, content=response.read()
        )


def test_the_command_line_sends_the_version_it_listed_and_reports_a_newer_one(
    app, client, db_engine, monkeypatch
):
    owner = make_user(db_engine)
    workflow, warehouse, cu = (
        workflow_for(db_engine, owner, V1_STEPS),
        warehouse_row(db_engine, owner),
        unit_row(db_engine, owner),
    )
    token, transport = token_for(app, owner), Recording(app)
    monkeypatch.setattr(
        cli, "make_client", lambda: Client("http://portal.test", token, transport=transport)
    )
    started = CliRunner().invoke(
        cli.main, ["run", workflow.name, "--unit", cu.name, "--warehouse", warehouse.name]
    )
    assert started.exit_code == 0 and "version 1" in started.output, started.output
    assert transport.bodies[-1]["version"] == 1
    save_v2(app, client, owner, workflow)
    stale = CliRunner().invoke(
        cli.main,
        ["run", workflow.name, "--unit", cu.name, "--warehouse", warehouse.name, "--version", "1"],
    )
    assert (
        stale.exit_code == 1 and "latest version is 2, not the version 1 you saw" in stale.output
    ), stale.output
    assert execution_count(db_engine, owner) == 1
