"""Two users' compute units on one shared, operator-listed Ray cluster, as an attacker would try it.

The test starts a real Ray cluster (a `LocalClusterBackend` head) and lists it in
LAKEPORT_RAY_CLUSTERS; alice and bob each attach an `existing` unit to it through the portal.
Each unit must get its own Spark host, reachable only with its own secret, and code running in
one unit's host must not reach the other's runs, neither over HTTP nor through Ray.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import httpx
import pytest
from sqlmodel import Session

from app import create_app
from app.compute_units import handles
from app.compute_units import service as unit_service
from app.models import ComputeUnit
from app.ray_clusters.base import ClusterSpec
from app.ray_clusters.local import LocalClusterBackend, cluster_pids
from app.spark_host import warmup as spark_warmup
from app.spark_host.client import SparkHostClient
from app.states import UnitState
from compute.contract import secret_digest
from compute.host import host_auth
from devstack.oidc_provider import TEST_USERS
from devstack.process import free_port, port_is_open
from tests.factories import AuthActions
from tests.processes import process_argv

MARKER = "catalog-token-of-bob-3f9a"
EXECUTOR_MAIN = (
    "io.ray.runtime.runner.worker.DefaultWorker"  # RayDP's executors are Ray Java workers
)


def answers_http(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/v1/host", timeout=2.0)
        return True
    except httpx.HTTPError:
        return False


def free_port_pair() -> tuple[int, int]:
    while True:
        port = free_port()
        if port < 65535 and not port_is_open(port + 1):
            return port, port + 1


@pytest.fixture(scope="module")
def shared_cluster():
    """A local (sandboxed) Ray cluster standing in for a shared one: its two Spark host ports are
    bridged out of its sandbox, as an operator's firewall would open them."""
    backend = LocalClusterBackend()
    ports = free_port_pair()
    handle = backend.start(
        ClusterSpec(
            cu_id="test-shared",
            name="shared",
            cpus_per_node=2,
            memory_gb_per_node=4,
            extra_ports=ports,
        )
    )
    yield backend, handle, ports
    backend.terminate(handle)
    assert cluster_pids(handle) == []


@pytest.fixture(scope="module")
def portal(portal_config, shared_cluster):
    _, cluster, ports = shared_cluster
    listing = [
        {
            "name": "shared",
            "address": cluster.dashboard_url,
            "token": cluster.auth_token,
            "spark_host_ports": "{}-{}".format(*ports),
        }
    ]
    return create_app(
        replace(
            portal_config,
            CU_KINDS="local,existing",
            RAY_CLUSTERS=json.dumps(listing),
            CU_WARM_SPARK_ON_START=False,
            CU_MAX_RUNNING_PER_USER=2,
        )
    )


def signed_in(portal, username: str) -> AuthActions:
    user = AuthActions(portal.test_client(), {name: u.password for name, u in TEST_USERS.items()})
    user.login(username)
    return user


def reload(db_engine, cu_id: int) -> ComputeUnit:
    with Session(db_engine, expire_on_commit=False) as db:
        return db.get(ComputeUnit, cu_id)


@pytest.fixture(scope="module")
def portal_worker(portal):
    """The background work for this module's portal (unit starts and stops)."""
    from app.worker import Worker

    running = Worker(portal).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def units(portal, portal_worker, db_engine):
    """alice's and bob's units on the shared cluster, RUNNING with warm Spark hosts: {user: (unit, handle)}."""
    created = {}
    for username in ("alice", "bob"):
        user = signed_in(portal, username)
        response = user.client.post(
            "/compute-units/",
            data={
                "name": f"shared-{username}",
                "kind": "existing",
                "ray_cluster": "shared",
                "cpus": "1",
                "memory_gb": "1",
                "worker_nodes": "0",
                "csrf_token": user.csrf_token(),
            },
        )
        assert response.status_code == 302, response.get_data(as_text=True)[:2000]
        created[username] = (user, int(response.headers["Location"].rstrip("/").rsplit("/", 1)[1]))
    deadline = time.monotonic() + 90
    for username, (_, cu_id) in created.items():
        while (cu := reload(db_engine, cu_id)).state not in (
            "RUNNING",
            "FAILED",
        ) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert cu.state == "RUNNING", cu.reason
    ready = {}
    with portal.app_context():
        for username, (_, cu_id) in created.items():
            cu = reload(db_engine, cu_id)
            handle = handles.handle_of(cu)
            info = spark_warmup.ensure_warm(cu, handle, handles.backend_of(cu))
            assert info["state"] == "ready", info
            ready[username] = (cu, handle)
    yield ready
    for username, (user, cu_id) in created.items():
        user.client.post(
            f"/compute-units/{cu_id}/terminate", headers={"X-CSRFToken": user.csrf_token()}
        )
    deadline = time.monotonic() + 60
    while (
        any(
            reload(db_engine, cu_id).state not in ("TERMINATED", "FAILED")
            for _, cu_id in created.values()
        )
        and time.monotonic() < deadline
    ):
        time.sleep(0.5)


