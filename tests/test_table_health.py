"""A table's health, policy and story (app/tables/): the policy form's validation, who may see
and set a policy (404 for anyone without access), the policy pass's decisions (queued on an idle
unit of the owner's, skipped with a reason while none runs or a publish may be in flight, pins
kept by expiry), and the health the page shows against an independent pyiceberg read of the
same table on the local stack. The compaction itself, on a real unit, is
tests/test_table_maintenance.py."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from sqlmodel import Session, select

from app.compute_units import service as unit_service
from app.iceberg_storage import TableHealth
from app.models import (
    AuditEvent,
    ComputeUnit,
    Execution,
    MaintenanceJob,
    TablePolicy,
    WarehouseShare,
)
from app.tables import queries, work
from tests.factories import (
    Api,
    add,
    csrf,
    execution_row,
    make_user,
    reload,
    sign_in_as,
    signed_in_owners_warehouse,
    text,
    token_for,
    unit_row,
    warehouse_row,
    workflow_for,
)

TABLE = "sales.daily"
ROWS = pa.schema([("id", pa.int64()), ("label", pa.string())])


def section(warehouse_id: int, part: str, name: str = TABLE) -> str:
    return f"/warehouses/{warehouse_id}/tables/{name}/{part}"


def save(client, warehouse_id: int, **fields):
    return client.post(
        section(warehouse_id, "policy"),
        data={"small_file_mb": "32", **fields},
        headers={"X-CSRFToken": csrf(client)},
    )


def policy_row(db_engine, warehouse_id: int) -> TablePolicy | None:
    with Session(db_engine) as db:
        return db.exec(select(TablePolicy).where(TablePolicy.warehouse_id == warehouse_id)).first()


# --------------------------------------------------------------------------- the form (light)
def test_the_policy_form_validates_every_field_and_saves_a_valid_policy(
    client, newcomer, db_engine
):
    warehouse = warehouse_row(db_engine, newcomer)
    for fields, field, message in [
        ({"small_file_mb": "0"}, "small_file_mb", "from 1 to 1,024"),
        ({"small_file_mb": "abc"}, "small_file_mb", "from 1 to 1,024"),
        ({"compact_small_files": "1"}, "compact_small_files", "from 2 to"),
        ({"compact_small_files": "-5"}, "compact_small_files", "from 2 to"),
        ({"expire_days": "0"}, "expire_days", "from 1 to 3,650"),
        ({"expire_days": "99999999999"}, "expire_days", "from 1 to 3,650"),
    ]:
        response = save(client, warehouse.id, **fields)
        assert response.status_code == 422, fields
        page = text(response)
        error = re.search(rf'id="table-policy-error-{field}">([^<]*)<', page)
        assert error and message in error.group(1), (fields, page)
        assert policy_row(db_engine, warehouse.id) is None  # nothing half-made
    response = save(client, warehouse.id, compact_small_files="20", expire_days="7")
    assert response.status_code == 200 and "Policy saved" in text(response)
    policy = policy_row(db_engine, warehouse.id)
    assert (policy.table_name, policy.small_file_mb) == (TABLE, 32)
    assert (policy.compact_small_files, policy.expire_days) == (20, 7)
    # Empty fields turn a part off; the same table keeps one policy.
    assert save(client, warehouse.id, compact_small_files="", expire_days="").status_code == 200
    policy = policy_row(db_engine, warehouse.id)
    assert (policy.compact_small_files, policy.expire_days) == (None, None)
    with Session(db_engine) as db:
        events = db.exec(
            select(AuditEvent)
            .where(AuditEvent.action == "table.policy")
            .where(AuditEvent.object_id == str(warehouse.id))
        ).all()
    assert len(events) == 2 and json.loads(events[0].detail)["table"] == TABLE
    # A table the unit's maintenance could not name gets no policy.
    for name in ("sales.daily-2", "sales.eu.daily"):
        refused = client.post(
            section(warehouse.id, "policy", name),
            data={"small_file_mb": "32", "expire_days": "3"},
            headers={"X-CSRFToken": csrf(client)},
        )
        assert refused.status_code == 422 and "namespace.table" in text(refused), name
    with Session(db_engine) as db:
        policies = db.exec(select(TablePolicy).where(TablePolicy.warehouse_id == warehouse.id))
        assert [policy.table_name for policy in policies] == [TABLE]
    # A name that is no table name is no table.
    assert client.get(section(warehouse.id, "policy", "no dots")).status_code == 404


def test_an_archived_warehouses_table_policy_is_refused(client, newcomer, db_engine):
    warehouse = warehouse_row(db_engine, newcomer, status="archived")
    response = save(client, warehouse.id, compact_small_files="10")
    assert response.status_code == 422 and "Only an active warehouse" in text(response)
    assert policy_row(db_engine, warehouse.id) is None


# --------------------------------------------------------------------------- access (light)
def test_readers_see_the_policy_writers_set_it_and_others_get_404_everywhere(
    client, newcomer, db_engine
):
    owner = make_user(db_engine)
    warehouse = warehouse_row(db_engine, owner)
    add(db_engine, TablePolicy(warehouse_id=warehouse.id, table_name=TABLE, expire_days=9))
    routes = [("get", "health"), ("get", "policy"), ("post", "policy"), ("get", "story")]

    # No access at all: every route answers 404, as for a missing warehouse.
    for method, part in routes:
        for warehouse_id in (warehouse.id, 999_999):
            response = getattr(client, method)(
                section(warehouse_id, part), headers={"X-CSRFToken": csrf(client)}
            )
            assert response.status_code == 404, (method, part, warehouse_id)

    share = add(
        db_engine, WarehouseShare(warehouse_id=warehouse.id, user_id=newcomer.id, level="read")
    )
    page = text(client.get(section(warehouse.id, "policy")))
    assert 'data-testid="table-policy-facts"' in page and "older than 9 days" in page
    assert 'data-testid="table-policy-form"' not in page
    assert save(client, warehouse.id, expire_days="1").status_code == 404
    assert policy_row(db_engine, warehouse.id).expire_days == 9

    with Session(db_engine) as db:
        db.get(WarehouseShare, share.id).level = "write"
        db.commit()
    assert 'data-testid="table-policy-form"' in text(client.get(section(warehouse.id, "policy")))
    assert save(client, warehouse.id, expire_days="3").status_code == 200
    assert policy_row(db_engine, warehouse.id).updated_by == newcomer.id
    # Starting units for maintenance spends the owner's: a writer's form has no box for it,
    # and a box ticked anyway changes nothing; through the API, asking is refused.
    page = text(client.get(section(warehouse.id, "policy")))
    assert 'data-testid="table-policy-start-unit"' not in page
    assert "owner decides this" in page
    assert save(client, warehouse.id, expire_days="3", start_unit="on").status_code == 200
    assert policy_row(db_engine, warehouse.id).start_unit is False
    writer_api = Api(client, token_for(client.application, newcomer))
    path = f"/api/v1/warehouses/{warehouse.id}/tables/{TABLE}/policy"
    refused = writer_api.call("POST", path, {"expire_days": 3, "start_unit": True})
    assert (
        refused.status_code == 403 and "Only the warehouse's owner" in refused.get_json()["detail"]
    )
    assert policy_row(db_engine, warehouse.id).start_unit is False
    assert writer_api.call("POST", path, {"expire_days": 5}).status_code == 200
    assert writer_api.call("POST", path, {"expire_days": 5, "start_unit": False}).status_code == 200

    sign_in_as(client, owner)
    assert save(client, warehouse.id, expire_days="4").status_code == 200
    assert policy_row(db_engine, warehouse.id).expire_days == 4


def test_the_form_and_the_api_keep_start_unit_and_the_page_says_it(
    app, client, newcomer, db_engine
):
    warehouse = warehouse_row(db_engine, newcomer)
    response = save(client, warehouse.id, compact_small_files="20", start_unit="on")
    assert response.status_code == 200 and policy_row(db_engine, warehouse.id).start_unit
    assert re.search(r'data-testid="table-policy-start-unit"\s+checked', text(response))
    refused = save(client, warehouse.id, compact_small_files="1", start_unit="on")
    assert re.search(r'data-testid="table-policy-start-unit"\s+checked', text(refused))
    assert save(client, warehouse.id, compact_small_files="20").status_code == 200
    assert not policy_row(db_engine, warehouse.id).start_unit  # unticked: off
    with Session(db_engine) as db:
        event = db.exec(
            select(AuditEvent)
            .where(AuditEvent.action == "table.policy")
            .where(AuditEvent.object_id == str(warehouse.id))
            .order_by(AuditEvent.id.desc())
        ).first()
    detail = json.loads(event.detail)
    assert (detail["before"]["start_unit"], detail["after"]["start_unit"]) == (True, False)

    path = f"/api/v1/warehouses/{warehouse.id}/tables/{TABLE}"
    api = Api(client, token_for(app, newcomer))
    saved = api.call("POST", f"{path}/policy", {"compact_small_files": 20, "start_unit": True})
    assert saved.status_code == 200 and saved.get_json()["start_unit"] is True
    assert policy_row(db_engine, warehouse.id).start_unit
    # A reader sees it among the policy's facts.
    reader = make_user(db_engine)
    add(db_engine, WarehouseShare(warehouse_id=warehouse.id, user_id=reader.id, level="read"))
    readers = app.test_client()
    sign_in_as(readers, reader)
    facts = text(readers.get(section(warehouse.id, "policy")))
    assert "a unit is started for the job, and stopped after" in facts
    # Left out, it stays as it is (a client that does not know it keeps it); false turns it off.
    assert api.call("POST", f"{path}/policy", {"expire_days": 3}).get_json()["start_unit"] is True
    turned_off = api.call("POST", f"{path}/policy", {"expire_days": 3, "start_unit": False})
    assert turned_off.get_json()["start_unit"] is False
    assert api.call("POST", f"{path}/policy", {"expire_days": 3}).get_json()["start_unit"] is False


def test_the_api_reads_and_sets_a_policy_with_the_same_rules(app, client, newcomer, db_engine):
    owner = make_user(db_engine)
    warehouse = warehouse_row(db_engine, owner)
    add(db_engine, WarehouseShare(warehouse_id=warehouse.id, user_id=newcomer.id, level="read"))
    path = f"/api/v1/warehouses/{warehouse.id}/tables/{TABLE}"
    reader = Api(client, token_for(app, newcomer))
    assert reader.call("GET", f"{path}/policy").get_json()["compact_small_files"] is None
    assert reader.call("POST", f"{path}/policy", {"expire_days": 3}).status_code == 404
    assert reader.call("GET", f"{path}/maintenance").get_json() == []
    stranger = Api(client, token_for(app, make_user(db_engine)))
    for method, part in (
        ("GET", "policy"),
        ("POST", "policy"),
        ("GET", "maintenance"),
        ("GET", "publishes"),
    ):
        body = {} if method == "POST" else None
        assert stranger.call(method, f"{path}/{part}", body).status_code == 404, part

    writer = Api(client, token_for(app, owner))
    refused = writer.call("POST", f"{path}/policy", {"compact_small_files": 1})
    assert refused.status_code == 400 and refused.get_json()["field"] == "compact_small_files"
    assert writer.call("POST", f"{path}/policy", {"surprise": 1}).status_code == 400
    saved = writer.call("POST", f"{path}/policy", {"compact_small_files": 25, "expire_days": 30})
    assert saved.status_code == 200, saved.get_json()
    assert (saved.get_json()["compact_small_files"], saved.get_json()["expire_days"]) == (25, 30)
    assert reader.call("GET", f"{path}/policy").get_json()["expire_days"] == 30
    looking = Api(client, token_for(app, owner, scope="read"))
    assert looking.call("POST", f"{path}/policy", {"expire_days": 1}).status_code == 403
    assert policy_row(db_engine, warehouse.id).expire_days == 30


# --------------------------------------------------------------------------- decisions (light)
def health_of(commits: list[tuple[int, int]], current: int, small: int = 0) -> TableHealth:
    return TableHealth(
        data_files=small,
        data_bytes=small * 10,
        small_files=small,
        small_file_bytes=32 << 20,
        delete_files=0,
        records=small,
        snapshots=len(commits),
        snapshot_commits=tuple(commits),
        current_snapshot_id=current,
        last_compaction_ms=None,
    )


def test_expiry_keeps_every_snapshot_a_pinned_rerun_reads_and_the_current_one():
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    day = 86_400_000
    at = int(now.timestamp() * 1000)
    health = health_of([(1, at - 30 * day), (2, at - 20 * day), (3, at - 10 * day), (4, at)], 4)
    cutoff = queries.expire_before(health, set(), now, 7)
    assert cutoff == now - timedelta(days=7) and queries.expiry_due(health, cutoff) == 3
    # Snapshot 2 is pinned: nothing from it on expires (a snapshot at the cutoff is kept).
    cutoff = queries.expire_before(health, {2}, now, 7)
    assert cutoff == now - timedelta(days=20) and queries.expiry_due(health, cutoff) == 1
    # Only the current snapshot is old: nothing is due.
    only = health_of([(9, at - 30 * day)], 9)
    assert queries.expiry_due(only, queries.expire_before(only, set(), now, 7)) == 0


def test_a_live_execution_may_publish_unless_its_steps_name_other_tables(app, newcomer, db_engine):
    warehouse = warehouse_row(db_engine, newcomer)
    unit = unit_row(db_engine, newcomer)
    publishing = [
        {
            "name": "out",
            "kind": "sql",
            "code": "SELECT 1",
            "output": True,
            "publish": {"table": TABLE, "mode": "append"},
        }
    ]
    elsewhere = [{**publishing[0], "publish": {"table": "sales.other", "mode": "append"}}]
    plain = [{"name": "out", "kind": "sql", "code": "SELECT 1", "output": True}]
    ids = {}
    for label, steps in (("publishing", publishing), ("elsewhere", elsewhere), ("plain", plain)):
        workflow = workflow_for(db_engine, newcomer, steps)
        ids[label] = execution_row(
            db_engine, newcomer, workflow, warehouse, unit, state="RUNNING"
        ).id
    done = execution_row(
        db_engine,
        newcomer,
        workflow_for(db_engine, newcomer, publishing),
        warehouse,
        unit,
        state="COMPLETED",
    )
    with app.app_context():
        in_flight = set(queries.publishes_in_flight(warehouse, TABLE))
    assert in_flight == {ids["publishing"], ids["plain"]} and done.id not in in_flight


def test_pinned_snapshots_are_the_reruns_pins_and_their_increments_starts(app, newcomer, db_engine):
    warehouse = warehouse_row(db_engine, newcomer)
    workflow, unit = workflow_for(db_engine, newcomer), unit_row(db_engine, newcomer)

    def execution(**fields) -> Execution:
        return add(
            db_engine,
            Execution(
                owner_id=newcomer.id,
                workflow_id=workflow.id,
                workflow_version_id=1,
                workflow_version=1,
                compute_unit_id=unit.id,
                warehouse_id=warehouse.id,
                warehouse_name=warehouse.name,
                state="COMPLETED",
                **fields,
            ),
        )

    # The original read TABLE incrementally after snapshot 10: its re-run reads that again.
    changes = [
        {"table": TABLE, "from_snapshot_id": 10},
        {"table": "sales.other", "from_snapshot_id": 20},
    ]
    original = execution(lineage=json.dumps({"read": [], "wrote": [], "changes": changes}))
    for pins in ({TABLE: 11, "sales.other": 12}, {TABLE: 13}, {"sales.other": 14}):
        execution(pinned_to=json.dumps({"execution_id": original.id, "tables": pins}))
    with app.app_context():
        assert queries.pinned_snapshots(warehouse, TABLE) == {10, 11, 13}


# --------------------------------------------------------------------------- on the local stack
@pytest.fixture
def lake(lakehouse_app, lakehouse, db_engine):
    """A signed-in owner's real warehouse with `sales.daily`: 12 appends of 10 rows each."""
    client, owner, warehouse, catalog = signed_in_owners_warehouse(
        lakehouse_app, lakehouse, db_engine, "healthy", "sales"
    )
    table = catalog.create_table(TABLE, schema=ROWS)
    for batch in range(12):
        table.append(
            pa.table(
                {"id": list(range(batch * 10, batch * 10 + 10)), "label": ["x" * batch] * 10},
                schema=ROWS,
            )
        )
    return lakehouse_app, client, owner, warehouse, catalog


