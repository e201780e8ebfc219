"""Tenant isolation at the compute boundary: a real execution attacks the portal, the stack, another
unit and another user's warehouse, and each attack fails; its own warehouse still works. Once on
a local unit (its own sandbox), once on an `existing` unit of a Ray cluster that two users share
(a sandboxed local cluster listed in LAKEPORT_RAY_CLUSTERS, as an operator would list one).

Run it alone, under the heavy lock: it starts two compute units and Spark.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import replace
from pathlib import Path

import pytest

from app import create_app
from app.compute_units import handles
from app.compute_units import service as unit_service
from app.models import ComputeUnit, Warehouse
from app.ports import free_port, port_is_open
from app.ray_clusters.base import ClusterSpec
from app.ray_clusters.local import LocalClusterBackend, allowed_endpoints, cluster_pids
from app.worker import Worker
from compute.build import class_archive, class_path_jar
from compute.build.jars import jar_paths
from tests.factories import (
    csrf,
    independent_catalog,
    make_user,
    register_warehouse,
    reload,
    run,
    sign_in_as,
    start_unit,
    wait_for,
    workflow_for,
)
from tests.processes import process_command_line, process_running
from tests.tenant_attacks import attack_step, breaches, target_environs

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def catalog_pid(catalog_url: str) -> int | None:
    """The dev catalog process of this test run (it listens on the catalog URL's port)."""
    port = catalog_url.rsplit(":", 1)[1]
    for entry in Path("/proc").iterdir():
        if (
            entry.name.isdigit()
            and "devcatalog" in (line := process_command_line(int(entry.name)))
            and port in line
        ):
            return int(entry.name)
    return None


@pytest.fixture(scope="module")
def portal_secrets(portal_config):
    """The portal's settings as its environment holds them in production: what must not leak."""
    values = {
        "LAKEPORT_SECRET_KEY": portal_config.SECRET_KEY,
        "LAKEPORT_OIDC_CLIENT_SECRET": portal_config.OIDC_CLIENT_SECRET,
        "LAKEPORT_LAKEKEEPER_CLIENT_SECRET": portal_config.LAKEKEEPER_CLIENT_SECRET,
        "LAKEPORT_DATABASE_URL": portal_config.DATABASE_URL,
    }
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    yield list(values.values())
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="module")
def other_unit():
    """Another tenant's unit, side by side (its own uid, token file and bridged ports)."""
    backend = LocalClusterBackend()
    handle = backend.start(
        ClusterSpec(cu_id="test-other-tenant", name="other tenant", memory_gb_per_node=1)
    )
    yield handle
    backend.terminate(handle)


def portal_with_worker(config):
    """A portal and its worker (which starts units and runs executions)."""
    app = create_app(config)
    return app, Worker(app).start()


def attack_targets(
    portal_config, lakehouse, run_dir, other_ports, other_warehouse, other_token_file=None
) -> dict:
    sqlite_file = run_dir / "portal-copy.db"
    with sqlite3.connect(sqlite_file) as db:
        db.execute("CREATE TABLE IF NOT EXISTS secrets (value TEXT)")
    targets = {
        "portal_pid": os.getpid(),
        "catalog_pid": catalog_pid(lakehouse.catalog_url),
        "database_dsn": portal_config.DATABASE_URL.replace(
            "postgresql+psycopg://", "postgresql://"
        ),
        "sqlite_file": str(sqlite_file),
        "private_paths": [str(run_dir), str(PROJECT_ROOT / "app" / "config.py")],
        "other_ports": other_ports,
        "other_warehouse": other_warehouse,
        "shared_code": [
            str(class_archive.archive_path()),
            str(jar_paths()[0]),
            str(class_path_jar.class_path_jar()),
        ],
    }
    if other_token_file:
        targets["other_token_file"] = other_token_file
    # Every target is real from the portal's side: the attacks fail for the sandbox's sake only.
    assert targets["catalog_pid"] and Path(f"/proc/{targets['catalog_pid']}/environ").read_bytes()
    assert all(port_is_open(port) for port in other_ports)
    assert Path(targets["private_paths"][1]).is_file()
    assert all(Path(path).is_file() for path in targets["shared_code"])
    return targets


