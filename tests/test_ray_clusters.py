"""Local compute units: real Ray clusters of subprocesses on this machine.

One two-node cluster serves the module; the test that kills its head runs last. A second,
head-only cluster proves that clusters side by side do not collide.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from app.ray_clusters.base import (
    ClusterHandle,
    ClusterSpec,
    ClusterStartError,
    SparkHostLaunch,
    SparkHostLaunchState,
)
from app.ray_clusters.existing import ExistingClusterBackend
from app.ray_clusters.listed import parse_listed_clusters
from app.ray_clusters.local import LocalClusterBackend, cluster_pids
from app.spark_host.client import reported_use
from app.states import UnitState
from compute.contract import secret_digest
from compute.host import host_auth
from compute.node.ray_node import DASHBOARD_MODULES
from devstack.process import port_is_open
from tests.processes import process_command_line, process_running, rss_bytes

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def listening_sockets(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket these processes listen on, from /proc (each
    process's own network namespace: a local unit's nodes have one of their own)."""
    found = []
    for pid in pids:
        listening: dict[str, tuple[str, int]] = {}
        try:
            for table in ("tcp", "tcp6"):
                for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A":  # LISTEN
                        address_hex, port_hex = fields[1].split(":")
                        listening[fields[9]] = (_decode_address(address_hex), int(port_hex, 16))
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        for link in links:
            inode = link.removeprefix("socket:[").removesuffix("]")
            if link.startswith("socket:[") and inode in listening:
                found.append((pid, *listening[inode]))
    return found


def _decode_address(address_hex: str) -> str:
    raw = bytes.fromhex(address_hex)
    words = b"".join(
        raw[i : i + 4][::-1] for i in range(0, len(raw), 4)
    )  # little-endian 32-bit words
    if len(words) == 4:
        return ".".join(str(b) for b in words)
    if words[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in words[12:])  # IPv4-mapped IPv6
    return words.hex()


def handle_ports(handle: ClusterHandle) -> set[int]:
    ports = set(handle.details["ports"].values())
    for node in handle.details["nodes"]:
        ports.update(node["ports"].values())
    return ports


