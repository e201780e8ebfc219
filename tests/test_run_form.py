"""The run form starts on the warehouse a run of this workflow most likely goes to: the one it
last ran into for this user, else the one its inputs live in, else the first (alphabetically)."""

from __future__ import annotations

import json
import re
import secrets

from app.models import ExecutionState, SampleDataJob, WarehouseStatus, utcnow
from app.states import JobState
from tests.factories import add, execution_row, unit_row, update_row, warehouse_row, workflow_for

READS_SAMPLE_DATA = [
    {
        "name": "orders",
        "kind": "sql",
        "code": "SELECT o_orderkey FROM tpch.orders",
        "output": True,
    }
]


def _first_and_last(db_engine, user):
    """Two active warehouses: the first and the last by name."""
    tag = secrets.token_hex(3)
    return (
        warehouse_row(db_engine, user, name=f"a-{tag}"),
        warehouse_row(db_engine, user, name=f"z-{tag}"),
    )


def _chosen(client, workflow) -> int | None:
    page = client.get(f"/executions/new?workflow_id={workflow.id}")
    assert page.status_code == 200
    found = re.search(r'<option value="(\d+)" selected>', page.get_data(as_text=True))
    return int(found.group(1)) if found else None


def test_with_nothing_to_go_by_it_starts_on_the_first_warehouse(client, db_engine, newcomer):
    first, _ = _first_and_last(db_engine, newcomer)
    assert _chosen(client, workflow_for(db_engine, newcomer)) == first.id


def test_it_starts_on_the_warehouse_the_workflow_last_ran_into(client, db_engine, newcomer):
    _, last = _first_and_last(db_engine, newcomer)
    workflow = workflow_for(db_engine, newcomer)
    execution_row(db_engine, newcomer, workflow, last, unit_row(db_engine, newcomer))
    assert _chosen(client, workflow) == last.id


def test_never_run_it_starts_where_the_sample_data_it_reads_was_loaded(client, db_engine, newcomer):
    _, last = _first_and_last(db_engine, newcomer)
    add(
        db_engine,
        SampleDataJob(
            owner_id=newcomer.id,
            warehouse_id=last.id,
            scale_factor=0.01,
            state=JobState.DONE,
            ended_at=utcnow(),
        ),
    )
    assert _chosen(client, workflow_for(db_engine, newcomer, READS_SAMPLE_DATA)) == last.id
    # A workflow that reads no sample data is not drawn there.
    assert _chosen(client, workflow_for(db_engine, newcomer)) != last.id


def test_when_its_last_warehouse_is_closed_it_starts_where_a_run_read_its_inputs(
    client, db_engine, newcomer
):
    first, last = _first_and_last(db_engine, newcomer)
    closed = warehouse_row(db_engine, newcomer, name=f"m-{secrets.token_hex(3)}")
    workflow = workflow_for(db_engine, newcomer)
    unit = unit_row(db_engine, newcomer)
    read = json.dumps({"read": [{"table": "sales.orders", "snapshot_id": 1}], "wrote": []})
    execution_row(
        db_engine, newcomer, workflow, last, unit, state=ExecutionState.COMPLETED, lineage=read
    )
    execution_row(db_engine, newcomer, workflow, closed, unit, state=ExecutionState.FAILED)
    update_row(db_engine, type(closed), closed.id, status=WarehouseStatus.ARCHIVED)
    assert _chosen(client, workflow) == last.id