def host(handle) -> SparkHostClient:
    return SparkHostClient(handle, timeout=30)


def test_two_users_units_get_two_hosts_of_their_own(units):
    (alice_cu, alice), (bob_cu, bob) = units["alice"], units["bob"]

    assert alice_cu.spark_host_port != bob_cu.spark_host_port
    assert alice.spark_host_url != bob.spark_host_url
    assert alice.spark_host_namespace != bob.spark_host_namespace
    assert alice.spark_host_secret != bob.spark_host_secret
    assert (
        alice.spark_host_secret not in alice_cu.handle
        and bob.spark_host_secret not in bob_cu.handle
    )
    with host(alice) as alices, host(bob) as bobs:
        alice_info, bob_info = alices.info(), bobs.info()
    assert (alice_info["namespace"], bob_info["namespace"]) == (
        alice.spark_host_namespace,
        bob.spark_host_namespace,
    )
    assert alice_info["app_id"] != bob_info["app_id"]
    # Each host reports its own executor only, not the other unit's.
    assert len(alice_info["executors"]) == len(bob_info["executors"]) == 1
    assert alice_info["executors"] != bob_info["executors"]


def test_a_host_answers_only_its_own_secret(units, shared_cluster):
    _, cluster, _ = shared_cluster
    (_, alice), (_, bob) = units["alice"], units["bob"]
    with host(bob) as bobs:
        run_id = bobs.probe("result = 1")["run_id"]
    calls = [
        ("GET", "/v1/host"),
        ("POST", "/v1/runs"),
        ("GET", f"/v1/runs/{run_id}"),
        ("POST", f"/v1/runs/{run_id}/cancel"),
        ("POST", "/v1/host/stop"),
    ]

    for method, path in calls:
        for headers in (
            {},
            {"Authorization": f"Bearer {alice.spark_host_secret}"},
            cluster.auth_headers(),
            {"Authorization": f"Bearer {bob.spark_host_secret}"},
            {"Authorization": f"Bearer {bob.spark_host_secret[:-1]}"},
            {"Authorization": "Bearer"},
            {"Authorization": bob.spark_host_secret},
        ):
            response = httpx.request(
                method, bob.spark_host_url + path, headers=headers, json={"code": "result = 2"}
            )
            assert response.status_code == 401, (method, path, response.text)
    alices_key, bobs_key = (
        secret_digest(alice.spark_host_secret),
        secret_digest(bob.spark_host_secret),
    )
    for key, expected in ((alices_key, 401), (bobs_key, 200)):
        signature = host_auth.sign_request(key, "GET", "/v1/host", b"", host_auth.new_nonce())
        assert (
            httpx.get(
                f"{bob.spark_host_url}/v1/host", headers={"Authorization": signature}
            ).status_code
            == expected
        )


ATTACK = """
import json, urllib.error, urllib.request
import ray

found = {}
other = ray.get_actor("spark-host", namespace=args["namespace"])
found["info"] = ray.get(other.info.remote(), timeout=60)
attempts = {
    "submit": lambda: other.submit.remote("result = 1"),
    "run_status": lambda: other.run_status.remote(args["run_id"]),
    "cancel": lambda: other.cancel.remote(args["run_id"]),
    "__ray_call__": lambda: other.__ray_call__.remote(lambda host: repr(vars(host))),
    "_info": lambda: other._info.remote(),
    "__init__": lambda: other.__init__.remote({}),
}
for name, attempt in attempts.items():
    try:
        found[name] = repr(ray.get(attempt(), timeout=60))
    except Exception as error:
        found[name] = "refused: " + type(error).__name__
for method, path in (("GET", "/v1/runs/" + args["run_id"]), ("POST", "/v1/runs/" + args["run_id"] + "/cancel"),
                     ("POST", "/v1/runs")):
    request = urllib.request.Request(args["url"] + path, method=method, data=b"{}" if method == "POST" else None)
    try:
        found[method + " " + path] = urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as error:
        found[method + " " + path] = error.code
result = found
"""


