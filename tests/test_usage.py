"""Usage and retention: storage measured from table metadata against the bytes really in S3,
per-user totals, retention previews and enforcement on a real warehouse, owner-only access,
and snapshot expiry of a dataset on a real compute unit (heavy: the last test)."""

from __future__ import annotations

import json
import re
import secrets
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

import httpx
import pyarrow as pa
import pytest
from sqlmodel import Session, select

from app import create_app
from app.charts import human_bytes
from app.models import (
    ComputeUnit,
    Execution,
    ExecutionUsage,
    MaintenanceJob,
    RetentionLogEntry,
    StorageSample,
    Warehouse,
)
from app.storage_probe import SigV4Auth
from app.usage import queries, work
from tests.factories import (
    add,
    csrf,
    execution_row,
    independent_catalog,
    make_user,
    register_warehouse,
    reload,
    sign_in_as,
    start_unit,
    text,
    unit_row,
    warehouse_row,
    workflow_for,
)

S3_NAMESPACE = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@pytest.fixture
def app(portal_config, lakehouse):
    return create_app(
        replace(
            portal_config,
            LAKEKEEPER_URL=lakehouse.catalog_url,
            CU_MAX_CPUS=2,
            CU_ALLOWED_ENDPOINTS=lakehouse.cu_allowed_endpoints,
            CU_MAX_MEMORY_GB=4.0,
            CU_MAX_WORKERS=1,
            USAGE_SAMPLE_SECONDS=1.0,
            WORKER_SUPERVISOR_SECONDS=1.0,
        )
    )


@pytest.fixture
def owner(client, db_engine):
    user = make_user(db_engine)
    sign_in_as(client, user)
    return user


def s3_objects(lakehouse, location: str) -> dict[str, int]:
    """Every object under `location` (s3://bucket/prefix) and its size, listed with SeaweedFS's admin keys."""
    parts = urlsplit(location)
    bucket, prefix = parts.netloc, parts.path.lstrip("/").rstrip("/") + "/"
    auth = SigV4Auth(lakehouse.seaweed.admin_credentials, lakehouse.seaweed.region)
    found, token = {}, None
    with httpx.Client(auth=auth, timeout=30) as client:
        while True:
            params = {
                "list-type": "2",
                "prefix": prefix,
                **({"continuation-token": token} if token else {}),
            }
            response = client.get(f"{lakehouse.s3_endpoint}/{bucket}", params=params)
            response.raise_for_status()
            root = ElementTree.fromstring(response.content)
            for item in root.iter(f"{S3_NAMESPACE}Contents"):
                found[item.findtext(f"{S3_NAMESPACE}Key")] = int(
                    item.findtext(f"{S3_NAMESPACE}Size")
                )
            if root.findtext(f"{S3_NAMESPACE}IsTruncated") != "true":
                return found
            token = root.findtext(f"{S3_NAMESPACE}NextContinuationToken")


NUMBERS = pa.schema([("id", pa.int64()), ("noise", pa.float64())])


def random_rows(count: int) -> pa.Table:
    import numpy

    generator = numpy.random.default_rng()
    return pa.table(
        {"id": numpy.arange(count, dtype="int64"), "noise": generator.random(count)}, schema=NUMBERS
    )


def ensure_namespaces(catalog, *namespaces: str) -> None:
    for namespace in namespaces:
        catalog.create_namespace_if_not_exists(namespace)


STATS = pa.schema(
    [
        ("step", pa.string()),
        ("status", pa.string()),
        ("rows_out", pa.int64()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("duration_ms", pa.int64()),
    ]
)
LOGS = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("level", pa.string()),
        ("step", pa.string()),
        ("message", pa.string()),
    ]
)


def write_execution_tables(catalog, execution_id: int, rows: int = 1000) -> list[str]:
    """The tables a run leaves: one result table, runtime_stats and console_logs (as compute/run/pipeline.py
    lays them out)."""
    names = [
        f"results.e{execution_id}_numbers",
        f"runtime_stats.e{execution_id}",
        f"console_logs.e{execution_id}",
    ]
    catalog.create_table(names[0], schema=NUMBERS).append(random_rows(rows))
    began = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    catalog.create_table(names[1], schema=STATS).append(
        pa.table(
            {
                "step": ["numbers"],
                "status": ["done"],
                "rows_out": [rows],
                "started_at": [began],
                "duration_ms": [1500],
            },
            schema=STATS,
        )
    )
    catalog.create_table(names[2], schema=LOGS).append(
        pa.table(
            {
                "ts": [began] * 50,
                "level": ["INFO"] * 50,
                "step": ["numbers"] * 50,
                "message": [secrets.token_hex(40) for _ in range(50)],
            },
            schema=LOGS,
        )
    )
    return names