def in_new_process(handle: ClusterHandle, *, terminate: bool = False) -> dict:
    """What a restarted portal (another process, not the nodes' parent) sees on adopting
    the cluster, and then does when told to terminate it."""
    script = (
        "import json, sys\n"
        "from app.ray_clusters.base import ClusterHandle\n"
        "from app.ray_clusters.local import LocalClusterBackend\n"
        "backend, handle = LocalClusterBackend(), ClusterHandle.from_json(sys.stdin.read())\n"
        "status = backend.adopt(handle)\n"
        f"if {terminate}: backend.terminate(handle)\n"
        "print(json.dumps({'state': status.state.value, 'reason': status.reason, 'nodes': status.alive_nodes}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=handle.to_json(),
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def backend():
    return LocalClusterBackend()


@pytest.fixture(scope="module")
def cluster(backend):
    steps: list[str] = []
    started = time.monotonic()
    handle = backend.start(
        ClusterSpec(
            cu_id="test-local",
            name="two nodes",
            cpus_per_node=1,
            memory_gb_per_node=2,
            worker_nodes=1,
        ),
        progress=steps.append,
    )
    handle.details["measured_start_s"] = round(time.monotonic() - started, 1)
    handle.details["progress_steps"] = steps
    yield handle
    backend.terminate(handle)
    assert cluster_pids(handle) == []


def test_start_reports_running_with_nodes_and_cpus(backend, cluster, capsys):
    status = backend.status(cluster)

    assert status.state == UnitState.RUNNING, status.reason
    assert status.alive_nodes == 2
    assert [node.is_head for node in status.nodes].count(True) == 1
    assert status.cpus_total == 2.0
    assert status.memory_total_bytes > 2 * 10**9  # two nodes, 2 GiB each less the object store
    steps = cluster.details["progress_steps"]
    assert steps[0] == "starting head node" and steps[-1] == "cluster ready"
    assert "waiting for nodes: 2 of 2 joined" in steps

    time.sleep(2)  # let start-up work settle before measuring memory
    pids = cluster_pids(cluster)
    with capsys.disabled():
        print(
            f"\n[measure] local CU (head + 1 worker) RUNNING after {cluster.details['measured_start_s']} s; "
            f"idle RSS {rss_bytes(pids) / 2**30:.2f} GiB over {len(pids)} processes"
        )


def test_every_server_of_the_cluster_listens_on_loopback_only(cluster):
    sockets = listening_sockets(cluster_pids(cluster))

    assert {port for _, _, port in sockets} >= handle_ports(cluster) - {
        cluster.details["ports"]["spark_host"]
    }
    assert {address for _, address, _ in sockets} == {"127.0.0.1"}


def test_the_dashboard_demands_the_cluster_token(cluster):
    nodes_url = f"{cluster.dashboard_url}/api/v0/nodes"

    assert httpx.get(nodes_url).status_code == 401
    assert httpx.get(nodes_url, headers={"Authorization": "Bearer " + "0" * 64}).status_code == 403
    assert httpx.get(nodes_url, headers=cluster.auth_headers()).status_code == 200


def test_the_dashboard_runs_only_the_modules_a_unit_uses_and_they_answer(cluster):
    """The State API (RayDP, node status), cluster status and health, and the Jobs API (a Spark
    host's second way to start) answer; the other dashboard modules are not started."""
    dashboard_lines = [
        line
        for pid in cluster_pids(cluster)
        if "dashboard/dashboard.py" in (line := process_command_line(pid))
    ]
    assert len(dashboard_lines) == 1
    assert f"--modules-to-load={','.join(DASHBOARD_MODULES)}" in dashboard_lines[0]
    for path in (
        "/api/v0/nodes",
        "/api/v0/actors",
        "/api/cluster_status",
        "/api/gcs_healthz",
        "/api/jobs/",
    ):
        assert (
            httpx.get(f"{cluster.dashboard_url}{path}", headers=cluster.auth_headers()).status_code
            == 200
        ), path
    assert (
        httpx.get(
            f"{cluster.dashboard_url}/api/serve/applications/", headers=cluster.auth_headers()
        ).status_code
        == 404
    )  # ServeHead: not started
    jobs = JobSubmissionClient(cluster.dashboard_url, headers=cluster.auth_headers())
    job_id = jobs.submit_job(entrypoint="python -c \"print('job ran')\"")
    deadline = time.monotonic() + 60
    while (status := jobs.get_job_status(job_id)) not in (
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.STOPPED,
    ):
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.5)
    assert status == JobStatus.SUCCEEDED and "job ran" in jobs.get_job_logs(job_id)


def test_a_restarted_portal_adopts_the_live_cluster(backend, cluster):
    stored = cluster.to_json()
    assert cluster.auth_token not in stored  # the token stays in the cluster's 0600 file

    assert in_new_process(ClusterHandle.from_json(stored)) == {
        "state": "RUNNING",
        "reason": "",
        "nodes": 2,
    }
    assert LocalClusterBackend().adopt(ClusterHandle.from_json(stored)).state == UnitState.RUNNING


def test_two_clusters_side_by_side_do_not_collide_and_terminate_cleanly(backend, cluster):
    second = backend.start(
        ClusterSpec(cu_id="test-local-2", name="head only", memory_gb_per_node=1)
    )
    try:
        assert backend.status(second).state == UnitState.RUNNING
        assert backend.status(cluster).alive_nodes == 2
        assert not handle_ports(cluster) & handle_ports(second)
        assert cluster.details["cluster_dir"] != second.details["cluster_dir"]
        assert cluster.auth_token != second.auth_token
        second_pids = cluster_pids(second)
        assert second_pids and not set(second_pids) & set(cluster_pids(cluster))
        ports = handle_ports(second)
        # A restarted portal, which did not start the nodes, can still stop them all.
        assert in_new_process(second, terminate=True)["state"] == "RUNNING"
        assert cluster_pids(second) == []
    finally:
        backend.terminate(second)

    assert cluster_pids(second) == []
    assert not [pid for pid in second_pids if process_running(pid)]
    assert not [port for port in ports if port_is_open(port)]
    assert not Path(second.details["cluster_dir"]).exists()
    assert backend.status(second).state == UnitState.TERMINATED
    assert backend.status(cluster).state == UnitState.RUNNING


