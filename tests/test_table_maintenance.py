"""Compaction by the worker on the owner's unit (heavy: a real compute unit, run under the
lock): a table of many small files, with a policy that asks for compaction, is compacted by
the worker's policy pass on the owner's idle unit through Iceberg's `rewrite_data_files`; an
independent pyiceberg read returns the same rows from fewer files, and the job's record (and
the table page) show the files before and after and the GB-hours spent. Then a table job's
expiry on the same unit removes exactly the snapshots older than its cutoff.

The unit is asked for first and starts while the table is written (it has nothing to do until the
policy asks).

Then the same with no unit of the owner's at all and the policy's *start a unit for the job*: the
worker starts a unit of the pool's size for the job, compacts the table there, and stops the unit
once the job has ended (the decisions around it, with stand-ins: tests/test_table_health.py)."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from sqlmodel import Session, select

from app import create_app
from app.models import ComputeUnit, MaintenanceJob, Warehouse
from tests.factories import (
    add,
    ask_for_unit,
    csrf,
    independent_catalog,
    lakehouse_config,
    make_user,
    register_warehouse,
    reload,
    sign_in_as,
    text,
    until_running,
)

TABLE = "sales.daily"
APPENDS = 40
ROWS = pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("region", pa.string())])


@pytest.fixture
def app(portal_config, lakehouse):
    return create_app(
        lakehouse_config(
            portal_config,
            lakehouse,
            USAGE_SAMPLE_SECONDS=1.0,
            WORKER_SUPERVISOR_SECONDS=1.0,
            # A unit started for a job is of the pool's size (no pool runs here): as ask_for_unit's.
            CU_POOL_CPUS=2,
            CU_POOL_MEMORY_GB=3.0,
        )
    )


def all_rows(catalog) -> list[tuple]:
    rows = catalog.load_table(TABLE).scan().to_arrow().to_pylist()
    return sorted((row["id"], row["amount"], row["region"]) for row in rows)


def table_job(db_engine, warehouse_id: int) -> MaintenanceJob | None:
    with Session(db_engine) as db:
        return db.exec(
            select(MaintenanceJob)
            .where(
                MaintenanceJob.warehouse_id == warehouse_id,
                MaintenanceJob.table_name == TABLE,
                MaintenanceJob.skipped == "",
            )
            .order_by(MaintenanceJob.id.desc())
        ).first()


def test_heavy_the_worker_compacts_a_table_of_small_files_on_the_owners_unit(
    app, client, db_engine, lakehouse, worker
):
    from app.compute_units import service as unit_service

    owner = make_user(db_engine)
    sign_in_as(client, owner)
    cu_id = ask_for_unit(client, "compactor")
    try:
        warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "compacted"))
        catalog = independent_catalog(lakehouse, warehouse)
        catalog.create_namespace_if_not_exists("sales")
        table = catalog.create_table(TABLE, schema=ROWS)
        for batch in range(APPENDS):
            ids = list(range(batch * 25, batch * 25 + 25))
            table.append(
                pa.table(
                    {
                        "id": ids,
                        "amount": [i * 1.5 for i in ids],
                        "region": [f"r{i % 7}" for i in ids],
                    },
                    schema=ROWS,
                )
            )
        before = all_rows(catalog)
        assert len(before) == APPENDS * 25
        assert len(catalog.load_table(TABLE).inspect.data_files()) == APPENDS

        saved = client.post(
            f"/warehouses/{warehouse.id}/tables/{TABLE}/policy",
            data={"small_file_mb": "32", "compact_small_files": "10", "expire_days": ""},
            headers={"X-CSRFToken": csrf(client)},
        )
        assert saved.status_code == 200, text(saved)
        cu = until_running(db_engine, cu_id)
        deadline = time.monotonic() + 400
        while (job := table_job(db_engine, warehouse.id)) is None or job.running:
            assert time.monotonic() < deadline, "the compaction did not finish"
            time.sleep(1)
        assert job.state == "done", job.error
        assert job.compute_unit_id == cu.id and job.compact
        result = json.loads(job.result)
        assert result["rewritten_data_files"] == APPENDS, result
        assert job.data_files_before == APPENDS
        after = len(catalog.load_table(TABLE).inspect.data_files())
        assert job.data_files_after == after == result["added_data_files"] < APPENDS
        assert job.gb_hours is not None and job.gb_hours > 0
        # The same rows, read independently of the portal.
        assert all_rows(catalog) == before
        operations = [s.summary.operation.value for s in catalog.load_table(TABLE).snapshots()]
        assert operations[-1] == "replace"

        health = text(client.get(f"/warehouses/{warehouse.id}/tables/{TABLE}/health"))
        shown = re.search(r'data-testid="health-data-files">(\d+)<', health).group(1)
        assert int(shown) == after
        assert "never" not in health.split('data-testid="health-last-compaction"')[1][:200]
        story = text(client.get(f"/warehouses/{warehouse.id}/tables/{TABLE}/story"))
        row = story.split(f'data-testid="maintenance-job-{job.id}"')[1].split("</tr>")[0]
        assert "compaction" in row and f"{APPENDS} → {after}" in row and "done" in row

        # Expiry on the unit keeps every snapshot from the cutoff on: the policy pass puts the
        # cutoff at the oldest snapshot a pinned re-run reads (tests/test_table_health.py).
        snapshots = sorted(catalog.load_table(TABLE).snapshots(), key=lambda s: s.timestamp_ms)
        pinned = snapshots[5]
        expiry = add(
            db_engine,
            MaintenanceJob(
                owner_id=owner.id,
                warehouse_id=warehouse.id,
                compute_unit_id=cu.id,
                table_name=TABLE,
                retain_last=1,
                expire_before=datetime.fromtimestamp(pinned.timestamp_ms / 1000, timezone.utc),
            ),
        )
        deadline = time.monotonic() + 300
        while (expiry := reload(db_engine, MaintenanceJob, expiry.id)).running:
            assert time.monotonic() < deadline, "the expiry did not finish"
            time.sleep(1)
        assert expiry.state == "done", expiry.error
        kept = {s.snapshot_id for s in catalog.load_table(TABLE).snapshots()}
        assert kept == {s.snapshot_id for s in snapshots[5:]}
        assert json.loads(expiry.result)["snapshots_before"] == len(snapshots)
        assert all_rows(catalog) == before
    finally:
        with app.app_context():
            unit_service.terminate(reload(db_engine, ComputeUnit, cu_id), reason="test over")
        deadline = time.monotonic() + 60
        while reload(db_engine, ComputeUnit, cu_id).state not in ("TERMINATED", "FAILED"):
            assert time.monotonic() < deadline
            time.sleep(0.5)


def write_small_files(catalog, appends: int) -> None:
    catalog.create_namespace_if_not_exists("sales")
    table = catalog.create_table(TABLE, schema=ROWS)
    for batch in range(appends):
        ids = list(range(batch * 25, batch * 25 + 25))
        table.append(
            pa.table(
                {"id": ids, "amount": [i * 1.5 for i in ids], "region": ["r"] * 25}, schema=ROWS
            )
        )


def test_heavy_with_no_unit_the_worker_starts_one_compacts_there_and_stops_it(
    app, client, db_engine, lakehouse, worker
):
    from app.compute_units import service as unit_service

    owner = make_user(db_engine)
    sign_in_as(client, owner)
    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "self-started"))
    catalog = independent_catalog(lakehouse, warehouse)
    write_small_files(catalog, 12)
    before = all_rows(catalog)
    try:
        saved = client.post(
            f"/warehouses/{warehouse.id}/tables/{TABLE}/policy",
            data={"small_file_mb": "32", "compact_small_files": "10", "start_unit": "on"},
            headers={"X-CSRFToken": csrf(client)},
        )
        assert saved.status_code == 200, text(saved)
        deadline = time.monotonic() + 400
        while (job := table_job(db_engine, warehouse.id)) is None or job.running:
            assert time.monotonic() < deadline, "the compaction did not finish"
            time.sleep(1)
        assert job.state == "done", job.error
        assert job.started_unit and job.compact and job.gb_hours > 0
        assert (job.data_files_before, job.data_files_after) == (
            12,
            len(catalog.load_table(TABLE).inspect.data_files()),
        )
        assert job.data_files_after < 12 and all_rows(catalog) == before
        with Session(db_engine) as db:
            units = db.exec(select(ComputeUnit).where(ComputeUnit.owner_id == owner.id)).all()
        assert [unit.id for unit in units] == [job.compute_unit_id]  # one unit, started for it
        deadline = time.monotonic() + 60
        while (unit := reload(db_engine, ComputeUnit, job.compute_unit_id)).state != "TERMINATED":
            assert time.monotonic() < deadline, (unit.state, unit.reason)
            time.sleep(0.5)
        assert unit.started_at is not None and "stopped by its table's maintenance" in unit.reason
        story = text(client.get(f"/warehouses/{warehouse.id}/tables/{TABLE}/story"))
        row = story.split(f'data-testid="maintenance-job-{job.id}"')[1].split("</tr>")[0]
        assert f"#{unit.id}, started for it" in row and "done" in row
    finally:
        with Session(db_engine) as db:
            left = db.exec(
                select(ComputeUnit.id).where(
                    ComputeUnit.owner_id == owner.id,
                    ComputeUnit.state.not_in(("TERMINATED", "FAILED")),
                )
            ).all()
        with app.app_context():
            for cu_id in left:
                unit_service.terminate(reload(db_engine, ComputeUnit, cu_id), reason="test over")
        deadline = time.monotonic() + 60
        for cu_id in left:
            while reload(db_engine, ComputeUnit, cu_id).state not in ("TERMINATED", "FAILED"):
                assert time.monotonic() < deadline
                time.sleep(0.5)


def test_compaction_sizes_its_files_so_every_core_of_the_unit_has_some_to_read():
    """The rewrite's target file size: about two files per core of the unit from the table's bytes
    (Iceberg's planner divides a group's input by it), within 32 MiB and Iceberg's 512 MB default.
    The benchmark's table (500 files, 175 MiB) on a 2-core unit becomes 4 files, not 1."""
    from compute.run.maintenance import compaction_target_bytes

    mib = 1024 * 1024
    table = 175 * mib
    target = compaction_target_bytes(table, cores=2)
    assert target == table // 4
    assert -(-table // target) == 4  # Iceberg's expectedOutputFiles: input over target, rounded up
    assert compaction_target_bytes(table, cores=8) == 32 * mib  # never files of a few MB
    assert compaction_target_bytes(40 * 1024 * mib, cores=2) == 512 * mib  # Iceberg's default
    assert compaction_target_bytes(table, cores=0) == compaction_target_bytes(table, cores=1)