def stat(page: str, name: str) -> str:
    found = re.search(rf'data-testid="health-{name}">(.*?)</p>', page, re.S)
    assert found, name
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def test_the_health_shown_equals_an_independent_pyiceberg_read(lake, db_engine):
    app, client, owner, warehouse, catalog = lake
    table = catalog.load_table(TABLE)
    files = table.inspect.data_files().to_pylist()
    sizes = [row["file_size_in_bytes"] for row in files]
    page = text(client.get(section(warehouse.id, "health")))
    assert stat(page, "data-files") == str(len(files)) == "12"
    assert stat(page, "small-files") == str(sum(size < 32 << 20 for size in sizes))
    assert stat(page, "delete-files") == str(len(table.inspect.delete_files().to_pylist()))
    assert stat(page, "snapshots") == str(len(table.snapshots())) == "12"
    assert stat(page, "last-compaction") == "never"
    average = sum(sizes) // len(sizes)
    assert stat(page, "average-file").replace("\xa0", " ") in (
        f"{average} Bytes",
        f"{average / 1000:.1f} kB",
    )
    # A smaller threshold counts fewer files as small: the page follows the policy.
    threshold_mb = 1
    add(
        db_engine,
        TablePolicy(warehouse_id=warehouse.id, table_name=TABLE, small_file_mb=threshold_mb),
    )
    page = text(client.get(section(warehouse.id, "health")))
    assert stat(page, "small-files") == str(sum(size < threshold_mb << 20 for size in sizes))
    # The story lists each snapshot, newest first, with the run that wrote it and its rows added;
    # a publish whose snapshot expired stays listed; the workflows that read it are named.
    newest = max(table.snapshots(), key=lambda s: s.timestamp_ms)
    writer, reader = workflow_for(db_engine, owner), workflow_for(db_engine, owner)
    unit = unit_row(db_engine, owner)
    wrote = [
        {"table": TABLE, "step": "daily", "snapshot_id": newest.snapshot_id, "snapshot_at_ms": 1},
        {
            "table": TABLE,
            "step": "daily",
            "snapshot_id": 4242,
            "snapshot_at_ms": 1000,
            "added_records": 7,
        },
    ]
    publisher = execution_row(
        db_engine,
        owner,
        writer,
        warehouse,
        unit,
        state="COMPLETED",
        lineage=json.dumps({"read": [], "wrote": wrote}),
    )
    read = [{"table": TABLE, "snapshot_id": newest.snapshot_id}]
    execution_row(
        db_engine,
        owner,
        reader,
        warehouse,
        unit,
        state="COMPLETED",
        lineage=json.dumps({"read": read, "wrote": []}),
    )
    story = text(client.get(section(warehouse.id, "story")))
    assert f">execution #{publisher.id}</a>" in story and "step <code>daily</code>" in story
    assert f">{writer.name}</a>" in story.split('data-testid="table-workflows"')[1].split("</p>")[0]
    assert f">{reader.name}</a>" in story.split('data-testid="table-consumers"')[1].split("</p>")[0]
    assert '<code>4242</code> <small class="muted">(expired)</small>' in story
    listed = re.findall(
        r"<code>(\d+)</code>", story.split('data-testid="table-publishes"')[1].split("</table>")[0]
    )
    newest_first = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)
    assert [int(s) for s in listed] == [s.snapshot_id for s in newest_first] + [4242]
    connect = story.split('data-testid="read-snippet"')[1]
    assert f"lake.{TABLE}" in connect and warehouse.lakekeeper_name in connect
    assert "&lt;client-secret&gt;" in connect and "secret_access_key" not in connect
    # The table page itself loads the three sections.
    page = text(client.get(f"/warehouses/{warehouse.id}/tables/{TABLE}"))
    for part in ("health", "policy", "story"):
        assert section(warehouse.id, part) in page
    # The API answers the same figures.
    api = Api(client, token_for(app, owner))
    shown = api.call("GET", f"/api/v1/warehouses/{warehouse.id}/tables/{TABLE}/health").get_json()
    assert (shown["data_files"], shown["small_files"], shown["snapshots"]) == (
        len(files),
        sum(size < threshold_mb << 20 for size in sizes),
        len(table.snapshots()),
    )
    told = api.call("GET", f"/api/v1/warehouses/{warehouse.id}/tables/{TABLE}/publishes")
    told = told.get_json()
    assert [entry["snapshot_id"] for entry in told["publishes"]] == [
        s.snapshot_id for s in newest_first
    ] + [4242]
    assert (told["publishes"][0]["execution_id"], told["publishes"][0]["step"]) == (
        publisher.id,
        "daily",
    )
    assert told["publishes"][-1] == {
        "snapshot_id": 4242,
        "committed_at_ms": 1000,
        "operation": "",
        "added_records": 7,
        "execution_id": publisher.id,
        "step": "daily",
        "expired": True,
    }
    assert told["written_by"] == [{"id": writer.id, "name": writer.name}]
    assert told["read_by"] == [{"id": reader.id, "name": reader.name}]
    missing = api.call("GET", f"/api/v1/warehouses/{warehouse.id}/tables/sales.nope/publishes")
    assert missing.status_code == 404 and missing.get_json()["detail"] == "No such table."