def run_attacks(
    app, client, db_engine, lakehouse, attacker, warehouse_id: int, cu_id: int, targets: dict
) -> list[dict]:
    """Run the attack step as an execution on the unit; return its rows (its own warehouse works)."""
    workflow = workflow_for(db_engine, attacker, [attack_step(targets)])
    response = run(client, workflow, cu_id, warehouse_id)
    execution_id = int(response.headers["Location"].rsplit("/", 1)[1])
    execution = wait_for(client, db_engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED"))
    assert execution.state == "COMPLETED", execution.reason
    # The step's own warehouse works: its output table is written and readable.
    warehouse = reload(db_engine, Warehouse, warehouse_id)
    table = independent_catalog(lakehouse, warehouse).load_table(f"results.e{execution_id}_attacks")
    return table.scan().to_arrow().to_pylist()


def stop_units(app, db_engine, cu_ids) -> None:
    pids = []
    with app.app_context():
        for cu_id in cu_ids:
            cu = reload(db_engine, ComputeUnit, cu_id)
            if cu.kind == "local":
                pids += cluster_pids(handles.handle_of(cu))
            unit_service.terminate(cu, reason="test over")
    deadline = time.monotonic() + 60
    while (
        any(process_running(pid) for pid in pids)
        or any(
            reload(db_engine, ComputeUnit, cu_id).state not in ("TERMINATED", "FAILED")
            for cu_id in cu_ids
        )
    ) and time.monotonic() < deadline:
        time.sleep(0.5)


def assert_all_failed(rows: list[dict], secrets: list[str], expected_attempts: int) -> None:
    attempts = {row["attempt"]: row for row in rows}
    assert len(attempts) == expected_attempts, sorted(attempts)
    assert breaches(rows, secrets) == [], json.dumps(rows, indent=1)
    # Another user's warehouse is not there for the run's token: 404, as Lakekeeper v0.13.3 answers
    # a warehouse the caller may not see (devstack/devcatalog/README.md).
    assert "HTTP Error 404" in attempts["other warehouse with the execution's token"]["detail"]
    assert "ModuleNotFoundError" in attempts["import app"]["detail"]


def test_a_step_on_a_local_unit_reaches_nothing_but_its_own_warehouse(
    portal_config, portal_secrets, lakehouse, db_engine, other_unit, run_dir
):
    app, worker = portal_with_worker(
        replace(
            portal_config,
            LAKEKEEPER_URL=lakehouse.catalog_url,
            CU_MAX_CPUS=2,
            CU_MAX_MEMORY_GB=4.0,
            CU_MAX_WORKERS=1,
            CU_WARM_SPARK_ON_START=True,
            CU_ALLOWED_ENDPOINTS=lakehouse.cu_allowed_endpoints,
        )
    )
    victim = app.test_client()
    sign_in_as(victim, make_user(db_engine))
    victims_warehouse = reload(
        db_engine, Warehouse, register_warehouse(victim, lakehouse, "victim")
    )
    client = app.test_client()
    attacker = make_user(db_engine)
    sign_in_as(client, attacker)
    warehouse_id = register_warehouse(client, lakehouse, "attacker")
    cu = start_unit(client, db_engine, "attacker")
    targets = attack_targets(
        portal_config,
        lakehouse,
        run_dir,
        [other_unit.details["ports"]["spark_host"], other_unit.details["ports"]["dashboard"]],
        victims_warehouse.lakekeeper_name,
        other_unit.details["auth_token_file"],
    )
    assert Path(targets["other_token_file"]).read_text() == other_unit.auth_token
    try:
        rows = run_attacks(
            app, client, db_engine, lakehouse, attacker, warehouse_id, cu.id, targets
        )
    finally:
        stop_units(app, db_engine, [cu.id])
        worker.stop()
    assert_all_failed(
        rows,
        portal_secrets + target_environs(targets) + [other_unit.auth_token],
        expected_attempts=16,
    )


@pytest.fixture(scope="module")
def shared_cluster(lakehouse):
    """A Ray cluster two users' units attach to: sandboxed like any local cluster, reaching the
    catalog and the lakehouse's S3, with two Spark host ports the portal reaches."""
    first = free_port()
    while port_is_open(first + 1):
        first = free_port()
    backend = LocalClusterBackend(
        endpoints=allowed_endpoints(lakehouse.catalog_url, lakehouse.cu_allowed_endpoints)
    )
    handle = backend.start(
        ClusterSpec(
            cu_id="test-shared-tenants",
            name="shared",
            cpus_per_node=2,
            memory_gb_per_node=6,
            extra_ports=(first, first + 1),
        )
    )
    yield handle, (first, first + 1)
    backend.terminate(handle)


def test_a_step_on_a_shared_cluster_reaches_nothing_of_the_other_user(
    portal_config, portal_secrets, lakehouse, db_engine, shared_cluster, run_dir
):
    cluster, ports = shared_cluster
    listing = [
        {
            "name": "shared",
            "address": cluster.dashboard_url,
            "token": cluster.auth_token,
            "spark_host_ports": f"{ports[0]}-{ports[1]}",
        }
    ]
    app, worker = portal_with_worker(
        replace(
            portal_config,
            LAKEKEEPER_URL=lakehouse.catalog_url,
            CU_KINDS="local,existing",
            RAY_CLUSTERS=json.dumps(listing),
            CU_WARM_SPARK_ON_START=True,
        )
    )
    units = {}
    try:
        for role in ("victim", "attacker"):
            client = app.test_client()
            user = make_user(db_engine)
            sign_in_as(client, user)
            warehouse_id = register_warehouse(client, lakehouse, role)
            started = client.post(
                "/compute-units/",
                data={
                    "name": role,
                    "kind": "existing",
                    "ray_cluster": "shared",
                    "cpus": "1",
                    "memory_gb": "1",
                    "worker_nodes": "0",
                    "csrf_token": csrf(client),
                },
            )
            assert started.status_code == 302, started.get_data(as_text=True)[:2000]
            cu_id = int(started.headers["Location"].rstrip("/").rsplit("/", 1)[1])
            units[role] = (client, user, warehouse_id, cu_id)
        deadline = time.monotonic() + 120
        for _, _, _, cu_id in units.values():
            while (cu := reload(db_engine, ComputeUnit, cu_id)).state not in ("RUNNING", "FAILED"):
                assert time.monotonic() < deadline, "the unit did not attach"
                time.sleep(0.5)
            assert cu.state == "RUNNING", cu.reason
        victim_cu = reload(db_engine, ComputeUnit, units["victim"][3])
        victims_warehouse = reload(db_engine, Warehouse, units["victim"][2])
        client, attacker, warehouse_id, cu_id = units["attacker"]
        # The other tenant's Spark host answers on the shared cluster, to its secret only.
        targets = attack_targets(
            portal_config,
            lakehouse,
            run_dir,
            [victim_cu.spark_host_port],
            victims_warehouse.lakekeeper_name,
        )
        rows = run_attacks(
            app, client, db_engine, lakehouse, attacker, warehouse_id, cu_id, targets
        )
    finally:
        stop_units(app, db_engine, [cu_id for _, _, _, cu_id in units.values()])
        worker.stop()
    assert_all_failed(rows, portal_secrets + target_environs(targets), expected_attempts=14)
    assert (
        "401"
        in {row["attempt"]: row for row in rows}[f"other unit's port {victim_cu.spark_host_port}"][
            "detail"
        ]
    )
