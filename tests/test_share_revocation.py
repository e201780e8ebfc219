"""A share revoked or downgraded stops what it no longer allows, as the owner does it (through
the portal's share routes), with the reason on the sharee's execution:

- a warehouse share downgraded to read, or revoked: the sharee's queued executions into that
  warehouse end FAILED at once, running ones are asked to stop (the worker cancels them on their
  unit, end to end in the last test, which starts a real unit: run it under the heavy lock);
- a workflow share revoked or downgraded to view: the sharee's runs of that workflow that have
  not reached their unit end FAILED; one already running carries on.
Executions the remaining shares still allow (the owner's own, a sharee who still writes through
another share, other warehouses and workflows) are left alone."""

from __future__ import annotations

import json
import secrets

import pytest
from sqlmodel import Session, select

from app.models import Execution, Warehouse, WarehouseShare, WorkflowShare
from tests.factories import (
    csrf,
    execution_row,
    make_user,
    register_warehouse,
    reload,
    set_groups,
    sign_in_as,
    start_sleeping_step,
    text,
    unit_row,
    wait_for,
    warehouse_row,
    workflow_for,
)


@pytest.fixture
def app(lakehouse_app):
    return lakehouse_app


PENDING = json.dumps({"steps": [{"name": "doubled", "state": "pending"}], "logs": []})


def post(client, path: str, **form):
    return client.post(
        path, data={**form, "csrf_token": csrf(client)}, headers={"HX-Request": "true"}
    )


def share_id(db_engine, model, key, thing_id: int, **grantee) -> int:
    with Session(db_engine) as db:
        (row,) = db.exec(
            select(model).where(
                key == thing_id, *(getattr(model, k) == v for k, v in grantee.items())
            )
        )
        return row.id


@pytest.fixture
def owner_and_sharee(app, db_engine):
    """An owner and a sharee, each signed in to a client of their own."""
    people = []
    for _ in range(2):
        user, client = make_user(db_engine), app.test_client()
        sign_in_as(client, user)
        people.append((user, client))
    return people


def test_a_warehouse_share_downgraded_then_revoked_stops_the_sharees_runs_into_it(
    owner_and_sharee, db_engine, lakehouse
):
    (owner, owner_client), (sharee, sharee_client) = owner_and_sharee
    warehouse = reload(
        db_engine,
        Warehouse,
        register_warehouse(owner_client, lakehouse, f"rev-{secrets.token_hex(2)}"),
    )
    base = f"/warehouses/{warehouse.id}/shares"
    assert (
        post(owner_client, base, kind="user", email=sharee.email, level="write").status_code == 200
    )
    workflow, cu = workflow_for(db_engine, sharee), unit_row(db_engine, sharee)
    queued = execution_row(
        db_engine, sharee, workflow, warehouse, cu, state="QUEUED", progress=PENDING
    )
    running = execution_row(
        db_engine, sharee, workflow, warehouse, cu, state="RUNNING", run_id="run-1"
    )
    own_bucket = warehouse_row(db_engine, sharee)
    elsewhere = execution_row(db_engine, sharee, workflow, own_bucket, cu, state="QUEUED")
    owners = execution_row(
        db_engine,
        owner,
        workflow_for(db_engine, owner),
        warehouse,
        unit_row(db_engine, owner),
        state="QUEUED",
    )

    assert (
        post(owner_client, base, kind="user", email=sharee.email, level="read").status_code == 200
    )
    why = f"the warehouse {warehouse.name} is now shared with you to read only"
    stopped = reload(db_engine, Execution, queued.id)
    assert (stopped.state, stopped.reason) == ("FAILED", why) and stopped.ended_at is not None
    assert json.loads(stopped.progress)["steps"] == [{"name": "doubled", "state": "cancelled"}]
    asked = reload(db_engine, Execution, running.id)  # the worker cancels it on its unit
    assert (asked.state, asked.reason) == ("RUNNING", why) and asked.cancel_requested_at is not None
    assert reload(db_engine, Execution, elsewhere.id).state == "QUEUED"
    assert reload(db_engine, Execution, owners.id).state == "QUEUED"
    page = sharee_client.get(f"/executions/{queued.id}").get_data(as_text=True)
    assert why in page

    later = execution_row(
        db_engine, sharee, workflow, warehouse, cu, state="QUEUED"
    )  # as if started before
    row_id = share_id(
        db_engine, WarehouseShare, WarehouseShare.warehouse_id, warehouse.id, user_id=sharee.id
    )
    assert post(owner_client, f"{base}/{row_id}/revoke").status_code == 200
    assert (
        reload(db_engine, Execution, later.id).state,
        reload(db_engine, Execution, later.id).reason,
    ) == ("FAILED", f"the warehouse {warehouse.name} is no longer shared with you")
    assert reload(db_engine, Execution, owners.id).state == "QUEUED"