def completed(
    db_engine, owner, workflow, warehouse, cu, ended_days_ago: float, **fields
) -> Execution:
    ended = datetime.now(timezone.utc) - timedelta(days=ended_days_ago)
    execution = execution_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        cu,
        state="COMPLETED",
        run_id="r",
        started_at=ended - timedelta(seconds=100),
        ended_at=ended,
        **fields,
    )
    with Session(db_engine) as db:
        row = db.get(Execution, execution.id)
        row.outputs = json.dumps({"outputs": {"numbers": f"results.e{execution.id}_numbers"}})
        db.commit()
    return reload(db_engine, Execution, execution.id)


# --------------------------------------------------------------------------- storage figures
def test_storage_figures_match_the_bytes_under_the_table_locations_in_s3(
    app, client, owner, db_engine, lakehouse
):
    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "measured"))
    catalog = independent_catalog(lakehouse, warehouse)
    ensure_namespaces(catalog, "datasets", "results", "runtime_stats", "console_logs")
    big = catalog.create_table("datasets.big", schema=NUMBERS)
    for _ in range(3):  # three snapshots, each adding a file of ~3 MB
        big.append(random_rows(200_000))
    small = catalog.create_table("datasets.small", schema=NUMBERS)
    small.append(random_rows(50_000))
    workflow, cu = workflow_for(db_engine, owner), unit_row(db_engine, owner, state="TERMINATED")
    execution = completed(db_engine, owner, workflow, warehouse, cu, ended_days_ago=0.01)
    run_tables = write_execution_tables(catalog, execution.id, rows=150_000)

    with app.app_context():
        samples = {sample.namespace: sample for sample in work.measure_warehouse(warehouse)}
        assert work.measure_executions() >= 1
    usage = reload(db_engine, ExecutionUsage, execution.id)

    def under(names: list[str]) -> tuple[int, int, int]:
        """(bytes of data files, data files, bytes of everything) under the tables' locations."""
        data_bytes = data_files = everything = 0
        for name in names:
            objects = s3_objects(lakehouse, catalog.load_table(name).location())
            data = {key: size for key, size in objects.items() if "/data/" in key}
            data_bytes, data_files = data_bytes + sum(data.values()), data_files + len(data)
            everything += sum(objects.values())
        return data_bytes, data_files, everything

    data_bytes, data_files, everything = under(["datasets.big", "datasets.small"])
    assert data_bytes > 5_000_000
    assert (samples["datasets"].bytes, samples["datasets"].files, samples["datasets"].tables) == (
        data_bytes,
        data_files,
        2,
    )
    # Metadata (manifests, manifest lists, metadata.json) is the rest: within 1 % of the whole.
    assert abs(everything - samples["datasets"].bytes) <= 0.01 * everything
    for namespace, name in zip(("results", "runtime_stats", "console_logs"), run_tables):
        assert samples[namespace].bytes == under([name])[0]

    results_bytes, results_files, _ = under(run_tables[:1])
    logs_bytes, logs_files, _ = under(run_tables[1:])
    assert (usage.results_bytes, usage.results_files) == (results_bytes, results_files)
    assert (usage.logs_bytes, usage.logs_files) == (logs_bytes, logs_files)

    # The page shows the stored figures, without asking the catalog.
    page = text(client.get(f"/warehouses/{warehouse.id}/storage", headers={"HX-Request": "true"}))
    assert f'data-bytes="{sum(sample.bytes for sample in samples.values())}"' in page
    assert 'data-namespace="datasets"' in page and f'data-bytes="{data_bytes}"' in page
    assert 'data-testid="storage-chart"' not in page  # one sample: no line to draw yet
    execution_page = text(
        client.get(f"/executions/{execution.id}/usage", headers={"HX-Request": "true"})
    )
    assert f'data-bytes="{results_bytes + logs_bytes}"' in execution_page