def test_code_in_one_units_host_cannot_reach_the_other_units_runs(units):
    (_, alice), (_, bob) = units["alice"], units["bob"]
    with host(alice) as alices, host(bob) as bobs:
        # bob's run holds its catalog token (args) while alice's code goes after it.
        bobs_run = bobs.probe(
            f"import time\ntime.sleep(8)\nresult = args['catalog']['token'] == {MARKER!r}",
            args={"catalog": {"token": MARKER}},
            name="bobs",
        )
        attack = alices.wait(
            alices.probe(
                ATTACK,
                args={
                    "namespace": bob.spark_host_namespace,
                    "url": bob.spark_host_url,
                    "run_id": bobs_run["run_id"],
                },
                name="attack",
            )["run_id"],
            timeout_s=180,
        )
        bobs_end = bobs.wait(bobs_run["run_id"], timeout_s=120)
        bobs_next = bobs.wait(
            bobs.probe("result = spark.range(5).count()")["run_id"], timeout_s=120
        )

    assert attack["state"] == "COMPLETED", attack["error"]
    found = attack["result"]
    # Through Ray: the actor is found, but it offers readiness facts only.
    assert found["info"]["namespace"] == bob.spark_host_namespace
    for name in ("submit", "run_status", "cancel", "__ray_call__", "_info", "__init__"):
        assert found[name] == "refused: AttributeError", (name, found[name])
    # Over HTTP without bob's secret: nothing.
    assert {code for key, code in found.items() if key.startswith(("GET ", "POST "))} == {401}
    dumped = json.dumps(found)
    assert MARKER not in dumped and bob.spark_host_secret not in dumped
    # bob's runs went on untouched, and his run's record never carries its arguments.
    assert (bobs_end["state"], bobs_end["result"]) == ("COMPLETED", True)
    assert MARKER not in json.dumps(bobs_run) and MARKER not in json.dumps(bobs_end)
    assert (bobs_next["state"], bobs_next["result"]) == ("COMPLETED", 5)


def _java_mains(cluster) -> list[str]:
    """The main class of every Java process of the shared cluster, sorted."""
    return sorted(
        argv[-1]
        for pid in cluster_pids(cluster)
        if (argv := process_argv(pid)) and argv[0].endswith("java")
    )


def test_terminating_a_unit_stops_its_host_and_leaves_the_cluster_and_the_other_unit(
    portal, units, shared_cluster, db_engine
):
    backend, cluster, _ = shared_cluster
    (alice_cu, _), (_, bob) = units["alice"], units["bob"]
    port = alice_cu.spark_host_port
    # Each unit's session: its driver's JVM (which holds RayDP's app master) and one executor,
    # a Ray Java worker of that driver's job.
    drivers_and_executors = _java_mains(cluster)
    assert drivers_and_executors.count(EXECUTOR_MAIN) == 2, drivers_and_executors
    assert len(drivers_and_executors) == 4, drivers_and_executors

    with portal.test_request_context(method="POST"):
        unit_service.terminate(reload(db_engine, alice_cu.id), reason="test")
    deadline = time.monotonic() + 60
    while (
        reload(db_engine, alice_cu.id).state != "TERMINATED" or answers_http(port)
    ) and time.monotonic() < deadline:
        time.sleep(0.5)

    assert reload(db_engine, alice_cu.id).state == "TERMINATED"
    assert not answers_http(
        port
    )  # the port may stay bridged out of the cluster's sandbox; no host is behind it
    assert backend.status(cluster).state == UnitState.RUNNING
    # Nothing of alice's session is left on the operator's cluster: her driver's JVM ended with
    # her host, and her executor with the driver's Ray job.
    while len(_java_mains(cluster)) > 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _java_mains(cluster).count(EXECUTOR_MAIN) == 1 and len(_java_mains(cluster)) == 2, (
        _java_mains(cluster)
    )
    with host(bob) as bobs:
        assert bobs.wait(bobs.probe("result = 'still here'")["run_id"])["result"] == "still here"