def test_the_policy_pass_queues_on_an_idle_unit_and_records_why_it_waits(lake, db_engine):
    app, client, owner, warehouse, catalog = lake
    add(db_engine, TablePolicy(warehouse_id=warehouse.id, table_name=TABLE, compact_small_files=10))
    with app.app_context():
        assert work.apply_policies() == []
        assert work.apply_policies() == []  # the same reason is recorded once
    jobs = table_jobs(db_engine, warehouse.id)
    assert [(job.state, job.skipped) for job in jobs] == [("done", work.NO_UNIT)]
    assert jobs[0].compact and jobs[0].data_files_before == 12

    # A running execution into the warehouse without named outputs may write the table.
    unit = unit_row(db_engine, owner)
    workflow = workflow_for(db_engine, owner)
    running = execution_row(db_engine, owner, workflow, warehouse, unit, state="RUNNING")
    with app.app_context():
        assert work.apply_policies() == []
    assert table_jobs(db_engine, warehouse.id)[-1].skipped == (
        f"a publish to this table may be in flight (execution #{running.id})"
    )
    # Running on another unit of the owner's: this one is idle, but the publish still waits.
    with Session(db_engine) as db:
        db.get(Execution, running.id).state = "COMPLETED"
        db.commit()
    busy = unit_row(db_engine, owner)
    execution_row(
        db_engine, owner, workflow, warehouse_row(db_engine, owner), busy, state="RUNNING"
    )
    with app.app_context():
        queued = work.apply_policies()
        assert work.apply_policies() == []  # a live job of the table: nothing more
    assert [job.compute_unit_id for job in queued] == [unit.id]
    job = table_jobs(db_engine, warehouse.id)[-1]
    assert (job.state, job.table_name, job.compact, job.expire_before) == (
        "queued",
        TABLE,
        True,
        None,
    )
    history = text(client.get(section(warehouse.id, "story")))
    assert (
        f"skipped: {work.NO_UNIT}" in history
        and f'data-testid="maintenance-job-{job.id}"' in history
    )