SANDBOX_FACTS = """
import json, os, socket
facts = {"uid": os.getuid(), "env": sorted(os.environ), "at_portal_pid": (open("/proc/PORTAL_PID/cmdline").read() if os.path.exists("/proc/PORTAL_PID") else None),
         "pid1": open("/proc/1/cmdline").read().split(chr(0))[0],
         "interfaces": [name for _, name in socket.if_nameindex()], "work": os.path.exists(PROJECT_ROOT)}
try:
    import app
    facts["app"] = app.__file__
except ImportError as error:
    facts["app"] = None
import compute.host.spark_host
try:
    socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
    facts["postgres"] = "connected"
except OSError as error:
    facts["postgres"] = str(error)
print("FACTS " + json.dumps(facts))
"""


def test_code_on_the_cluster_runs_sandboxed(cluster):
    from ray.job_submission import JobStatus, JobSubmissionClient

    jobs = JobSubmissionClient(cluster.dashboard_url, headers=cluster.auth_headers())
    script = SANDBOX_FACTS.replace("PROJECT_ROOT", repr(str(PROJECT_ROOT / "app"))).replace(
        "PORTAL_PID", str(os.getpid())
    )
    job_id = jobs.submit_job(entrypoint=f"python -c {shlex.quote(script)}")
    deadline = time.monotonic() + 60
    while (
        jobs.get_job_status(job_id) not in (JobStatus.SUCCEEDED, JobStatus.FAILED)
        and time.monotonic() < deadline
    ):
        time.sleep(0.5)
    logs = jobs.get_job_logs(job_id)
    facts = json.loads(
        next((line for line in logs.splitlines() if line.startswith("FACTS ")), f"{{}} {logs}")[6:]
    )

    assert facts["uid"] == cluster.details["uid"] >= 200000
    assert facts["app"] is None and facts["work"] is False  # only compute/ of the checkout is there
    assert facts["interfaces"] == ["lo"] and "connected" != facts["postgres"]
    # Its own PID namespace (bwrap is its pid 1): only the unit's processes, not the machine's.
    # The portal's pid number may name one of the unit's own processes in there (small pids on a
    # fresh machine): what counts is that the portal's process is not the one it names.
    assert (
        facts["pid1"] == "bwrap"
        and facts["at_portal_pid"] != Path("/proc/self/cmdline").read_text()
    )
    assert not [
        name
        for name in facts["env"]
        if name.startswith("LAKEPORT_") and name != "LAKEPORT_JARS_DIR"
    ]
    assert Path(cluster.details["auth_token_file"]).stat().st_mode & 0o777 == 0o600
    assert Path(cluster.details["cluster_dir"]).stat().st_uid == cluster.details["uid"]
    assert Path(cluster.details["cluster_dir"]).parent.stat().st_mode & 0o777 == 0o711


def test_without_a_sandbox_the_local_kind_refuses_to_start(backend, tmp_path, monkeypatch):
    from app.ray_clusters import sandbox

    before = set(Path(backend.base_dir).iterdir())
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap, no socat
    sandbox.sandbox_problem.cache_clear()
    try:
        with pytest.raises(ClusterStartError, match="bwrap, socat.* is not installed"):
            backend.start(ClusterSpec(cu_id="test-no-sandbox", name="no sandbox"))
    finally:
        monkeypatch.undo()
        sandbox.sandbox_problem.cache_clear()
    assert set(Path(backend.base_dir).iterdir()) == before


def test_a_cluster_that_is_not_healthy_in_time_fails_and_leaves_nothing(backend):
    before = set(Path(backend.base_dir).iterdir())

    with pytest.raises(ClusterStartError, match=r"did not become healthy within 1 s"):
        backend.start(ClusterSpec(cu_id="test-local-slow", name="too slow", start_timeout_s=1))

    assert set(Path(backend.base_dir).iterdir()) == before


def existing_backend(address: str, token: str | None) -> ExistingClusterBackend:
    """The `existing` backend with one operator-listed cluster, "shared", at `address`."""
    entry = {"name": "shared", "address": address, "spark_host_ports": "8290-8299"}
    return ExistingClusterBackend(
        parse_listed_clusters(json.dumps([{**entry, "token": token} if token else entry]))
    )


def attach_spec(cluster_name: str = "shared", port: int = 8290) -> ClusterSpec:
    return ClusterSpec(
        cu_id="test-attached", name="attached", cluster_name=cluster_name, spark_host_port=port
    )