def test_the_worker_samples_storage_in_the_background_and_the_page_draws_it_over_time(
    app, client, owner, db_engine, lakehouse, worker
):
    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "sampled"))
    catalog = independent_catalog(lakehouse, warehouse)
    ensure_namespaces(catalog, "datasets")
    growing = catalog.create_table("datasets.growing", schema=NUMBERS)

    def samples() -> list[StorageSample]:
        with Session(db_engine) as db:
            return list(
                db.exec(
                    select(StorageSample)
                    .where(StorageSample.warehouse_id == warehouse.id)
                    .order_by(StorageSample.measured_at)
                )
            )

    deadline = time.monotonic() + 60
    while not samples():
        assert time.monotonic() < deadline, "the worker measured nothing"
        time.sleep(0.5)
    first = samples()[-1]
    growing.append(random_rows(100_000))
    while not any(sample.bytes > 0 for sample in samples()):
        assert time.monotonic() < deadline, "the worker did not measure again"
        time.sleep(0.5)
    assert first.bytes == 0 and first.namespace == "datasets"
    page = text(client.get(f"/warehouses/{warehouse.id}/storage", headers={"HX-Request": "true"}))
    assert 'data-testid="storage-chart"' in page and "<polyline" in page
    detail = text(client.get(f"/warehouses/{warehouse.id}"))
    for section in ("storage", "retention"):
        assert f'hx-get="/warehouses/{warehouse.id}/{section}"' in detail


def test_the_chart_covers_30_days_in_at_most_200_points_and_old_samples_are_deleted(
    app, owner, db_engine
):
    warehouse = warehouse_row(db_engine, owner)
    now = datetime.now(timezone.utc)
    with Session(db_engine) as db:
        for hours in range(0, 40 * 24, 2):  # every 2 h for 40 days, two namespaces each
            for namespace, size in (("results", hours), ("datasets", 1000)):
                db.add(
                    StorageSample(
                        warehouse_id=warehouse.id,
                        namespace=namespace,
                        bytes=size,
                        measured_at=now - timedelta(hours=hours),
                    )
                )
        db.add(
            StorageSample(
                warehouse_id=warehouse.id,
                namespace="results",
                measured_at=now - timedelta(days=500),
            )
        )
        db.commit()
    with app.app_context():
        history = queries.storage_history(warehouse)
        assert len(history) == 180  # 360 samples in 30 days, every second one
        assert history[-1] == (now, 1000) and history[0][0] >= now - timedelta(days=30)
        assert [total for _, total in history] == sorted(
            (total for _, total in history), reverse=True
        )
        work.measure()  # the unregistered warehouse cannot be measured; old samples still go
    with Session(db_engine) as db:
        oldest = db.exec(
            select(StorageSample.measured_at)
            .where(StorageSample.warehouse_id == warehouse.id)
            .order_by(StorageSample.measured_at)
        ).first()
    assert oldest >= now - timedelta(days=41)


# --------------------------------------------------------------------------- per-user totals
def test_per_user_totals_over_7_and_30_days_from_crafted_rows(app, client, owner, db_engine):
    warehouse, workflow = warehouse_row(db_engine, owner), workflow_for(db_engine, owner)
    # 2 CPUs × 3 GiB per node, head + 1 worker: 4 CPUs and 6 GiB in all.
    cu = add(
        db_engine,
        ComputeUnit(
            owner_id=owner.id,
            name=f"cu-{secrets.token_hex(3)}",
            kind="local",
            state="TERMINATED",
            cpus=2,
            memory_gb=3.0,
            worker_nodes=1,
        ),
    )
    now = datetime.now(timezone.utc)
    crafted = [
        (3, 100, 1_000, 2),
        (10, 50, 20_000, 3),
        (40, 1000, 300_000, 4),
    ]  # days ago, seconds, bytes, files
    for days_ago, seconds, written, files in crafted:
        ended = now - timedelta(days=days_ago)
        execution = execution_row(
            db_engine,
            owner,
            workflow,
            warehouse,
            cu,
            state="COMPLETED",
            started_at=ended - timedelta(seconds=seconds),
            ended_at=ended,
        )
        add(
            db_engine,
            ExecutionUsage(execution_id=execution.id, results_bytes=written, results_files=files),
        )
    # A run still going counts nothing; another user's run is not this user's.
    execution_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        cu,
        state="RUNNING",
        started_at=now - timedelta(hours=1),
    )
    stranger = make_user(db_engine)
    execution_row(
        db_engine,
        stranger,
        workflow_for(db_engine, stranger),
        warehouse_row(db_engine, stranger),
        None,
        state="COMPLETED",
        started_at=now - timedelta(days=1, seconds=500),
        ended_at=now - timedelta(days=1),
    )

    with app.app_context():
        week, month = queries.user_totals(owner, 7), queries.user_totals(owner, 30)
    assert (
        week.executions,
        week.compute.seconds,
        week.compute.cpu_seconds,
        week.compute.gib_seconds,
    ) == (1, 100, 400, 600)
    assert (week.storage.bytes, week.storage.files) == (1_000, 2)
    assert (month.executions, month.compute.cpu_seconds, month.compute.gib_seconds) == (2, 600, 900)
    assert (month.storage.bytes, month.storage.files) == (21_000, 5)

    page = text(client.get("/usage"))
    week_part = page.split('data-testid="usage-7d"')[1].split("</article>")[0]
    month_part = page.split('data-testid="usage-30d"')[1].split("</article>")[0]
    assert (
        'data-testid="cpu-seconds">400<' in week_part
        and 'data-testid="gib-seconds">600<' in week_part
    )
    assert 'data-bytes="1000"' in week_part
    assert 'data-testid="cpu-seconds">600<' in month_part and 'data-bytes="21000"' in month_part
    assert 'href="/usage"' in text(client.get("/"))