def test_a_sharee_who_still_writes_through_a_group_keeps_their_runs(
    owner_and_sharee, db_engine, lakehouse
):
    (owner, owner_client), (sharee, _) = owner_and_sharee
    group = f"writers-{secrets.token_hex(3)}"
    sharee = set_groups(db_engine, sharee, [group])
    warehouse = reload(
        db_engine,
        Warehouse,
        register_warehouse(owner_client, lakehouse, f"grp-{secrets.token_hex(2)}"),
    )
    base = f"/warehouses/{warehouse.id}/shares"
    assert post(owner_client, base, kind="group", group=group, level="write").status_code == 200
    assert (
        post(owner_client, base, kind="user", email=sharee.email, level="write").status_code == 200
    )
    queued = execution_row(
        db_engine,
        sharee,
        workflow_for(db_engine, sharee),
        warehouse,
        unit_row(db_engine, sharee),
        state="QUEUED",
    )
    assert (
        post(owner_client, base, kind="user", email=sharee.email, level="read").status_code == 200
    )
    row_id = share_id(
        db_engine, WarehouseShare, WarehouseShare.warehouse_id, warehouse.id, user_id=sharee.id
    )
    assert post(owner_client, f"{base}/{row_id}/revoke").status_code == 200
    assert (
        reload(db_engine, Execution, queued.id).state == "QUEUED"
    )  # the group's write share remains

    group_share = share_id(
        db_engine, WarehouseShare, WarehouseShare.warehouse_id, warehouse.id, group_name=group
    )
    assert post(owner_client, f"{base}/{group_share}/revoke").status_code == 200
    assert reload(db_engine, Execution, queued.id).reason == (
        f"the warehouse {warehouse.name} is no longer shared with you"
    )


def test_a_workflow_share_revoked_or_downgraded_stops_the_sharees_queued_runs_of_it(
    owner_and_sharee, db_engine
):
    (owner, owner_client), (sharee, sharee_client) = owner_and_sharee
    workflow, other_workflow = workflow_for(db_engine, owner), workflow_for(db_engine, sharee)
    base = f"/workflows/{workflow.id}/shares"
    assert post(owner_client, base, kind="user", email=sharee.email, level="run").status_code == 200
    warehouse, cu = warehouse_row(db_engine, sharee), unit_row(db_engine, sharee)
    queued = execution_row(
        db_engine, sharee, workflow, warehouse, cu, state="QUEUED", progress=PENDING
    )
    initializing = execution_row(db_engine, sharee, workflow, warehouse, cu, state="INITIALIZING")
    running = execution_row(
        db_engine, sharee, workflow, warehouse, cu, state="RUNNING", run_id="run-2"
    )
    other = execution_row(db_engine, sharee, other_workflow, warehouse, cu, state="QUEUED")

    assert (
        post(owner_client, base, kind="user", email=sharee.email, level="view").status_code == 200
    )
    why = f"the workflow {workflow.name} is now shared with you to view only"
    for execution in (queued, initializing):
        stopped = reload(db_engine, Execution, execution.id)
        assert (stopped.state, stopped.reason) == ("FAILED", why)
    assert why in sharee_client.get(f"/executions/{queued.id}").get_data(as_text=True)
    kept = reload(
        db_engine, Execution, running.id
    )  # already on its unit: it runs the code it was given
    assert (kept.state, kept.cancel_requested_at) == ("RUNNING", None)
    assert reload(db_engine, Execution, other.id).state == "QUEUED"

    later = execution_row(db_engine, sharee, workflow, warehouse, cu, state="QUEUED")
    row_id = share_id(
        db_engine, WorkflowShare, WorkflowShare.workflow_id, workflow.id, user_id=sharee.id
    )
    assert post(owner_client, f"{base}/{row_id}/revoke").status_code in (200, 302)
    assert (
        reload(db_engine, Execution, later.id).state,
        reload(db_engine, Execution, later.id).reason,
    ) == ("FAILED", f"the workflow {workflow.name} is no longer shared with you")


def test_downgrading_a_warehouse_share_mid_run_cancels_the_sharees_run_on_its_unit(
    e2e, db_engine, lakehouse
):
    """A real unit (the e2e fixture's user runs it) running a sleeping step into a warehouse
    another user shares with them; the owner downgrades the share to read."""
    app, client, user, cu_id, _ = e2e
    owner, owner_client = make_user(db_engine), app.test_client()
    sign_in_as(owner_client, owner)
    warehouse = reload(
        db_engine, Warehouse, register_warehouse(owner_client, lakehouse, "shared-mid-run")
    )
    base = f"/warehouses/{warehouse.id}/shares"
    assert post(owner_client, base, kind="user", email=user.email, level="write").status_code == 200
    execution_id = start_sleeping_step(client, db_engine, user, cu_id, warehouse.id)

    downgraded = post(owner_client, base, kind="user", email=user.email, level="read")
    assert downgraded.status_code == 200, text(downgraded)
    execution = wait_for(
        client, db_engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60
    )
    assert (execution.state, execution.reason) == (
        "FAILED",
        "the warehouse shared-mid-run is now shared with you to read only",
    )
    assert [step["state"] for step in json.loads(execution.progress)["steps"]] == ["cancelled"]