def test_an_existing_cluster_is_attached_by_its_listed_name(backend, cluster):
    existing = existing_backend(cluster.dashboard_url, cluster.auth_token)
    steps: list[str] = []

    handle = existing.start(attach_spec(), progress=steps.append)
    stored = handle.to_json()
    status = existing.status(existing.restore_token(ClusterHandle.from_json(stored)))

    assert cluster.auth_token not in stored  # the token stays in the operator's settings
    assert steps == ["connecting to the Ray cluster shared", "cluster ready"]
    assert handle.spark_host_url == "http://127.0.0.1:8290"
    assert (status.state, status.alive_nodes, status.cpus_total) == (
        UnitState.RUNNING,
        2,
        2.0,
    )
    existing.terminate(handle)
    assert backend.status(cluster).state == UnitState.RUNNING  # detaching leaves it running
    assert (
        ExistingClusterBackend(()).status(handle).reason
        == "the Ray cluster 'shared' is no longer listed here"
    )


def test_attaching_fails_with_the_reason(cluster, closed_port):
    with pytest.raises(ClusterStartError, match="refused the cluster token"):
        existing_backend(cluster.dashboard_url, "0" * 64).start(attach_spec())
    with pytest.raises(ClusterStartError, match="not reachable"):
        existing_backend(f"http://127.0.0.1:{closed_port}", None).start(attach_spec())
    with pytest.raises(ClusterStartError, match="no Ray cluster named 'elsewhere' is listed here"):
        existing_backend(cluster.dashboard_url, cluster.auth_token).start(attach_spec("elsewhere"))
    with pytest.raises(
        ClusterStartError, match="port 9000 is not in cluster shared's Spark host ports 8290-8299"
    ):
        existing_backend(cluster.dashboard_url, cluster.auth_token).start(attach_spec(port=9000))


def status_once_not_running(backend, handle, within_s: float):
    """The cluster's status once it is no longer RUNNING, or its last one after `within_s`."""
    deadline = time.monotonic() + within_s
    while (
        status := backend.status(handle)
    ).state == UnitState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.1)
    return status


def test_killing_the_head_fails_the_cluster_with_the_signal(backend, cluster):
    """Runs last in this module: it breaks the shared cluster."""
    existing = existing_backend(cluster.dashboard_url, cluster.auth_token)
    attached = existing.start(attach_spec())
    head_pid = cluster.details["nodes"][0]["pid"]
    os.kill(head_pid, signal.SIGKILL)

    status = status_once_not_running(backend, cluster, within_s=5)
    assert status.state == UnitState.FAILED
    assert status.reason == f"head node process (pid {head_pid}) was killed by signal 9 (SIGKILL)"

    # The unit's init recorded how the head ended, so a restarted portal knows it too.
    adopted = in_new_process(cluster)
    assert adopted["state"] == "FAILED"
    assert adopted["reason"] == status.reason

    attached_status = existing.status(attached)
    assert attached_status.state == UnitState.FAILED
    assert "not reachable" in attached_status.reason