# --------------------------------------------------------------------------- retention
def save_policy(client, warehouse_id: int, **fields):
    data = {
        "results_mode": "days",
        "results_value": "0",
        "logs_forever": "on",
        "csrf_token": csrf(client),
        **fields,
    }
    return client.post(
        f"/warehouses/{warehouse_id}/retention", data=data, headers={"HX-Request": "true"}
    )


def test_the_policy_form_validates_every_field(client, owner, db_engine):
    warehouse = warehouse_row(db_engine, owner)
    for fields, message in [
        ({"results_mode": "weeks"}, "Choose how result tables are kept."),
        ({"results_value": "-1"}, "Days: a whole number from 0 to 3650."),
        ({"results_value": "x"}, "Days: a whole number from 0 to 3650."),
        (
            {"results_mode": "last", "results_value": "0"},
            "Executions per workflow: a whole number from 1 to 10000.",
        ),
        ({"logs_forever": "", "logs_days": ""}, "Days: a whole number from 0 to 3650."),
        (
            {"results_value": "30", "logs_forever": "", "logs_days": "7"},
            "Keep runtime stats and console logs at least as long as the result tables.",
        ),
        ({"snapshots_retain_last": "0"}, "Snapshots: a whole number from 1 to 1000."),
    ]:
        response = save_policy(client, warehouse.id, **fields)
        assert response.status_code == 422 and message in text(response), fields
    assert "Preview enforcement" not in text(client.get(f"/warehouses/{warehouse.id}/retention"))
    assert (
        save_policy(client, warehouse.id, results_mode="last", results_value="2").status_code == 200
    )
    assert "Preview enforcement" in text(client.get(f"/warehouses/{warehouse.id}/retention"))


def test_keep_the_last_n_executions_per_workflow(app, client, owner, db_engine):
    warehouse, cu = warehouse_row(db_engine, owner), unit_row(db_engine, owner, state="TERMINATED")
    first, second = workflow_for(db_engine, owner), workflow_for(db_engine, owner)
    runs = {
        workflow.id: [
            completed(db_engine, owner, workflow, warehouse, cu, ended_days_ago=days)
            for days in (5, 4, 3)
        ]
        for workflow in (first, second)
    }
    failed = execution_row(
        db_engine,
        owner,
        first,
        warehouse,
        cu,
        state="FAILED",
        run_id="r",
        ended_at=datetime.now(timezone.utc),
    )
    assert (
        save_policy(client, warehouse.id, results_mode="last", results_value="2").status_code == 200
    )
    preview = text(
        client.post(
            f"/warehouses/{warehouse.id}/retention/preview", headers={"X-CSRFToken": csrf(client)}
        )
    )
    # The oldest completed run of each workflow; the failed one has no results to drop.
    assert sorted(re_find_due(preview)) == sorted(
        f"results.e{runs[workflow.id][0].id}_numbers" for workflow in (first, second)
    )
    assert f"e{failed.id}_" not in preview
    assert "will drop 2 tables" in preview


def re_find_due(page: str) -> list[str]:
    return re.findall(r'data-testid="due-table">([^<]+)<', page)