def table_jobs(db_engine, warehouse_id: int) -> list[MaintenanceJob]:
    with Session(db_engine) as db:
        return list(
            db.exec(
                select(MaintenanceJob)
                .where(MaintenanceJob.warehouse_id == warehouse_id)
                .order_by(MaintenanceJob.id)
            )
        )


# ------------------------------------------------------ a unit started for the job (start_unit)
def owners_units(db_engine, owner) -> list[ComputeUnit]:
    with Session(db_engine) as db:
        return list(
            db.exec(
                select(ComputeUnit).where(ComputeUnit.owner_id == owner.id).order_by(ComputeUnit.id)
            )
        )


def set_row(db_engine, model, row_id: int, **fields) -> None:
    with Session(db_engine) as db:
        row = db.get(model, row_id)
        for name, value in fields.items():
            setattr(row, name, value)
        db.add(row)
        db.commit()


class UnitRuns:
    """Stands in for the maintenance run on the unit (app/usage/work.py `_run_maintenance`, which
    the heavy test runs on a real unit): records the unit and tables each run had, and answers
    what the unit reports of a compaction of 12 files into 1."""

    def __init__(self) -> None:
        self.runs: list[tuple[int | None, list[str] | None, dict | None]] = []

    def __call__(self, job, warehouse, owner, unit, tables=None, extra=None) -> dict:
        self.runs.append((unit.id if unit else None, tables, extra))
        return {TABLE: {"data_files_before": 12, "data_files_after": 1, "rewritten_data_files": 12}}


