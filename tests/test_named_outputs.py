"""Named outputs: a step publishes its rows to a table of the run's warehouse, and a run
publishes all of its tables in one catalog commit (compute/run/publish.py).

The validation tests are light (the editor, the API, the unit's own check of the spec); the
tests that run a pipeline (atomicity, concurrency, the schema rule) need Spark and run under
the heavy lock."""

from __future__ import annotations

import json
import re

import pytest
from sqlmodel import Session, select

from app.models import WorkflowVersion
from app.workflows.steps import Step, check_steps, loads
from compute.contract import ExecutionSpec, InvalidSpec, Publish
from tests.factories import Api, csrf, make_user, sign_in_as, token_for, workflow_for

SELECT_ONE = "SELECT 1 AS id"


def step(name: str, table: str | None = None, mode: str = "append", **fields) -> Step:
    return Step(
        name=name,
        kind="sql",
        code=SELECT_ONE,
        publish=Publish(table, mode) if table is not None else None,
        **fields,
    )


def publish_errors(steps: list[Step]) -> dict[int, list[str]]:
    return {
        index: fields["publish"]
        for index, fields in check_steps(steps).steps.items()
        if "publish" in fields
    }


def test_a_publish_target_is_namespace_dot_table_outside_the_runs_own_namespaces():
    assert publish_errors([step("daily", "sales.daily")]) == {}
    assert publish_errors([step("daily", "sales.daily", "overwrite", output=True)]) == {}
    for table in ("daily", "Sales.Daily", "sales.daily.x", "sales.", "1sales.daily", "sa les.d"):
        (message,) = publish_errors([step("daily", table)])[0]
        assert "namespace.table" in message, table
    for namespace in ("results", "runtime_stats", "console_logs"):
        (message,) = publish_errors([step("daily", f"{namespace}.daily")])[0]
        assert f"“{namespace}” holds each run's own tables" in message
    (message,) = publish_errors([step("daily", "sales.daily", "upsert")])[0]
    assert message == "The mode is one of: append, overwrite."


def test_two_steps_may_not_publish_to_one_table():
    errors = publish_errors([step("first", "sales.daily"), step("second", "sales.daily")])
    assert errors == {1: ["Step “first” already publishes to sales.daily: one step per table."]}


def test_a_step_without_a_publish_target_is_stored_as_before():
    plain = step("kept", output=True)
    assert plain.to_dict() == {"name": "kept", "kind": "sql", "code": SELECT_ONE, "output": True}
    published = step("daily", "sales.daily", "overwrite")
    assert Step.from_dict(published.to_dict()) == published
    assert published.to_dict()["publish"] == {"table": "sales.daily", "mode": "overwrite"}


def execution_spec(steps: list[dict]) -> dict:
    return {
        "execution_id": 7,
        "workflow": {"id": 1},
        "user": {"id": 1},
        "compute_unit": {"id": 1},
        "warehouse": {"lakekeeper_id": "w"},
        "catalog": {"uri": "http://catalog.invalid", "warehouse": "w", "token": "t"},
        "steps": steps,
    }


def test_the_unit_checks_the_publish_targets_again():
    good = {"name": "daily", "kind": "sql", "code": SELECT_ONE}
    spec = ExecutionSpec.from_json(
        execution_spec([{**good, "publish": {"table": "sales.daily", "mode": "append"}}])
    )
    assert spec.steps[0].publish == Publish("sales.daily", "append")
    with pytest.raises(InvalidSpec, match="publish: .*holds each run's own tables"):
        ExecutionSpec.from_json(
            execution_spec([{**good, "publish": {"table": "results.daily", "mode": "append"}}])
        )
    with pytest.raises(InvalidSpec, match="two steps publish to one table"):
        ExecutionSpec.from_json(
            execution_spec(
                [
                    {**good, "publish": {"table": "sales.daily"}},
                    {**good, "name": "again", "publish": {"table": "sales.daily"}},
                ]
            )
        )
    with pytest.raises(InvalidSpec, match="publish must be an object"):
        ExecutionSpec.from_json(execution_spec([{**good, "publish": "sales.daily"}]))