def test_a_policy_of_0_days_drops_exactly_the_result_tables_after_a_preview_and_keeps_the_stats(
    app, client, owner, db_engine, lakehouse
):
    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "retained"))
    catalog = independent_catalog(lakehouse, warehouse)
    ensure_namespaces(catalog, "results", "runtime_stats", "console_logs", "datasets")
    catalog.create_table("datasets.kept", schema=NUMBERS).append(random_rows(10))
    workflow, cu = workflow_for(db_engine, owner), unit_row(db_engine, owner, state="TERMINATED")
    old = [
        completed(db_engine, owner, workflow, warehouse, cu, ended_days_ago=days) for days in (9, 2)
    ]
    for execution in old:
        write_execution_tables(catalog, execution.id)
    with app.app_context():
        work.measure_executions()
    expected = [f"results.e{execution.id}_numbers" for execution in old]
    measured = sum(
        reload(db_engine, ExecutionUsage, execution.id).results_bytes for execution in old
    )

    assert save_policy(client, warehouse.id).status_code == 200
    # A run that ends after the preview is not in it, and is not dropped by confirming it.
    preview = text(
        client.post(
            f"/warehouses/{warehouse.id}/retention/preview", headers={"X-CSRFToken": csrf(client)}
        )
    )
    assert sorted(re_find_due(preview)) == sorted(expected)
    assert f"will drop 2 tables, {human_bytes(measured)}" in preview
    later = completed(db_engine, owner, workflow, warehouse, cu, ended_days_ago=0)
    write_execution_tables(catalog, later.id)
    for name in expected:  # nothing is dropped by a preview
        catalog.load_table(name)

    enforced = client.post(
        f"/warehouses/{warehouse.id}/retention/enforce",
        data={"csrf_token": csrf(client), "table": expected},
        headers={"HX-Request": "true"},
    )
    assert enforced.status_code == 200, text(enforced)
    remaining = {
        ".".join(identifier)
        for namespace in ("results", "runtime_stats", "console_logs", "datasets")
        for identifier in catalog.list_tables(namespace)
    }
    assert not remaining & set(expected)
    assert f"results.e{later.id}_numbers" in remaining and "datasets.kept" in remaining
    for execution in old:
        assert {f"runtime_stats.e{execution.id}", f"console_logs.e{execution.id}"} <= remaining
        row = reload(db_engine, Execution, execution.id)
        assert row.outputs_expired_at is not None and row.stats_expired_at is None
        live = text(client.get(f"/executions/{execution.id}", headers={"HX-Request": "true"}))
        assert f"Its results expired on {row.outputs_expired_at:%Y-%m-%d}" in live
        assert 'data-testid="output-link"' not in live
        stats = text(
            client.get(f"/executions/{execution.id}/stats", headers={"HX-Request": "true"})
        )
        assert 'data-step="numbers"' in stats and "1.5 s" in stats
    assert reload(db_engine, Execution, later.id).outputs_expired_at is None

    with Session(db_engine) as db:
        entries = db.exec(
            select(RetentionLogEntry).where(RetentionLogEntry.warehouse_id == warehouse.id)
        ).all()
    assert len(entries) == 1 and entries[0].tables == 2 and entries[0].bytes == measured
    panel = text(client.get(f"/warehouses/{warehouse.id}/retention"))
    assert "Dropped 2 tables: " in panel and all(name in panel for name in expected)
    # Confirming again drops nothing more: they are no longer due.
    again = client.post(
        f"/warehouses/{warehouse.id}/retention/enforce",
        data={"csrf_token": csrf(client), "table": expected},
    )
    assert again.status_code == 422 and "Nothing of what you confirmed is due" in text(again)


def test_snapshot_expiry_needs_a_running_unit_of_the_owner(client, owner, db_engine):
    warehouse = warehouse_row(db_engine, owner)
    assert save_policy(client, warehouse.id, snapshots_retain_last="2").status_code == 200
    panel = text(client.get(f"/warehouses/{warehouse.id}/retention"))
    assert (
        'data-testid="no-running-unit"' in panel and 'data-testid="expire-snapshots"' not in panel
    )
    refused = client.post(
        f"/warehouses/{warehouse.id}/maintenance", headers={"X-CSRFToken": csrf(client)}
    )
    assert refused.status_code == 422 and "None of your compute units is running" in text(refused)
    with Session(db_engine) as db:
        assert (
            db.exec(
                select(MaintenanceJob).where(MaintenanceJob.warehouse_id == warehouse.id)
            ).first()
            is None
        )


