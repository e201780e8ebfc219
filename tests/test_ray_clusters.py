"""Local compute units: real Ray clusters of subprocesses on this machine.

One two-node cluster serves the module; the test that kills its head runs last. A second,
head-only cluster proves that clusters side by side do not collide.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.processes import process_running, rss_bytes
from app.ray_clusters.base import ClusterHandle, ClusterSpec, ClusterStartError, ClusterState
from app.ray_clusters.existing import ExistingClusterBackend
from app.ray_clusters.local import LocalClusterBackend, cluster_pids
from devstack.process import free_port, port_is_open

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def listening_sockets(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket these processes listen on, from /proc."""
    listening: dict[str, tuple[str, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                address_hex, port_hex = fields[1].split(":")
                listening[fields[9]] = (_decode_address(address_hex), int(port_hex, 16))
    found = []
    for pid in pids:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except (FileNotFoundError, PermissionError):
            continue
        for link in links:
            inode = link.removeprefix("socket:[").removesuffix("]")
            if link.startswith("socket:[") and inode in listening:
                found.append((pid, *listening[inode]))
    return found


def _decode_address(address_hex: str) -> str:
    raw = bytes.fromhex(address_hex)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # little-endian 32-bit words
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
        [sys.executable, "-c", script], input=handle.to_json(), capture_output=True, text=True,
        cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}, timeout=60, check=True,
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
        ClusterSpec(cu_id="test-local", name="two nodes", cpus_per_node=1, memory_gb_per_node=2, worker_nodes=1),
        progress=steps.append,
    )
    handle.details["measured_start_s"] = round(time.monotonic() - started, 1)
    handle.details["progress_steps"] = steps
    yield handle
    backend.terminate(handle)
    assert cluster_pids(handle) == []


def test_start_reports_running_with_nodes_and_cpus(backend, cluster, capsys):
    status = backend.status(cluster)

    assert status.state == ClusterState.RUNNING, status.reason
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
        print(f"\n[measure] local CU (head + 1 worker) RUNNING after {cluster.details['measured_start_s']} s; "
              f"idle RSS {rss_bytes(pids) / 2**30:.2f} GiB over {len(pids)} processes")


def test_every_server_of_the_cluster_listens_on_loopback_only(cluster):
    sockets = listening_sockets(cluster_pids(cluster))

    assert {port for _, _, port in sockets} >= handle_ports(cluster) - {cluster.details["ports"]["spark_host"]}
    assert {address for _, address, _ in sockets} == {"127.0.0.1"}


def test_the_dashboard_demands_the_cluster_token(cluster):
    nodes_url = f"{cluster.dashboard_url}/api/v0/nodes"

    assert httpx.get(nodes_url).status_code == 401
    assert httpx.get(nodes_url, headers={"Authorization": "Bearer " + "0" * 64}).status_code == 403
    assert httpx.get(nodes_url, headers=cluster.auth_headers()).status_code == 200


def test_a_restarted_portal_adopts_the_live_cluster(backend, cluster):
    stored = cluster.to_json()
    assert cluster.auth_token not in stored  # the token stays in the cluster's 0600 file

    assert in_new_process(ClusterHandle.from_json(stored)) == {"state": "RUNNING", "reason": "", "nodes": 2}
    assert LocalClusterBackend().adopt(ClusterHandle.from_json(stored)).state == ClusterState.RUNNING


def test_two_clusters_side_by_side_do_not_collide_and_terminate_cleanly(backend, cluster):
    second = backend.start(ClusterSpec(cu_id="test-local-2", name="head only", memory_gb_per_node=1))
    try:
        assert backend.status(second).state == ClusterState.RUNNING
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
    assert backend.status(second).state == ClusterState.TERMINATED
    assert backend.status(cluster).state == ClusterState.RUNNING


def test_a_cluster_that_is_not_healthy_in_time_fails_and_leaves_nothing(backend):
    before = set(Path(backend.base_dir).iterdir())

    with pytest.raises(ClusterStartError, match=r"did not become healthy within 1 s"):
        backend.start(ClusterSpec(cu_id="test-local-slow", name="too slow", start_timeout_s=1))

    assert set(Path(backend.base_dir).iterdir()) == before


def attach_spec(address: str) -> ClusterSpec:
    return ClusterSpec(cu_id="test-attached", name="attached", address=address)


def test_an_existing_cluster_is_attached_by_its_dashboard_address(backend, cluster):
    existing = ExistingClusterBackend(token=cluster.auth_token)
    steps: list[str] = []

    handle = existing.start(attach_spec(cluster.dashboard_url), progress=steps.append)
    status = existing.status(existing.restore_token(ClusterHandle.from_json(handle.to_json())))

    assert steps == ["connecting to the Ray cluster", "cluster ready"]
    assert (status.state, status.alive_nodes, status.cpus_total) == (ClusterState.RUNNING, 2, 2.0)
    existing.terminate(handle)
    assert backend.status(cluster).state == ClusterState.RUNNING  # detaching leaves it running


def test_attaching_fails_with_the_reason(cluster):
    with pytest.raises(ClusterStartError, match="refused the cluster token"):
        ExistingClusterBackend(token="0" * 64).start(attach_spec(cluster.dashboard_url))
    with pytest.raises(ClusterStartError, match="not reachable"):
        ExistingClusterBackend().start(attach_spec(f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(ClusterStartError, match="not a Ray dashboard address"):
        ExistingClusterBackend().start(attach_spec("127.0.0.1:6379"))


def test_killing_the_head_fails_the_cluster_with_the_signal(backend, cluster):
    """Runs last in this module: it breaks the shared cluster."""
    attached = ExistingClusterBackend(token=cluster.auth_token).start(attach_spec(cluster.dashboard_url))
    head_pid = cluster.details["nodes"][0]["pid"]
    os.kill(head_pid, signal.SIGKILL)

    deadline = time.monotonic() + 5
    while (status := backend.status(cluster)).state == ClusterState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status.state == ClusterState.FAILED
    assert status.reason == f"head node process (pid {head_pid}) was killed by signal 9 (SIGKILL)"

    adopted = in_new_process(cluster)
    assert adopted["state"] == "FAILED"
    assert f"head node process (pid {head_pid}) is gone" in adopted["reason"]

    attached_status = ExistingClusterBackend().status(attached)
    assert attached_status.state == ClusterState.FAILED
    assert "not reachable" in attached_status.reason