def test_a_unit_without_a_dashboard_runs_only_the_ray_processes_it_uses(backend):
    """Its node's `ray start --block` became the bare waiter and Ray's agents are stand-ins (none
    of them imports Ray); the raylet dying still fails the unit, named as Ray names it, and
    takes its stand-ins with it."""
    unit = backend.start(
        ClusterSpec(cu_id="test-lean", name="lean", memory_gb_per_node=1, include_dashboard=False)
    )
    try:

        def commands() -> dict[int, str]:
            return {pid: process_command_line(pid) for pid in cluster_pids(unit)}

        def runs(command: str, script: str) -> bool:  # a bare interpreter running that script
            return command.split()[1:3] == ["-S", str(PROJECT_ROOT / "compute" / script)]

        head_pid = unit.details["nodes"][0]["pid"]
        deadline = (
            time.monotonic() + 30
        )  # RUNNING once the GCS answers; `ray start` ends a moment later
        while (
            not runs((running := commands())[head_pid], "node/node_waiter.py")
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        commands = running
        assert runs(commands[head_pid], "node/node_waiter.py")
        agents = [pid for pid, command in commands.items() if runs(command, "node/idle_agent.py")]
        assert len(agents) == 2
        left_out = (
            "dashboard/agent.py",
            "runtime_env/agent/main.py",
            "compute.node.ray_node",
            "ray start",
        )
        assert not [
            command
            for command in commands.values()
            if any(marker in command for marker in left_out)
        ]
        assert all(
            b"site-packages" not in Path(f"/proc/{pid}/maps").read_bytes()
            for pid in [head_pid, *agents]
        )

        raylet = next(
            pid for pid, command in commands.items() if command.split()[0].endswith("/raylet")
        )
        os.kill(raylet, signal.SIGKILL)
        status = status_once_not_running(backend, unit, within_s=10)
        assert status.state == UnitState.FAILED
        assert (
            status.reason
            == f"head node process (pid {head_pid}) exited with code 1; Ray reported: raylet [exit code=-9]"
        )
        assert not [pid for pid in agents if process_running(pid)]
    finally:
        backend.terminate(unit)


def test_a_spark_host_started_with_the_cluster_that_fails_says_why_and_the_cluster_lives_on(
    backend,
):
    """The unit's init starts the Spark host once the head is up (no Ray Job); a host that cannot
    start ends its launcher with the reason in its log."""
    launch = SparkHostLaunch(
        nonce="a" * 32,
        secret_sha256="0" * 64,
        executors=1,
        executor_cores=1,
        executor_memory="not-a-size",
        warm_timeout_s=120,
    )
    handle = backend.start(
        ClusterSpec(
            cu_id="launch-fails",
            name="bad host",
            cpus_per_node=1,
            memory_gb_per_node=2,
            spark_host=launch,
        )
    )
    try:
        assert (
            handle.spark_host_nonce == launch.nonce
        )  # the portal derives the host's secret from it
        deadline = time.monotonic() + 120
        while backend.spark_host_launch(handle) != SparkHostLaunchState.ENDED:
            assert time.monotonic() < deadline, backend.spark_host_launch_log(handle)
            time.sleep(0.5)
        log = backend.spark_host_launch_log(handle)
        assert '"state": "failed"' in log, log
        assert backend.status(handle).state == UnitState.RUNNING
    finally:
        backend.terminate(handle)
    assert cluster_pids(handle) == []


@pytest.mark.parametrize(
    "answer, used, reason",
    [
        ({"resources_used": {"CPU": 2.0, "memory": 2147483648.0}}, (2.0, 2 << 30), ""),
        (
            {"resources_used": {"CPU": "lots"}},
            (0.0, 0),
            "the Spark host reported no resource figures",
        ),
        (None, (0.0, 0), "resources in use as the Spark host reports them"),
    ],
)
def test_a_unit_without_a_dashboard_shows_its_nodes_and_what_its_spark_host_reports_in_use(
    answer, used, reason, closed_port
):
    """Nodes as the unit started them; use as its Spark host reports it (whatever the host's
    code writes there is a figure or nothing); no host answering, nothing in use."""
    import json
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Host(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps({"state": "ready", **answer}).encode()
            nonce = self.headers["Authorization"].split("nonce=")[1].split(",")[0]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            # Its proof, as the real host gives it (compute/host/host_auth.py).
            self.send_header(
                host_auth.PROOF_HEADER,
                host_auth.response_proof(secret_digest("s" * 32), nonce, 200, body),
            )
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Host)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1] if answer is not None else closed_port
    handle = ClusterHandle(
        backend="local",
        cu_id="t",
        spark_host_url=f"http://127.0.0.1:{port}",
        spark_host_secret="s" * 32,
        details={
            "nodes": [
                {"role": "head", "cpus": 2, "memory_bytes": 3 << 30},
                {"role": "worker-1", "cpus": 2, "memory_bytes": 3 << 30},
            ]
        },
    )
    try:
        status = reported_use(handle, LocalClusterBackend._status_from_the_nodes(handle))
    finally:
        server.shutdown()
        server.server_close()
    assert status.state == UnitState.RUNNING
    assert [(node.node_id, node.is_head, node.cpus) for node in status.nodes] == [
        ("head", True, 2.0),
        ("worker-1", False, 2.0),
    ]
    assert (status.cpus_total, status.memory_total_bytes) == (4.0, 6 << 30)
    assert (status.cpus_used, status.memory_used_bytes) == used
    assert status.reason.startswith(reason)
