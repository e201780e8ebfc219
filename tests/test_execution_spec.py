"""The execution spec on the wire (compute/contract.py ExecutionSpec): its typed parts go to a unit
as the same JSON the portal has always sent (a portal and its units may be of different versions
during a rollout), a part missing a member or holding one of the wrong type is refused, and the
run's catalog token is in no repr."""

from __future__ import annotations

import json

import pytest

from app.executions import run_spec
from app.models import WorkflowVersion
from compute.contract import (
    ExecutionSpec,
    InvalidSpec,
    SpecCatalog,
    SpecComputeUnit,
    SpecUser,
    SpecWarehouse,
    SpecWorkflow,
)
from tests.factories import execution_row, reload, unit_row, warehouse_row, workflow_for

TOKEN = "catalog-token-3f9a1c"

# An execution spec as the portal sent it before its parts were typed, member for member and in
# its order (app/executions/run_spec.py and app/compute_units/door.py catalog_binding).
WIRE = {
    "execution_id": 42,
    "workflow": {"id": 7, "name": "sales", "version": 3},
    "user": {"id": 1, "email": "alice@example.test"},
    "compute_unit": {"id": 5, "name": "cu-a"},
    "warehouse": {"id": 2, "name": "lake", "lakekeeper_id": "0f6c2f1e-4d1b-4c8e-9c1e-2a7b5d3e9f10"},
    "catalog": {
        "uri": "http://127.0.0.1:8181/catalog",
        "warehouse": "project-1/u1-lake",
        "token": TOKEN,
        "access_delegation": "vended-credentials",
    },
    "steps": [
        {"name": "daily", "kind": "sql", "code": "SELECT 1 AS n", "output": True},
        {
            "name": "kept",
            "kind": "python",
            "code": "def run(spark, daily):\n    return daily",
            "output": False,
            "publish": {"table": "sales.daily", "mode": "merge", "keys": ["n"]},
        },
    ],
    "pinned": {"datasets.people": 4242},
    "isolation": "sandbox",
    "changes": {"sales.events": 17, "sales.items": None},
}


def test_todays_json_goes_through_a_unit_and_back_unchanged():
    spec = ExecutionSpec.from_json(json.loads(json.dumps(WIRE)))
    assert spec.workflow == SpecWorkflow(7, "sales", 3)
    assert spec.user == SpecUser(1, "alice@example.test")
    assert spec.compute_unit == SpecComputeUnit(5, "cu-a")
    assert spec.warehouse == SpecWarehouse(2, "lake", WIRE["warehouse"]["lakekeeper_id"])
    assert spec.catalog == SpecCatalog(
        "http://127.0.0.1:8181/catalog", "project-1/u1-lake", TOKEN, "vended-credentials"
    )
    assert spec.to_json() == WIRE
    assert json.dumps(spec.to_json()) == json.dumps(WIRE)  # byte for byte, members in order
    # A portal of before may leave out the delegation, which is the only one a unit takes.
    without = without_member("catalog", "access_delegation")
    assert ExecutionSpec.from_json(without).catalog.access_delegation == "vended-credentials"


def test_the_portal_sends_todays_json(app, newcomer, db_engine):
    workflow = workflow_for(db_engine, newcomer)
    warehouse, cu = warehouse_row(db_engine, newcomer), unit_row(db_engine, newcomer)
    execution = execution_row(db_engine, newcomer, workflow, warehouse, cu, state="QUEUED")
    version = reload(db_engine, WorkflowVersion, execution.workflow_version_id)
    with app.app_context():
        spec = run_spec.execution_spec(execution, workflow, version, newcomer, cu, warehouse, TOKEN)
    project = app.config["LAKEKEEPER_PROJECT_ID"]
    expected = {
        "execution_id": execution.id,
        "workflow": {"id": workflow.id, "name": workflow.name, "version": version.version},
        "user": {"id": newcomer.id, "email": newcomer.email},
        "compute_unit": {"id": cu.id, "name": cu.name},
        "warehouse": {
            "id": warehouse.id,
            "name": warehouse.name,
            "lakekeeper_id": warehouse.lakekeeper_id,
        },
        "catalog": {
            "uri": f"{app.config['LAKEKEEPER_URL'].rstrip('/')}/catalog",
            "warehouse": f"{project}/{warehouse.lakekeeper_name}"
            if project
            else warehouse.lakekeeper_name,
            "token": TOKEN,
            "access_delegation": "vended-credentials",
        },
        "steps": json.loads(version.steps),
        "pinned": {},
        "isolation": "process",
        "changes": {},
    }
    wire = spec.to_json()
    assert json.dumps(wire) == json.dumps(expected)
    assert ExecutionSpec.from_json(json.loads(json.dumps(wire))) == spec


def replaced(part: str, **members) -> dict:
    return {**WIRE, part: {**WIRE[part], **members}}


def without_member(part: str, member: str) -> dict:
    return {**WIRE, part: {k: v for k, v in WIRE[part].items() if k != member}}


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({k: v for k, v in WIRE.items() if k != "user"}, "KeyError: 'user'"),
        ({**WIRE, "workflow": [7, "sales", 3]}, "workflow must be an object, not list"),
        (without_member("workflow", "version"), "workflow.version is missing"),
        (replaced("workflow", version="3"), "workflow.version must be an integer, not str"),
        (replaced("workflow", id=True), "workflow.id must be an integer, not bool"),
        (without_member("user", "email"), "user.email is missing"),
        (replaced("user", email=None), "user.email must be a string, not NoneType"),
        (without_member("compute_unit", "name"), "compute_unit.name is missing"),
        (replaced("compute_unit", id=5.0), "compute_unit.id must be an integer, not float"),
        (without_member("warehouse", "id"), "warehouse.id is missing"),
        (replaced("warehouse", lakekeeper_id=""), "warehouse.lakekeeper_id is missing"),
        (without_member("catalog", "token"), "catalog.token is missing"),
        (replaced("catalog", token=""), "catalog.token is missing"),
        (replaced("catalog", token=12345), "catalog.token must be a string, not int"),
        (replaced("catalog", uri=""), "catalog.uri is missing"),
        (without_member("catalog", "warehouse"), "catalog.warehouse is missing"),
        (replaced("catalog", access_delegation="remote-signing"), "must vend storage"),
        (replaced("catalog", access_delegation=None), "must be a string, not NoneType"),
    ],
)
def test_a_part_missing_a_member_or_of_the_wrong_type_is_refused(args, reason):
    with pytest.raises(InvalidSpec, match=reason) as refused:
        ExecutionSpec.from_json(args)
    assert TOKEN not in str(refused.value)


def test_members_a_unit_does_not_know_are_passed_over():
    newer = replaced("user", id=1, groups=["analytics"])
    assert ExecutionSpec.from_json(newer).to_json() == WIRE


def test_the_token_is_in_no_repr_of_the_spec_or_its_catalog():
    spec = ExecutionSpec.from_json(WIRE)
    for shown in (repr(spec), str(spec), repr(spec.catalog), str(spec.catalog), f"{spec}"):
        assert TOKEN not in shown
        assert "project-1/u1-lake" in shown  # the rest of the catalog is shown
    assert spec.catalog.token == TOKEN
    assert spec.to_json()["catalog"]["token"] == TOKEN  # the unit is sent it