def test_another_users_usage_policy_and_preview_answer_404(client, owner, db_engine):
    stranger = make_user(db_engine)
    theirs = warehouse_row(db_engine, stranger)
    execution = execution_row(
        db_engine, stranger, workflow_for(db_engine, stranger), theirs, None, state="COMPLETED"
    )
    token = csrf(client)
    for method, path in [
        ("get", f"/warehouses/{theirs.id}/storage"),
        ("get", f"/warehouses/{theirs.id}/retention"),
        ("post", f"/warehouses/{theirs.id}/retention"),
        ("post", f"/warehouses/{theirs.id}/retention/preview"),
        ("post", f"/warehouses/{theirs.id}/retention/enforce"),
        ("post", f"/warehouses/{theirs.id}/maintenance"),
        ("get", f"/executions/{execution.id}/usage"),
    ]:
        response = getattr(client, method)(
            path,
            data={
                "csrf_token": token,
                "results_mode": "days",
                "results_value": "0",
                "logs_forever": "on",
            },
        )
        assert response.status_code == 404, (method, path)
    assert theirs.name not in text(client.get("/usage"))


# --------------------------------------------------------------------------- on a real unit (heavy)
def test_heavy_expire_snapshots_of_a_dataset_on_the_owners_running_unit(
    app, client, owner, db_engine, lakehouse, worker
):
    """A dataset with 5 snapshots keeps the last 2 after the owner asks, run by Iceberg's Spark
    procedure on the owner's unit with a token acting as the owner."""
    from app.compute_units import service as unit_service

    warehouse = reload(db_engine, Warehouse, register_warehouse(client, lakehouse, "maintained"))
    catalog = independent_catalog(lakehouse, warehouse)
    ensure_namespaces(catalog, "datasets")
    five = catalog.create_table("datasets.five", schema=NUMBERS)
    for _ in range(5):
        five.append(random_rows(1000))
    assert len(catalog.load_table("datasets.five").snapshots()) == 5
    current = catalog.load_table("datasets.five").current_snapshot().snapshot_id
    cu = start_unit(client, db_engine, "maintenance")
    try:
        assert save_policy(client, warehouse.id, snapshots_retain_last="2").status_code == 200
        panel = text(client.get(f"/warehouses/{warehouse.id}/retention"))
        assert (
            'data-testid="expire-snapshots"' in panel
            and 'data-testid="no-running-unit"' not in panel
        )
        queued = client.post(
            f"/warehouses/{warehouse.id}/maintenance",
            data={"remove_orphans": "on"},
            headers={"X-CSRFToken": csrf(client)},
        )
        assert queued.status_code == 200, text(queued)
        deadline = time.monotonic() + 400
        while (job := _latest_job(db_engine, warehouse.id)).running:
            assert time.monotonic() < deadline, "the maintenance did not finish"
            time.sleep(1)
        assert job.state == "done", job.error
        outcome = json.loads(job.result)["datasets.five"]
        # Files of the expired snapshots are gone; orphans younger than 3 days are kept.
        assert outcome["snapshots_before"] == 5 and outcome["deleted_files"] > 0
        assert outcome["orphan_files_removed"] == 0
        table = catalog.load_table("datasets.five")
        assert len(table.snapshots()) == 2 and table.current_snapshot().snapshot_id == current
        assert len(table.scan().to_arrow()) == 5000  # the data is all there
        log = text(client.get(f"/warehouses/{warehouse.id}/retention"))
        assert "Snapshot expiry (keep the last 2) on 1 dataset tables: 3 snapshots expired" in log
    finally:
        with app.app_context():
            unit_service.terminate(reload(db_engine, ComputeUnit, cu.id), reason="test over")
        deadline = time.monotonic() + 60
        while reload(db_engine, ComputeUnit, cu.id).state not in ("TERMINATED", "FAILED"):
            assert time.monotonic() < deadline
            time.sleep(0.5)


def _latest_job(db_engine, warehouse_id: int) -> MaintenanceJob:
    with Session(db_engine) as db:
        return db.exec(
            select(MaintenanceJob)
            .where(MaintenanceJob.warehouse_id == warehouse_id)
            .order_by(MaintenanceJob.id.desc())
        ).first()