def saved_steps(db_engine, workflow_id: int) -> list[Step]:
    with Session(db_engine) as db:
        version = db.exec(
            select(WorkflowVersion)
            .where(WorkflowVersion.workflow_id == workflow_id)
            .order_by(WorkflowVersion.version.desc())
        ).first()
        return loads(version.steps)


def editor_form(publish_table: str, publish_mode: str = "append", base_version: int = 1) -> dict:
    return {
        "base_version": str(base_version),
        "steps-0-name": "daily",
        "steps-0-kind": "sql",
        "steps-0-code": SELECT_ONE,
        "steps-0-publish-table": publish_table,
        "steps-0-publish-mode": publish_mode,
    }


def test_the_editor_saves_a_publish_target_and_says_what_is_wrong_with_one(client, db_engine):
    owner = make_user(db_engine)
    workflow = workflow_for(db_engine, owner)
    sign_in_as(client, owner)
    headers = {"X-CSRFToken": csrf(client), "HX-Request": "true"}

    refused = client.post(
        f"/workflows/{workflow.id}/edit", data=editor_form("results.daily"), headers=headers
    )
    assert refused.status_code == 422
    page = refused.get_data(as_text=True)
    assert "holds each run&#39;s own tables" in page
    assert re.search(r'name="steps-0-publish-table" value="results.daily"', page)
    assert re.search(r'name="steps-0-publish-table"[^>]*aria-invalid="true"', page, re.S)

    saved = client.post(
        f"/workflows/{workflow.id}/edit",
        data=editor_form(" sales.daily ", "overwrite"),
        headers=headers,
    )
    assert saved.status_code in (200, 302), saved.get_data(as_text=True)
    assert saved_steps(db_engine, workflow.id)[0].publish == Publish("sales.daily", "overwrite")
    shown = client.get(f"/workflows/{workflow.id}").get_data(as_text=True)
    assert "publishes to sales.daily (overwrite)" in shown
    edited = client.get(f"/workflows/{workflow.id}/edit").get_data(as_text=True)
    assert re.search(r'<option value="overwrite" selected>', edited)

    # An empty table field publishes nothing: the step keeps a run-only result, or none.
    cleared = client.post(
        f"/workflows/{workflow.id}/edit", data=editor_form("", base_version=2), headers=headers
    )
    assert cleared.status_code in (200, 302), cleared.get_data(as_text=True)
    assert saved_steps(db_engine, workflow.id)[0].publish is None


def test_the_api_saves_a_publish_target_and_names_the_field_of_a_bad_one(app, client, db_engine):
    owner = make_user(db_engine)
    api = Api(client, token_for(app, owner))
    workflow = workflow_for(db_engine, owner)
    daily = {
        "name": "daily",
        "kind": "sql",
        "code": SELECT_ONE,
        "output": False,
        "publish": {"table": "sales.daily", "mode": "append"},
    }
    saved = api.call(
        "POST", f"/api/v1/workflows/{workflow.id}/versions", {"base_version": 1, "steps": [daily]}
    )
    assert saved.status_code == 201, saved.get_json()
    assert saved.get_json()["steps"] == [daily]
    assert json.loads(json.dumps(saved_steps(db_engine, workflow.id)[0].to_dict())) == daily

    for publish, message in (
        ({"table": "daily", "mode": "append"}, "namespace.table"),
        ({"table": "sales.daily", "mode": "merge"}, "The mode is one of: append, overwrite."),
    ):
        refused = api.call(
            "POST",
            f"/api/v1/workflows/{workflow.id}/versions",
            {"base_version": 2, "steps": [{**daily, "publish": publish}]},
        )
        assert refused.status_code == 400
        assert refused.get_json()["field"] == "steps.0.publish"
        assert message in refused.get_json()["detail"]