def test_with_start_unit_the_pass_starts_a_unit_runs_the_job_there_and_stops_it_after(
    lake, db_engine, monkeypatch
):
    from app.usage import work as usage_work

    app, client, owner, warehouse, catalog = lake
    policy = add(
        db_engine, TablePolicy(warehouse_id=warehouse.id, table_name=TABLE, compact_small_files=10)
    )
    with app.app_context():
        assert work.apply_policies() == []  # start_unit off: the skip stays, no unit started
    assert [job.skipped for job in table_jobs(db_engine, warehouse.id)] == [work.NO_UNIT]
    assert owners_units(db_engine, owner) == []

    set_row(db_engine, TablePolicy, policy.id, start_unit=True)
    with app.app_context():
        (queued,) = work.apply_policies()
        assert work.apply_policies() == []  # its job is live: no second unit while one starts
    (unit,) = owners_units(db_engine, owner)
    assert (unit.state, unit.kind, unit.cpus, unit.memory_gb, unit.worker_nodes) == (
        "PENDING",
        "local",
        app.config["CU_POOL_CPUS"],
        app.config["CU_POOL_MEMORY_GB"],
        0,
    )
    assert unit.name.startswith(work.STARTED_UNIT_NAME)
    job = table_jobs(db_engine, warehouse.id)[-1]
    assert (job.id, job.state, job.compute_unit_id, job.started_unit, job.compact) == (
        queued.id,
        "queued",
        unit.id,
        True,
        True,
    )

    runs = UnitRuns()
    monkeypatch.setattr(usage_work, "_run_maintenance", runs)
    with app.app_context():
        usage_work.run_maintenance_job(job.id)  # the unit still starts: the job waits
    assert reload(db_engine, MaintenanceJob, job.id).state == "queued" and runs.runs == []
    assert reload(db_engine, ComputeUnit, unit.id).state == "PENDING"

    set_row(db_engine, ComputeUnit, unit.id, state="RUNNING")  # as the worker's start would
    with app.app_context():
        usage_work.run_maintenance_job(job.id)
    assert runs.runs == [(unit.id, [TABLE], {"compact": True, "expire_before_ms": None})]
    done = reload(db_engine, MaintenanceJob, job.id)
    assert (done.state, done.data_files_before, done.data_files_after) == ("done", 12, 1)
    assert done.compute_unit_id == unit.id and done.gb_hours > 0
    stopped = reload(db_engine, ComputeUnit, unit.id)
    assert stopped.state in ("TERMINATING", "TERMINATED")
    assert "stopped by its table's maintenance" in stopped.reason
    row = text(client.get(section(warehouse.id, "story"))).split(
        f'data-testid="maintenance-job-{job.id}"'
    )[1]
    assert f"#{unit.id}, started for it" in row.split("</tr>")[0]
    api = Api(client, token_for(app, owner))
    (told,) = [
        entry
        for entry in api.call(
            "GET", f"/api/v1/warehouses/{warehouse.id}/tables/{TABLE}/maintenance"
        ).get_json()
        if entry["id"] == job.id
    ]
    assert (told["compute_unit_id"], told["started_unit"]) == (unit.id, True)


