"""Operators (members of LAKEPORT_OPERATORS_GROUP, from the identity provider's groups): they see
every user's units, executions and warehouses as metadata, stop any unit or execution (recorded
as theirs), and still cannot read anyone's tables through the portal. Anyone else gets 404."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session, select

from app.models import AuditEvent, ComputeUnit, Execution
from tests.factories import csrf, equipped, execution_row, make_user, operator_user, sign_in_as


def test_the_operators_group_comes_from_the_provider_at_sign_in(auth, client):
    auth.login("olive")
    page = client.get("/").get_data(as_text=True)
    assert 'data-testid="operators-link"' in page and client.get("/operators/").status_code == 200
    auth.logout()
    auth.login("carol")
    assert 'data-testid="operators-link"' not in client.get("/").get_data(as_text=True)
    assert client.get("/operators/").status_code == 404


def test_operators_see_everyones_metadata_and_stop_any_unit_or_execution(app, client, db_engine):
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    queued = execution_row(db_engine, owner, workflow, warehouse, cu)
    operator = operator_user(db_engine)
    sign_in_as(client, operator)
    page = client.get("/operators/").get_data(as_text=True)
    assert f'data-unit="{cu.id}"' in page and f'data-execution="{queued.id}"' in page
    assert warehouse.name in page and f'data-user="{owner.id}"' in page

    assert (
        client.post(
            f"/operators/executions/{queued.id}/cancel", data={"csrf_token": csrf(client)}
        ).status_code
        == 302
    )
    assert (
        client.post(
            f"/operators/units/{cu.id}/terminate", data={"csrf_token": csrf(client)}
        ).status_code
        == 302
    )
    with Session(db_engine) as db:
        execution, unit = db.get(Execution, queued.id), db.get(ComputeUnit, cu.id)
        assert execution.state == "CANCELLED" and "by an operator" in execution.reason
        assert (
            unit.state in ("TERMINATING", "TERMINATED")
            and unit.reason == "terminated by an operator"
        )
        recorded = db.exec(select(AuditEvent).where(AuditEvent.actor_id == operator.id)).all()
    assert {(event.action, event.owner_id) for event in recorded} >= {
        ("execution.cancel", owner.id),
        ("unit.terminate", owner.id),
    }


def test_operators_cannot_read_table_data_through_the_portal(app, client, db_engine):
    from tests.factories import Api, token_for

    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    done = execution_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        cu,
        state="COMPLETED",
        outputs=json.dumps({"outputs": {"doubled": "results.e1_doubled"}}),
    )
    operator = operator_user(db_engine)
    sign_in_as(client, operator)
    for path in (
        f"/executions/{done.id}",
        f"/executions/{done.id}/results/doubled",
        f"/executions/{done.id}/results/doubled/csv",
        f"/executions/{done.id}/logs",
        f"/warehouses/{warehouse.id}",
        f"/warehouses/{warehouse.id}/tables/results.e1_doubled",
        f"/workflows/{workflow.id}",
    ):
        assert client.get(path).status_code == 404, path
    api = Api(client, token_for(app, operator))
    for path in (
        f"/api/v1/executions/{done.id}/results/doubled",
        f"/api/v1/warehouses/{warehouse.id}/tables",
    ):
        assert api.call("GET", path).status_code == 404, path


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/operators/"),
        ("POST", "/operators/units/1/terminate"),
        ("POST", "/operators/executions/1/cancel"),
    ],
)
def test_anyone_else_gets_404(app, client, db_engine, method, path):
    user = make_user(db_engine)
    sign_in_as(client, user)
    assert client.open(path, method=method, data={"csrf_token": csrf(client)}).status_code == 404
