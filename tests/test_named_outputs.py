"""Named outputs: a step publishes its rows to a table of the run's warehouse, and a run
publishes all of its tables in one catalog commit (compute/run/publish.py).

The validation tests are light (the editor, the API, the unit's own check of the spec); the
tests that run a pipeline (atomicity, concurrency, the schema rule) need Spark and run under
the heavy lock."""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from dataclasses import replace

import pyarrow as pa
import pytest
from sqlmodel import Session, select

from app.executions import unit_reports
from app.models import WorkflowVersion
from app.workflows.steps import Step, check_steps, loads
from compute.contract import ExecutionSpec, InvalidSpec, Publish, RunState
from tests.catalogs import reader, submit
from tests.catalogs import step as catalog_step
from tests.factories import (
    Api,
    csrf,
    execution_row,
    make_user,
    sign_in_as,
    token_for,
    unit_row,
    warehouse_row,
    workflow_for,
)

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
    assert message == "The mode is one of: append, overwrite, overwrite-partitions, merge."


def test_a_merge_names_its_key_columns_and_only_a_merge_has_them():
    def merge(mode: str, keys: tuple) -> Step:
        return replace(step("daily"), publish=Publish("sales.daily", mode, (), keys))

    assert publish_errors([merge("merge", ("order_id", "day"))]) == {}
    for mode, keys, message in (
        ("merge", (), "Name the key columns a merge matches rows on, e.g. order_id, day."),
        ("append", ("order_id",), "Key columns are for the merge mode only"),
        ("merge", ("order id",), "“order id” is no column name"),
        ("merge", ("id", "ID"), "A key column is named twice."),
    ):
        (found,) = publish_errors([merge(mode, keys)])[0]
        assert found.startswith(message), (keys, found)
    kept = merge("merge", ("order_id", "day"))
    assert kept.to_dict()["publish"] == {
        "table": "sales.daily",
        "mode": "merge",
        "keys": ["order_id", "day"],
    }
    assert Step.from_dict(kept.to_dict()) == kept


def test_two_steps_may_not_publish_to_one_table():
    errors = publish_errors([step("first", "sales.daily"), step("second", "sales.daily")])
    assert errors == {1: ["Step “first” already publishes to sales.daily: one step per table."]}


def test_a_step_without_a_publish_target_is_stored_as_before():
    plain = step("kept", output=True)
    assert plain.to_dict() == {"name": "kept", "kind": "sql", "code": SELECT_ONE, "output": True}
    published = step("daily", "sales.daily", "overwrite")
    assert Step.from_dict(published.to_dict()) == published
    assert published.to_dict()["publish"] == {"table": "sales.daily", "mode": "overwrite"}