def test_a_unit_that_does_not_start_fails_the_job_with_why_and_is_cleaned_up(lake, db_engine):
    from app.usage import work as usage_work

    app, client, owner, warehouse, catalog = lake
    add(
        db_engine,
        TablePolicy(
            warehouse_id=warehouse.id, table_name=TABLE, compact_small_files=10, start_unit=True
        ),
    )
    with app.app_context():
        (first,) = work.apply_policies()
    set_row(db_engine, ComputeUnit, first.compute_unit_id, state="FAILED", reason="head died")
    with app.app_context():
        usage_work.run_maintenance_job(first.id)
    failed = reload(db_engine, MaintenanceJob, first.id)
    assert (failed.state, failed.error, failed.started_at) == (
        "failed",
        "the unit started for it ended before it ran: head died",
        None,
    )
    # Within the hour after a failed start, no unit is started again for the table: it says so
    # (the job asked two hours ago, so the compaction's own spacing has passed).
    set_row(db_engine, MaintenanceJob, first.id, created_at=first.created_at - timedelta(hours=2))
    with app.app_context():
        assert work.apply_policies() == []
    assert "did not start within the last 1 h" in table_jobs(db_engine, warehouse.id)[-1].skipped
    assert len(owners_units(db_engine, owner)) == 1

    # An hour on, one is; still STARTING after START_PATIENCE, it is stopped and the job failed.
    set_row(db_engine, MaintenanceJob, first.id, ended_at=failed.ended_at - timedelta(hours=2))
    with app.app_context():
        (second,) = work.apply_policies()
    assert second.compute_unit_id != first.compute_unit_id
    set_row(db_engine, ComputeUnit, second.compute_unit_id, state="STARTING")
    set_row(
        db_engine,
        MaintenanceJob,
        second.id,
        created_at=second.created_at - unit_service.START_PATIENCE - timedelta(seconds=1),
    )
    with app.app_context():
        usage_work.run_maintenance_job(second.id)
    failed = reload(db_engine, MaintenanceJob, second.id)
    assert failed.state == "failed" and "was not running after 20 min" in failed.error
    unit = reload(db_engine, ComputeUnit, second.compute_unit_id)
    assert unit.state == "TERMINATED" and "stopped by its table's maintenance" in unit.reason
    history = text(client.get(section(warehouse.id, "story")))
    assert "failed: the unit started for it was not running after 20 min" in history


