"""Incremental reads (`changes('ns.table')`): where an increment starts (the portal, from
recorded lineage), how it is walked (the unit, from the table's snapshots), and what the run page
shows; the tests named `on_a_unit` run executions on a real compute unit through the dev catalog
(heavy: under `flock /tmp/lakeport-heavy.lock`)."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pytest

from app.executions import run_spec
from app.models import WorkflowVersion
from app.workflows.steps import check_python, check_sql
from compute.contract import ExecutionSpec
from compute.run.lineage import (
    IncrementUnreadable,
    SnapshotFacts,
    changes_table,
    increment,
)
from tests.catalogs import reader, spec_for, step, submit
from tests.factories import (
    execution_row,
    make_user,
    reload,
    text,
    unit_row,
    warehouse_row,
    workflow_for,
)


# ---------------------------------------------------------------- walking an increment (the unit)
def history(*snapshots: tuple[int, int | None, str, int]) -> dict[int, SnapshotFacts]:
    """Snapshots as (id, parent, operation, added records); totals accumulate appends."""
    facts, total = {}, 0
    for snapshot_id, parent, operation, added in snapshots:
        total += added if operation == "append" else 0
        facts[snapshot_id] = SnapshotFacts(parent, operation, added, total, snapshot_id * 1000)
    return facts


APPENDS = history(
    (1, None, "append", 3), (2, 1, "append", 2), (3, 2, "replace", 5), (4, 3, "append", 1)
)


def test_a_first_read_is_the_whole_table_at_its_end():
    change = increment("ds.t", APPENDS, None, 4)
    assert change == {
        "table": "ds.t",
        "from_snapshot_id": None,
        "to_snapshot_id": 4,
        "to_snapshot_at_ms": 4000,
        "appends": 0,
        "rows": 6,
    }
    assert increment("ds.t", {}, None, None)["rows"] == 0  # a table with no snapshot yet


def test_an_increment_counts_the_appends_after_its_start_and_passes_over_compactions():
    change = increment("ds.t", APPENDS, 1, 4)
    assert (change["from_snapshot_id"], change["to_snapshot_id"]) == (1, 4)
    assert (change["appends"], change["rows"]) == (2, 3)  # snapshots 2 and 4; 3 rewrote files
    assert increment("ds.t", APPENDS, 4, 4)["rows"] == 0  # nothing new
    # The start's own snapshot expired: its child still names it as its parent.
    expired = {key: value for key, value in APPENDS.items() if key != 1}
    assert increment("ds.t", expired, 1, 4)["rows"] == 3


@pytest.mark.parametrize("operation", ["overwrite", "delete"])
def test_an_overwrite_or_delete_after_the_start_fails_naming_its_snapshot(operation):
    facts = history((1, None, "append", 3), (2, 1, operation, 0), (3, 2, "append", 1))
    with pytest.raises(IncrementUnreadable, match=rf"snapshot 2 \({operation}\) changed or"):
        increment("ds.t", facts, 1, 3)
    # Before the start it does not matter.
    assert increment("ds.t", facts, 2, 3)["rows"] == 1


def test_a_start_outside_the_tables_history_fails():
    replaced = history((7, None, "append", 3), (8, 7, "append", 1))
    with pytest.raises(IncrementUnreadable, match="snapshot 2, where this workflow last read"):
        increment("ds.t", replaced, 2, 8)
    with pytest.raises(IncrementUnreadable, match="the table is empty"):
        increment("ds.t", {}, 2, None)
    # An end older than the start (a pin before it): the start is no ancestor.
    with pytest.raises(IncrementUnreadable, match="not in the history"):
        increment("ds.t", APPENDS, 4, 2)


def test_a_step_names_a_table_of_the_runs_catalog_and_nothing_else():
    assert changes_table("DataSets.People", "lakeport") == "datasets.people"
    assert changes_table("lakeport.datasets.people", "lakeport") == "datasets.people"
    assert changes_table("`datasets`.`people`", "lakeport") == "datasets.people"
    for name in ("other.datasets.people", "people", "a.b.c.d", "ds.t; DROP TABLE x", "ds.t--"):
        with pytest.raises(ValueError, match="namespace.table"):
            changes_table(name, "lakeport")
    with pytest.raises(TypeError):
        changes_table(42, "lakeport")


def test_the_editors_check_takes_changes_as_a_table_function():
    for sql in (
        "SELECT id FROM changes(sales.events) WHERE id > 0",
        "WITH e AS (SELECT * FROM changes('sales.events') AS c) SELECT id FROM e",
    ):
        assert check_sql(sql, "daily", [], []) == []
    assert check_python("def run(spark):\n    return changes('sales.events')", "d", [], []) == []


def test_the_spec_carries_the_starts_both_ways():
    spec = spec_for(
        {"lakekeeper_id": "w", "lakekeeper_name": "w"}, "token", [step("a", "SELECT 1")], "http://c"
    )
    parsed = ExecutionSpec.from_json({**spec, "changes": {"DS.T": 5, "ds.u": None}})
    assert parsed.changes == {"ds.t": 5, "ds.u": None}
    assert ExecutionSpec.from_json(parsed.to_json()).changes == parsed.changes
    assert ExecutionSpec.from_json(spec).changes == {}


# ---------------------------------------------------------------- where it starts (the portal)
def read_of(table: str, snapshot_id: int | None) -> dict:
    """A read as compute/contract.py LineageRead records it."""
    figures = ("snapshot_at_ms", "total_records", "total_files", "total_bytes")
    return {"table": table, "snapshot_id": snapshot_id, **dict.fromkeys(figures)}


def test_starts_come_from_the_newest_run_that_read_each_table():
    newest_first = [
        {"read": [read_of("ds.a", 30)]},
        {"read": [read_of("ds.a", 20), read_of("ds.b", 21)]},
        {"read": [read_of("ds.b", 11), read_of("ds.c", None)]},  # ds.c was empty then
    ]
    assert run_spec.starts_from(newest_first) == {"ds.a": 30, "ds.b": 21, "ds.c": None}
    # What a unit reported is checked: no other shapes, names or ids make a start.
    hostile = [
        {"read": [read_of("ds.a; drop", 1), read_of("ds.b", "7"), read_of("ds.c", True), "x"]},
        {"read": "ds.d"},
        [],
    ]
    assert run_spec.starts_from(hostile) == {}


def test_a_rerun_starts_where_its_original_started():
    lineage = {
        "changes": [
            {"table": "ds.a", "from_snapshot_id": 20, "to_snapshot_id": 30},
            {"table": "ds.b", "from_snapshot_id": None, "to_snapshot_id": 31},
            {"table": "../etc", "from_snapshot_id": 1},
        ]
    }
    assert run_spec.starts_of_rerun(lineage) == {"ds.a": 20, "ds.b": None}


def test_the_spec_of_a_run_starts_after_the_users_last_completed_unpinned_run(
    app, newcomer, db_engine
):
    workflow = workflow_for(db_engine, newcomer)
    warehouse, cu = warehouse_row(db_engine, newcomer), unit_row(db_engine, newcomer)

    def run_of(state="COMPLETED", owner=newcomer, into=warehouse, pinned=None, read=()):
        return execution_row(
            db_engine,
            owner,
            workflow,
            into,
            cu,
            state=state,
            run_id="r",
            lineage=json.dumps({"read": [read_of(t, s) for t, s in read], "changes": []}),
            pinned_to=json.dumps(pinned or {}),
        )

    def starts(execution) -> dict:
        version = reload(db_engine, WorkflowVersion, execution.workflow_version_id)
        with app.app_context():
            spec = run_spec.execution_spec(
                execution, workflow, version, newcomer, cu, warehouse, "token"
            )
        return spec.changes

    first = run_of(state="QUEUED")
    assert starts(first) == {}  # the first run reads everything

    run_of(read=[("ds.a", 10), ("ds.b", 11)])
    run_of(read=[("ds.a", 20)])
    # None of these moves a start: a failed run, another warehouse's, a re-run of the past, and
    # another user's run of the same workflow into the same warehouse.
    run_of(state="FAILED", read=[("ds.a", 99)])
    run_of(into=warehouse_row(db_engine, newcomer), read=[("ds.a", 98)])
    original = run_of(read=[("ds.a", 20)])
    run_of(pinned={"execution_id": original.id, "tables": {"ds.a": 10}}, read=[("ds.a", 10)])
    run_of(owner=make_user(db_engine), read=[("ds.a", 97)])

    assert starts(run_of(state="QUEUED")) == {"ds.a": 20, "ds.b": 11}

    # A pinned re-run starts where its original's incremental reads started, nowhere else.
    increments = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="COMPLETED",
        run_id="r",
        lineage=json.dumps(
            {
                "read": [read_of("ds.a", 40)],
                "changes": [{"table": "ds.a", "from_snapshot_id": 20, "to_snapshot_id": 40}],
            }
        ),
    )
    again = run_of(state="QUEUED", pinned={"execution_id": increments.id, "tables": {"ds.a": 40}})
    assert starts(again) == {"ds.a": 20}
    # One that names another user's run as its original gets no starts from it.
    stranger = make_user(db_engine)
    theirs = execution_row(
        db_engine,
        stranger,
        workflow_for(db_engine, stranger),
        warehouse_row(db_engine, stranger),
        unit_row(db_engine, stranger),
        state="COMPLETED",
        run_id="r",
        lineage=json.dumps({"changes": [{"table": "ds.a", "from_snapshot_id": 5}]}),
    )
    assert starts(run_of(state="QUEUED", pinned={"execution_id": theirs.id})) == {}


def test_the_run_page_shows_each_incremental_reads_snapshots(client, newcomer, db_engine):
    workflow = workflow_for(db_engine, newcomer)
    warehouse, cu = warehouse_row(db_engine, newcomer), unit_row(db_engine, newcomer)
    lineage = {
        "read": [read_of("ds.a", 4242), read_of("ds.b", 5151)],
        "wrote": [],
        "changes": [
            {
                "table": "ds.a",
                "from_snapshot_id": 4141,
                "to_snapshot_id": 4242,
                "to_snapshot_at_ms": 1_767_268_800_000,
                "appends": 2,
                "rows": 1234,
            },
            {
                "table": "ds.b",
                "from_snapshot_id": None,
                "to_snapshot_id": 5151,
                "to_snapshot_at_ms": 1_767_268_800_000,
                "appends": 0,
                "rows": 7,
            },
        ],
    }
    execution = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="COMPLETED",
        run_id="r",
        lineage=json.dumps(lineage),
    )
    page = text(client.get(f"/executions/{execution.id}"))
    changes = re.search(r'data-testid="lineage-changes">(.*?)</table>', page, re.S).group(1)
    first, second = re.findall(r"<tr data-table=.*?</tr>", changes, re.S)
    assert "ds.a" in first and ">4141<" in first and ">4242<" in first and "1,234" in first
    assert "2026-01-01 12:00:00" in first
    assert "ds.b" in second and "the start (read whole)" in second and ">5151<" in second
    # A run without incremental reads shows no such table.
    plain = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="COMPLETED",
        run_id="r",
        lineage=json.dumps({"read": [read_of("ds.a", 1)], "wrote": []}),
    )
    assert 'data-testid="lineage-changes"' not in text(client.get(f"/executions/{plain.id}"))


# ---------------------------------------------------------------- on a unit (heavy)
EVENTS = pa.schema([("id", pa.int64()), ("amount", pa.int64())])
# A SQL step and a Python step read the same increment, each its own way; the SQL step names it
# in a CTE with an alias and, quoted, in a subquery.
INCREMENTAL_STEPS = [
    step(
        "fresh",
        "WITH recent AS (SELECT * FROM changes(sales.events) AS e WHERE e.amount >= 0)\n"
        "SELECT id, amount FROM recent\n"
        "WHERE id IN (SELECT id FROM CHANGES('sales.events'))",
        output=True,
    ),
    step(
        "doubled",
        "def run(spark):\n"
        "    events = changes('sales.events')\n"
        "    return events.selectExpr('id', 'amount * 2 AS doubled')",
        kind="python",
        output=True,
    ),
]


def ids(catalog, table: str) -> list[int]:
    return sorted(row["id"] for row in catalog.load_table(table).scan().to_arrow().to_pylist())


def events(*numbers: int) -> pa.Table:
    return pa.table({"id": list(numbers), "amount": [n * 10 for n in numbers]}, schema=EVENTS)


def run(host, lakehouse, warehouse, **overrides) -> tuple[dict, int]:
    run_id, spec = submit(host, lakehouse, warehouse, INCREMENTAL_STEPS, **overrides)
    return host.wait(run_id, timeout_s=180), spec["execution_id"]


def test_incremental_reads_on_a_unit_read_exactly_the_new_rows_and_again_when_pinned(
    host, lakehouse, warehouses
):
    warehouse = warehouses[1]
    catalog = reader(lakehouse, warehouse)
    catalog.create_namespace_if_not_exists("sales")
    source = catalog.create_table("sales.events", schema=EVENTS)
    source.append(events(1, 2, 3))
    start = catalog.load_table("sales.events").current_snapshot().snapshot_id

    # The first run: no start, the whole table.
    first, first_id = run(host, lakehouse, warehouse)
    assert first["state"] == "COMPLETED", first["error"]
    assert ids(catalog, f"results.e{first_id}_fresh") == [1, 2, 3]
    assert ids(catalog, f"results.e{first_id}_doubled") == [1, 2, 3]
    [change] = first["result"]["lineage"]["changes"]
    assert (change["from_snapshot_id"], change["to_snapshot_id"], change["rows"]) == (
        None,
        start,
        3,
    )

    # New rows in two appends (and a compaction-like rewrite would be passed over); the next
    # run starts where the first read, as the portal finds it in the first run's lineage.
    catalog.load_table("sales.events").append(events(4))
    catalog.load_table("sales.events").append(events(5, 6))
    end = catalog.load_table("sales.events").current_snapshot().snapshot_id
    starts = run_spec.starts_from([first["result"]["lineage"]])
    assert starts == {"sales.events": start}
    second, second_id = run(host, lakehouse, warehouse, changes=starts)
    assert second["state"] == "COMPLETED", second["error"]
    assert ids(catalog, f"results.e{second_id}_fresh") == [4, 5, 6]
    doubled = catalog.load_table(f"results.e{second_id}_doubled").scan().to_arrow().to_pylist()
    assert sorted((row["id"], row["doubled"]) for row in doubled) == [(4, 80), (5, 100), (6, 120)]
    lineage = second["result"]["lineage"]
    assert lineage["changes"] == [
        {
            "table": "sales.events",
            "from_snapshot_id": start,
            "to_snapshot_id": end,
            "to_snapshot_at_ms": catalog.load_table("sales.events").current_snapshot().timestamp_ms,
            "appends": 2,
            "rows": 3,
        }
    ]
    assert {entry["table"]: entry["snapshot_id"] for entry in lineage["read"]} == {
        "sales.events": end
    }

    # More rows arrive; the second run's pinned re-run reads its increment again, not them.
    catalog.load_table("sales.events").append(events(7))
    pins = {entry["table"]: entry["snapshot_id"] for entry in lineage["read"]}
    again, again_id = run(
        host, lakehouse, warehouse, pinned=pins, changes=run_spec.starts_of_rerun(lineage)
    )
    assert again["state"] == "COMPLETED", again["error"]
    assert ids(catalog, f"results.e{again_id}_fresh") == [4, 5, 6]
    assert ids(catalog, f"results.e{again_id}_doubled") == [4, 5, 6]
    assert again["result"]["lineage"]["changes"] == lineage["changes"]

    # Nothing new since the last read: an empty increment, not an error.
    latest = catalog.load_table("sales.events").current_snapshot().snapshot_id
    empty, empty_id = run(host, lakehouse, warehouse, changes={"sales.events": latest})
    assert empty["state"] == "COMPLETED", empty["error"]
    assert ids(catalog, f"results.e{empty_id}_fresh") == []
    assert empty["result"]["lineage"]["changes"][0]["rows"] == 0

    # Rows deleted after the start: the run fails naming the snapshot, and keeps no result.
    catalog.load_table("sales.events").delete("id = 1")
    deleted = catalog.load_table("sales.events").current_snapshot()
    failed, failed_id = run(host, lakehouse, warehouse, changes={"sales.events": latest})
    assert failed["state"] == "FAILED"
    assert f"snapshot {deleted.snapshot_id} (" in failed["error"]
    assert "appended rows only" in failed["error"]
    assert not catalog.table_exists(f"results.e{failed_id}_fresh")