def test_the_schema_rule_adds_new_columns_and_spells_out_any_other_difference():
    from pyspark.sql.types import (
        ArrayType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    from compute.run.publish import schema_difference

    table = StructType(
        [
            StructField("id", LongType(), True),
            StructField("Name", StringType(), True),
            StructField("tags", ArrayType(StringType(), True), True),
        ]
    )
    # Nullability and the case of a name are no difference; a new column is added.
    same_but_required = StructType(
        [
            StructField("ID", LongType(), False),
            StructField("name", StringType(), False),
            StructField("tags", ArrayType(StringType(), False), False),
            StructField("age", IntegerType(), False),
        ]
    )
    added, problems = schema_difference("sales.people", table, same_but_required)
    assert [field.name for field in added] == ["age"] and problems == []

    changed = StructType([StructField("id", StringType(), True)])
    added, problems = schema_difference("sales.people", table, changed)
    assert added == []
    assert problems == [
        "column Name (string) of sales.people is missing from the output",
        "column tags (array<string>) of sales.people is missing from the output",
        "column id is bigint in sales.people and string in the output",
    ]


def test_a_publish_removes_the_branches_failed_runs_left_once_their_retention_has_passed():
    from types import SimpleNamespace

    from compute.run.publish import BRANCH_RETENTION_DAYS, Publisher, StagedOutput

    day_ms, now_ms = 86_400_000, int(time.time() * 1000)
    ages = {"main": 30, "lakeport_run_3": BRANCH_RETENTION_DAYS + 1, "lakeport_run_4": 1}
    ages["audit"] = 400  # a branch of someone else's: never Lakeport's to remove
    ages["first"] = 40  # main's parent
    removed: list[str] = []

    class Snapshots:
        def remove_branch(self, name):
            removed.append(name)
            return self

        def commit(self):
            pass

    names = list(ages)

    def refs() -> dict:
        made = {name: SimpleNamespace(snapshot_id=names.index(name)) for name in ages}
        # Runs 6 and 8 made their branches from main (or its parent), older than the retention,
        # and have not written on them yet: whatever their age, they are not removed.
        made["lakeport_run_6"] = made["main"]
        made["lakeport_run_8"] = made.pop("first")
        return made

    metadata = SimpleNamespace(
        refs=refs(),
        snapshot_by_id=lambda index: SimpleNamespace(
            timestamp_ms=now_ms - ages[names[index]] * day_ms,
            parent_snapshot_id=names.index("first") if names[index] == "main" else None,
        ),
    )
    table = SimpleNamespace(metadata=metadata, manage_snapshots=Snapshots)
    loaded: list[str] = []
    lines: list[tuple] = []
    publisher = Publisher(
        SimpleNamespace(execution_id=5),
        None,
        "c",
        SimpleNamespace(load_table=lambda name: loaded.append(name) or table),
        lambda *line: lines.append(line),
    )
    publisher.staged = [StagedOutput("rows", "sales.daily", "append", "lakeport_run_5", 1, 2, 3)]
    # Which branches expired is read from the metadata the publish committed; the table is
    # loaded again only to remove them.
    publisher._remove_expired([SimpleNamespace(table_metadata=metadata)])
    assert removed == ["lakeport_run_3"]
    assert loaded == ["sales.daily"]
    assert "lakeport_run_3" in lines[-1][2]

    # Nothing expired: nothing is loaded, nothing removed.
    del ages["lakeport_run_3"]
    metadata.refs = refs()
    removed.clear(), loaded.clear()
    publisher._remove_expired([SimpleNamespace(table_metadata=metadata)])
    assert removed == [] and loaded == []


def execution_spec(steps: list[dict]) -> dict:
    return {
        "execution_id": 7,
        "workflow": {"id": 1, "name": "sales", "version": 1},
        "user": {"id": 1, "email": "alice@example.test"},
        "compute_unit": {"id": 1, "name": "cu-a"},
        "warehouse": {"id": 1, "name": "w", "lakekeeper_id": "w"},
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


def editor_form(
    publish_table: str, publish_mode: str = "append", base_version: int = 1, keys: str = ""
) -> dict:
    return {
        "steps-0-publish-keys": keys,
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

    merged = client.post(
        f"/workflows/{workflow.id}/edit",
        data=editor_form("sales.daily", "merge", base_version=2, keys=" order_id , day "),
        headers=headers,
    )
    assert merged.status_code in (200, 302), merged.get_data(as_text=True)
    assert saved_steps(db_engine, workflow.id)[0].publish.keys == ("order_id", "day")
    edited = client.get(f"/workflows/{workflow.id}/edit").get_data(as_text=True)
    assert 'name="steps-0-publish-keys" value="order_id, day"' in edited

    # An empty table field publishes nothing: the step keeps a run-only result, or none.
    cleared = client.post(
        f"/workflows/{workflow.id}/edit", data=editor_form("", base_version=3), headers=headers
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
        (
            {"table": "sales.daily", "mode": "upsert"},
            "The mode is one of: append, overwrite, overwrite-partitions, merge.",
        ),
    ):
        refused = api.call(
            "POST",
            f"/api/v1/workflows/{workflow.id}/versions",
            {"base_version": 2, "steps": [{**daily, "publish": publish}]},
        )
        assert refused.status_code == 400
        assert refused.get_json()["field"] == "steps.0.publish"
        assert message in refused.get_json()["detail"]


# ------------------------------------------------------------------ on a unit (heavy)
def published_step(name: str, code: str, table: str, mode: str = "append", **fields) -> dict:
    return {
        **catalog_step(name, code, kind=fields.pop("kind", "sql"), **fields),
        "publish": {"table": table, "mode": mode},
    }


def sleeping_step(seconds: float) -> dict:
    code = f"def run(spark):\n    import time\n    time.sleep({seconds})\n    return spark.range(1)"
    return catalog_step("pause", code, kind="python")


def until_step_done(host, run_id: str, position: int) -> None:
    """Polls until the run's step at `position` is done (or the run has ended)."""
    deadline = time.monotonic() + 300
    while True:
        run = host.run(run_id)
        states = [s["state"] for s in run["progress"]["steps"]]
        if states[position : position + 1] == ["done"] or run["state"] in RunState.FINAL:
            return
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def rows_of(catalog, table: str) -> list[dict]:
    return sorted(catalog.load_table(table).scan().to_arrow().to_pylist(), key=lambda row: str(row))


def test_a_run_publishes_its_named_tables_in_one_commit_a_reader_never_sees_a_mix(
    host, lakehouse, warehouses
):
    warehouse, namespace = warehouses[0], f"pub_{secrets.token_hex(3)}"
    tables = [f"{namespace}.{name}" for name in ("first", "second", "third")]

    def steps(round_: int) -> list[dict]:
        return [
            published_step(
                f"make_{position}",
                f"SELECT id, {round_} AS round FROM range({position + 2})",
                table,
                output=position == 0,  # a step may keep a run-only result as well
            )
            for position, table in enumerate(tables)
        ]

    run_id, spec = submit(host, lakehouse, warehouse, steps(1))
    first = host.wait(run_id, timeout_s=300)
    assert first["state"] == "COMPLETED", first["error"]
    published = first["result"]["published"]
    assert [published[f"make_{p}"]["table"] for p in range(3)] == tables
    assert [published[f"make_{p}"]["rows_added"] for p in range(3)] == [2, 3, 4]
    assert first["result"]["outputs"] == {"make_0": f"results.e{spec['execution_id']}_make_0"}
    wrote = {entry["table"]: entry for entry in first["result"]["lineage"]["wrote"]}
    for position, table in enumerate(tables):
        assert wrote[table]["snapshot_id"] == published[f"make_{position}"]["snapshot_id"]

    catalog = reader(lakehouse, warehouse)
    round_of = {entry["snapshot_id"]: 1 for entry in published.values()}
    for table in tables:
        loaded = catalog.load_table(table)
        assert loaded.current_snapshot().snapshot_id in round_of
        assert set(loaded.metadata.refs) == {"main"}  # the run's branch went with the publish

    # A second round, while readers load the three tables one after another, forwards and
    # backwards: a table loaded later is never older than one loaded before it.
    seen: list[list[int]] = []
    stop = threading.Event()

    def read() -> None:
        own, order = reader(lakehouse, warehouse), list(tables)
        while not stop.is_set():
            seen.append([own.load_table(t).current_snapshot().snapshot_id for t in order])
            order.reverse()

    readers = [threading.Thread(target=read) for _ in range(2)]
    for thread in readers:
        thread.start()
    try:
        run_id, _ = submit(host, lakehouse, warehouse, steps(2))
        second = host.wait(run_id, timeout_s=300)
    finally:
        stop.set()
        for thread in readers:
            thread.join()
    assert second["state"] == "COMPLETED", second["error"]
    round_of.update({entry["snapshot_id"]: 2 for entry in second["result"]["published"].values()})
    rounds = [[round_of[snapshot] for snapshot in pass_] for pass_ in seen]
    assert {1, 2} <= {number for pass_ in rounds for number in pass_}  # it saw both rounds
    assert all(pass_ == sorted(pass_) for pass_ in rounds), [p for p in rounds if p != sorted(p)]
    assert rows_of(catalog, tables[2]) == sorted(
        [{"id": i, "round": r} for r in (1, 2) for i in range(4)], key=lambda row: str(row)
    )


def test_two_appends_at_once_both_land_and_a_conflicting_overwrite_fails_the_later_run(
    host, lakehouse, warehouses
):
    warehouse, table = warehouses[0], f"pub_{secrets.token_hex(3)}.daily"
    catalog = reader(lakehouse, warehouse)

    def rows(source: str, count: int) -> str:
        return f"SELECT id, '{source}' AS source FROM range({count})"

    # The slow run stages its rows, then waits in a later step while the quick run publishes:
    # its commit is refused (main moved), it rebases its appended files and publishes.
    slow_id, slow = submit(
        host,
        lakehouse,
        warehouse,
        [published_step("rows", rows("slow", 3), table), sleeping_step(6)],
    )
    until_step_done(host, slow_id, 0)
    quick_id, _ = submit(
        host, lakehouse, warehouse, [published_step("rows", rows("quick", 2), table)]
    )
    assert host.wait(quick_id, timeout_s=300)["state"] == "COMPLETED"
    slow_run = host.wait(slow_id, timeout_s=300)
    assert slow_run["state"] == "COMPLETED", slow_run["error"]
    assert any("rebased onto it" in line["message"] for line in slow_run["progress"]["logs"])
    expected = [{"id": i, "source": "slow"} for i in range(3)]
    expected += [{"id": i, "source": "quick"} for i in range(2)]
    assert rows_of(catalog, table) == sorted(expected, key=lambda row: str(row))

    # An overwrite staged on a main that another run then moves fails, naming why; it
    # publishes nothing and its branch stays for inspection.
    overwrite_id, overwrite = submit(
        host,
        lakehouse,
        warehouse,
        [published_step("rows", rows("replacement", 1), table, "overwrite"), sleeping_step(6)],
    )
    until_step_done(host, overwrite_id, 0)
    append_id, _ = submit(
        host, lakehouse, warehouse, [published_step("rows", rows("late", 1), table)]
    )
    assert host.wait(append_id, timeout_s=300)["state"] == "COMPLETED"
    failed = host.wait(overwrite_id, timeout_s=300)
    assert failed["state"] == "FAILED"
    assert f"step 'rows' overwrites {table}, which changed since this run began" in failed["error"]
    expected.append({"id": 0, "source": "late"})
    assert rows_of(catalog, table) == sorted(expected, key=lambda row: str(row))
    branch = f"lakeport_run_{overwrite['execution_id']}"
    refs = catalog.load_table(table).metadata.refs
    assert set(refs) == {"main", branch}
    staged = catalog.load_table(table).scan(snapshot_id=refs[branch].snapshot_id).to_arrow()
    assert staged.to_pylist() == [{"id": 0, "source": "replacement"}]


def test_new_columns_are_added_and_any_other_schema_change_fails_the_run(
    host, lakehouse, warehouses
):
    warehouse, table = warehouses[0], f"pub_{secrets.token_hex(3)}.people"
    catalog = reader(lakehouse, warehouse)

    def publish(code: str) -> dict:
        run_id, _ = submit(host, lakehouse, warehouse, [published_step("people", code, table)])
        return host.wait(run_id, timeout_s=300)

    assert publish("SELECT 1 AS id, 'ann' AS name")["state"] == "COMPLETED"
    widened = publish("SELECT 2 AS id, 'bo' AS name, 30 AS age")
    assert widened["state"] == "COMPLETED", widened["error"]
    assert [field.name for field in catalog.load_table(table).schema().fields] == [
        "id",
        "name",
        "age",
    ]
    assert all(not field.required for field in catalog.load_table(table).schema().fields)
    assert rows_of(catalog, table) == [
        {"id": 1, "name": "ann", "age": None},
        {"id": 2, "name": "bo", "age": 30},
    ]

    retyped = publish("SELECT 'three' AS id, 'cy' AS name, 40 AS age")
    assert retyped["state"] == "FAILED"
    assert f"column id is int in {table} and string in the output" in retyped["error"]
    missing = publish("SELECT 4 AS id")
    assert missing["state"] == "FAILED"
    assert f"column name (string) of {table} is missing from the output" in missing["error"]
    assert f"column age (int) of {table} is missing from the output" in missing["error"]
    assert len(rows_of(catalog, table)) == 2  # neither published anything


def test_the_portal_keeps_what_the_unit_says_it_published_and_the_run_page_shows_it(
    app, client, db_engine
):
    reported = unit_reports.reported_result(
        9,
        {
            "outputs": {},
            "published": {
                "daily": {
                    "table": "sales.daily",
                    "mode": "append",
                    "snapshot_id": 4242,
                    "rows_added": 1200,
                },
                # The unit's word is checked: no run-only namespace, no extra keys, numbers.
                "sneaky": {
                    "table": "results.e1_big",
                    "mode": "append",
                    "snapshot_id": 1,
                    "rows_added": 1,
                },
                "odd": {"table": "sales.odd", "mode": "append", "snapshot_id": "1"},
                # A step that publishes nothing, or elsewhere than its target, is not believed.
                "plain": {
                    "table": "sales.other",
                    "mode": "append",
                    "snapshot_id": 7,
                    "rows_added": 1,
                },
                "moved": {
                    "table": "sales.elsewhere",
                    "mode": "overwrite",
                    "snapshot_id": 8,
                    "rows_added": 1,
                },
            },
        },
        {
            "daily": ("sales.daily", "append"),
            "sneaky": ("results.e1_big", "append"),
            "odd": ("sales.odd", "append"),
            "moved": ("sales.moved", "append"),
        },
    )
    assert reported["published"] == {
        "daily": {"table": "sales.daily", "mode": "append", "snapshot_id": 4242, "rows_added": 1200}
    }

    owner = make_user(db_engine)
    workflow = workflow_for(db_engine, owner)
    warehouse, unit = warehouse_row(db_engine, owner), unit_row(db_engine, owner)
    sign_in_as(client, owner)
    completed = execution_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        unit,
        state="COMPLETED",
        run_id="r",
        outputs=json.dumps(reported),
    )
    api = Api(client, token_for(app, owner))
    answer = api.call("GET", f"/api/v1/executions/{completed.id}").get_json()
    assert answer["published"] == [
        {
            "step": "daily",
            "table": "sales.daily",
            "mode": "append",
            "snapshot_id": 4242,
            "rows_added": 1200,
        }
    ]
    page = client.get(f"/executions/{completed.id}").get_data(as_text=True)
    shown = re.search(r'data-testid="execution-published">(.*?)</article>', page, re.S).group(1)
    assert "sales.daily" in shown and ">4242<" in shown and "1,200" in shown
    assert f'href="/warehouses/{warehouse.id}/tables/sales.daily"' in shown  # the table's page
    failed = execution_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        unit,
        state="FAILED",
        run_id="r",
        outputs=json.dumps(reported),
    )
    page = client.get(f"/executions/{failed.id}").get_data(as_text=True)
    assert 'data-testid="execution-published"' not in page
    assert api.call("GET", f"/api/v1/executions/{failed.id}").get_json()["published"] == []


def test_a_cancelled_run_publishes_nothing_and_leaves_its_branch_for_inspection(
    host, lakehouse, warehouses
):
    """A staged table keeps the run's branch; a table whose step never ran loses the branch the
    run made ahead for it (made as the run started, beside its first step)."""
    namespace = f"pub_{secrets.token_hex(3)}"
    warehouse, table, later = warehouses[0], f"{namespace}.kept", f"{namespace}.later"
    catalog = reader(lakehouse, warehouse)
    first_id, _ = submit(
        host,
        lakehouse,
        warehouse,
        [
            published_step("rows", "SELECT 1 AS id", table),
            published_step("later", "SELECT 1 AS id", later),
        ],
    )
    assert host.wait(first_id, timeout_s=300)["state"] == "COMPLETED"
    main = catalog.load_table(table).current_snapshot().snapshot_id

    run_id, spec = submit(
        host,
        lakehouse,
        warehouse,
        [
            published_step("rows", "SELECT 2 AS id", table),
            sleeping_step(120),
            published_step("later", "SELECT 2 AS id", later),
        ],
    )
    branch = f"lakeport_run_{spec['execution_id']}"
    until_step_done(host, run_id, 0)
    deadline = time.monotonic() + 60
    while branch not in catalog.load_table(later).metadata.refs:  # made ahead of its step
        assert time.monotonic() < deadline, catalog.load_table(later).metadata.refs
        time.sleep(0.1)
    host.cancel(run_id)
    cancelled = host.wait(run_id, timeout_s=300)
    assert cancelled["state"] == "CANCELLED"
    assert set(catalog.load_table(later).metadata.refs) == {"main"}
    assert rows_of(catalog, later) == [{"id": 1}]
    loaded = catalog.load_table(table)
    assert loaded.current_snapshot().snapshot_id == main
    assert rows_of(catalog, table) == [{"id": 1}]
    assert loaded.metadata.refs[branch].max_ref_age_ms == 7 * 24 * 3600 * 1000
    on_branch = loaded.scan(snapshot_id=loaded.metadata.refs[branch].snapshot_id).to_arrow()
    assert sorted(on_branch["id"].to_pylist()) == [1, 2]
    assert any(
        f"its rows stay on branch {branch}" in line["message"]
        for line in cancelled["progress"]["logs"]
    )


def test_overwriting_partitions_replaces_only_those_its_rows_fall_in(host, lakehouse, warehouses):
    warehouse, table = warehouses[0], f"pub_{secrets.token_hex(3)}.by_day"
    catalog = reader(lakehouse, warehouse)
    catalog.create_namespace_if_not_exists(table.split(".")[0])
    created = catalog.create_table(
        table, schema=pa.schema([pa.field("day", pa.int64()), pa.field("v", pa.string())])
    )
    with created.update_spec() as spec:
        spec.add_identity("day")
    catalog.load_table(table).append(pa.table({"day": [1, 2, 2], "v": ["one", "two", "two again"]}))

    run_id, _ = submit(
        host,
        lakehouse,
        warehouse,
        [
            published_step(
                "day_two",
                "SELECT CAST(2 AS BIGINT) AS day, 'new two' AS v",
                table,
                "overwrite-partitions",
            )
        ],
    )
    run = host.wait(run_id, timeout_s=300)
    assert run["state"] == "COMPLETED", run["error"]
    assert rows_of(catalog, table) == [{"day": 1, "v": "one"}, {"day": 2, "v": "new two"}]


def test_a_merge_replaces_rows_whose_keys_match_and_adds_the_others(host, lakehouse, warehouses):
    warehouse, table = warehouses[0], f"pub_{secrets.token_hex(3)}.prices"
    catalog = reader(lakehouse, warehouse)

    def merge(code: str) -> dict:
        target = {"table": table, "mode": "merge", "keys": ["sku"]}
        run_id, _ = submit(
            host, lakehouse, warehouse, [{**catalog_step("prices", code), "publish": target}]
        )
        return host.wait(run_id, timeout_s=300)

    first = merge("SELECT * FROM VALUES ('a', 1), ('b', 2) AS prices(sku, price)")
    assert first["state"] == "COMPLETED", first["error"]
    second = merge("SELECT * FROM VALUES ('b', 20), ('c', 3) AS prices(sku, price)")
    assert second["state"] == "COMPLETED", second["error"]
    assert second["result"]["published"]["prices"]["rows_added"] == 1
    assert rows_of(catalog, table) == [
        {"sku": "a", "price": 1},
        {"sku": "b", "price": 20},
        {"sku": "c", "price": 3},
    ]
    missing_key = merge("SELECT 5 AS price")
    assert missing_key["state"] == "FAILED"
    assert "missing from the output" in missing_key["error"]