def test_a_unit_started_for_a_job_is_within_the_owners_limit_and_not_stopped_while_in_use(
    lake, db_engine
):
    app, client, owner, warehouse, catalog = lake
    add(
        db_engine,
        TablePolicy(
            warehouse_id=warehouse.id, table_name=TABLE, compact_small_files=10, start_unit=True
        ),
    )
    # The owner's only unit is busy and their limit is one unit: none is started, and why.
    app.config["CU_MAX_RUNNING_PER_USER"] = 1
    busy = unit_row(db_engine, owner)
    workflow = workflow_for(db_engine, owner)
    running = execution_row(
        db_engine, owner, workflow, warehouse_row(db_engine, owner), busy, state="RUNNING"
    )
    with app.app_context():
        assert work.apply_policies() == []
    skipped = table_jobs(db_engine, warehouse.id)[-1].skipped
    assert skipped.startswith(work.BUSY_UNITS) and "at most 1 compute units" in skipped
    assert [unit.id for unit in owners_units(db_engine, owner)] == [busy.id]

    # With room for one more, a unit is started; the owner runs something on it meanwhile, so it
    # is not stopped when the job ends (their idle timeout stops it, as any unit of theirs).
    app.config["CU_MAX_RUNNING_PER_USER"] = 2
    with app.app_context():
        (job,) = work.apply_policies()
    set_row(db_engine, ComputeUnit, job.compute_unit_id, state="RUNNING")
    set_row(db_engine, Execution, running.id, compute_unit_id=job.compute_unit_id)
    set_row(db_engine, MaintenanceJob, job.id, state="failed", ended_at=job.created_at)
    with app.app_context():
        work.stop_started_unit(job.id)  # what the job's runner does once the job has ended
    assert reload(db_engine, ComputeUnit, job.compute_unit_id).state == "RUNNING"
