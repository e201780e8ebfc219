"""Local compute units: an isolated Ray cluster made of subprocesses on this machine.

Each node (a head and N workers) is one `ray start --block` process, run through
`compute.ray_node` so every Ray server listens on 127.0.0.1 only. Each node process
leads its own session, and everything the node starts stays in that session (Ray's
workers get process groups of their own, but not sessions). `terminate` stops the node
processes and then kills whatever is left in exactly these sessions; never `ray stop`,
which would stop every Ray cluster of the user, including other compute units.

Isolation between compute units on one machine:
- ports: every port Ray would otherwise default (GCS, dashboard, client server, node and
  object managers, agents, metrics, the worker port range) is chosen explicitly and free,
  and reserved within this process so two clusters started side by side never share one;
- files: each cluster has its own directory (Ray temp dirs, logs, Spark scratch space),
  removed on terminate;
- access: each cluster has its own Ray auth token, which also guards its dashboard.

The handle records pids (with their kernel start times, so a reused pid is not mistaken
for a node), ports and paths, so a restarted portal can check liveness and terminate.
"""
from __future__ import annotations

import os
import random
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from app.ray_clusters.base import (
    ClusterBackend,
    ClusterHandle,
    ClusterSpec,
    ClusterStartError,
    ClusterState,
    ClusterStatus,
    ProgressCallback,
    no_progress,
)
from app.ray_clusters.ray_dashboard import RayApiError, RayDashboard
from devstack.process import ManagedProcess, ServiceStartError, free_port, port_is_open

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_BASE_DIR = Path(tempfile.gettempdir()) / "lakeport-cu"

# Ray puts Unix sockets at <temp dir>/session_<date>_<pid>/sockets/plasma_store; Linux
# caps socket paths at 107 bytes, so the temp dir must stay short.
_RAY_SOCKET_SUFFIX_LEN = 66
_SOCKET_PATH_MAX = 107
# Worker port ranges are taken below Linux's ephemeral range (32768+), so outgoing
# connections never occupy them.
_WORKER_PORT_AREA = (20000, 32000)
WORKER_PORTS_PER_NODE = 100
_lock = threading.Lock()
_reserved_ports: set[int] = set()
# Node processes this portal process started, by pid: only a parent learns an exit code.
_children: dict[int, ManagedProcess] = {}


class LocalClusterBackend(ClusterBackend):
    kind = "local"

    def __init__(self, base_dir: Path | None = None, *, stop_grace_s: float = 5.0) -> None:
        self.base_dir = Path(base_dir or DEFAULT_BASE_DIR).resolve()
        # <base>/<8 hex>/<node dir>/ + Ray's session and socket names
        if len(str(self.base_dir)) + 14 + _RAY_SOCKET_SUFFIX_LEN > _SOCKET_PATH_MAX:
            raise ValueError(f"base_dir {self.base_dir} is too long for Ray's Unix socket paths")
        self.stop_grace_s = stop_grace_s

    # ------------------------------------------------------------------ start
    def start(self, spec: ClusterSpec, progress: ProgressCallback = no_progress) -> ClusterHandle:
        deadline = time.monotonic() + spec.start_timeout_s
        cluster_dir = self.base_dir / secrets.token_hex(4)
        cluster_dir.mkdir(parents=True)
        token = secrets.token_hex(32)
        token_path = cluster_dir / "auth_token"
        token_path.touch(mode=0o600)
        token_path.write_text(token)

        ports = {name: _reserve_port() for name in ("gcs", "dashboard", "client_server",
                                                    "autoscaler_metrics", "dashboard_metrics", "spark_host")}
        handle = ClusterHandle(
            backend=self.kind,
            cu_id=spec.cu_id,
            dashboard_url=f"http://127.0.0.1:{ports['dashboard']}" if spec.include_dashboard else None,
            auth_token=token,
            spark_host_url=f"http://127.0.0.1:{ports['spark_host']}",
            details={
                "cluster_dir": str(cluster_dir),
                "auth_token_file": str(token_path),
                "gcs_address": f"127.0.0.1:{ports['gcs']}",
                "ports": ports,
                "expected_nodes": spec.node_count,
                "nodes": [],
            },
        )
        env = self._node_env(cluster_dir, token_path, ports)
        dashboard = (RayDashboard(handle.dashboard_url, handle.auth_headers(), timeout=2.0)
                     if handle.dashboard_url else None)
        try:
            progress("starting head node")
            head_ready = dashboard.healthy if dashboard else lambda: port_is_open(ports["gcs"])
            self._start_node(handle, spec, env, role="head", ready=head_ready, deadline=deadline)
            if spec.worker_nodes:
                progress(f"starting {spec.worker_nodes} worker node(s)")
            for index in range(1, spec.worker_nodes + 1):
                # Workers are awaited together below, through the head's view of the cluster.
                self._start_node(handle, spec, env, role=f"worker-{index}", ready=None, deadline=deadline)
            self._wait_for_nodes(handle, spec, dashboard, deadline, progress)
        except ClusterStartError:
            self.terminate(handle)
            raise
        except Exception as error:
            self.terminate(handle)
            raise ClusterStartError(f"could not start the cluster: {error}") from error
        finally:
            if dashboard:
                dashboard.close()
        progress("cluster ready")
        return handle

    def _node_env(self, cluster_dir: Path, token_path: Path, ports: dict[str, int]) -> dict[str, str]:
        # Nothing of an outer Ray setup (RAY_ADDRESS, another token) may leak into this cluster.
        env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
        env.update({
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token_path),
            "RAY_USAGE_STATS_ENABLED": "0",
            # Fixed defaults in Ray (44217, 44227): two clusters would fight over them.
            "AUTOSCALER_METRIC_PORT": str(ports["autoscaler_metrics"]),
            "DASHBOARD_METRIC_PORT": str(ports["dashboard_metrics"]),
            # Job entrypoints say `python`; it must be this venv's, which has ray, raydp, pyspark.
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")])),
        })
        return env

    def _start_node(self, handle: ClusterHandle, spec: ClusterSpec, env: dict[str, str], *,
                    role: str, ready: Callable[[], bool] | None, deadline: float) -> None:
        cluster_dir = Path(handle.details["cluster_dir"])
        node_dir = cluster_dir / ("h" if role == "head" else f"w{role.split('-')[1]}")
        (node_dir / "spark").mkdir(parents=True)
        ports = {name: _reserve_port() for name in ("node_manager", "object_manager", "agent_http",
                                                    "agent_grpc", "runtime_env_agent", "metrics_export")}
        node = {"role": role, "ports": ports}
        handle.details["nodes"].append(node)  # from here on, terminate releases what the node holds
        worker_ports = _reserve_port_block(WORKER_PORTS_PER_NODE)
        node["worker_ports"] = [worker_ports[0], worker_ports[-1]]
        argv = [
            sys.executable, "-m", "compute.ray_node", "--block",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={node_dir}",
            f"--num-cpus={spec.cpus_per_node}",
            f"--memory={spec.memory_bytes_per_node - spec.object_store_bytes}",
            f"--object-store-memory={spec.object_store_bytes}",
            f"--node-manager-port={ports['node_manager']}",
            f"--object-manager-port={ports['object_manager']}",
            f"--dashboard-agent-listen-port={ports['agent_http']}",
            f"--dashboard-agent-grpc-port={ports['agent_grpc']}",
            f"--runtime-env-agent-port={ports['runtime_env_agent']}",
            f"--metrics-export-port={ports['metrics_export']}",
            f"--min-worker-port={worker_ports[0]}",
            f"--max-worker-port={worker_ports[-1]}",
            "--disable-usage-stats",
        ]
        cluster_ports = handle.details["ports"]
        if role == "head":
            argv += [
                "--head",
                f"--port={cluster_ports['gcs']}",
                f"--ray-client-server-port={cluster_ports['client_server']}",
                f"--include-dashboard={'true' if spec.include_dashboard else 'false'}",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={cluster_ports['dashboard']}",
            ]
        else:
            argv.append(f"--address={handle.details['gcs_address']}")
        process = ManagedProcess(role, argv, log_dir=cluster_dir, cwd=cluster_dir, ready=ready,
                                 stop_timeout=self.stop_grace_s)
        # Replaces (not extends) the inherited environment, which must lose any outer RAY_* variable.
        # Spark's scratch space stays inside the cluster directory, which terminate removes.
        process.env = {**env, "SPARK_LOCAL_DIRS": str(node_dir / "spark")}
        node["log"] = str(process.log_path)
        try:
            process.start(timeout=max(deadline - time.monotonic(), 1.0))
        except ServiceStartError:
            _remember(node, process)
            if time.monotonic() >= deadline:
                raise ClusterStartError(
                    f"did not become healthy within {spec.start_timeout_s:.0f} s: the {role} node was not ready"
                ) from None
            raise ClusterStartError(f"{role} node {_death_reason(node)}") from None
        _remember(node, process)

    def _wait_for_nodes(self, handle: ClusterHandle, spec: ClusterSpec, dashboard: RayDashboard | None,
                        deadline: float, progress: ProgressCallback) -> None:
        expected = handle.details["expected_nodes"]
        joined = -1
        while True:
            for node in handle.details["nodes"]:
                if (reason := _death_reason(node)) is not None:
                    raise ClusterStartError(f"{node['role']} node {reason}")
            if dashboard is not None:
                try:
                    now_joined = sum(node.alive for node in dashboard.nodes())
                except RayApiError:
                    now_joined = 0
            else:
                now_joined = sum(port_is_open(node["ports"]["node_manager"]) for node in handle.details["nodes"])
            if now_joined != joined:
                joined = now_joined
                progress(f"waiting for nodes: {joined} of {expected} joined")
            if joined >= expected:
                return
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"did not become healthy within {spec.start_timeout_s:.0f} s: {joined} of {expected} nodes joined"
                )
            time.sleep(0.3)

    def restore_token(self, handle: ClusterHandle) -> ClusterHandle:
        token_file = Path(handle.details.get("auth_token_file", ""))
        if handle.auth_token is None and token_file.is_file():
            handle.auth_token = token_file.read_text().strip()
        return handle

    # ----------------------------------------------------------------- status
    def status(self, handle: ClusterHandle) -> ClusterStatus:
        self._check_handle(handle)
        if not handle.details.get("nodes"):
            return ClusterStatus(ClusterState.TERMINATED)
        for node in handle.details["nodes"]:
            if (reason := _death_reason(node)) is not None:
                return ClusterStatus(ClusterState.FAILED, reason=f"{node['role']} node {reason}")
        if handle.dashboard_url is None:
            return ClusterStatus(ClusterState.RUNNING)
        try:
            with RayDashboard(handle.dashboard_url, handle.auth_headers()) as dashboard:
                status = dashboard.cluster_status()
        except RayApiError as error:
            # Every node process is alive, so the cluster is; only the figures are missing.
            return ClusterStatus(ClusterState.RUNNING, reason=f"resource figures unavailable: {error}")
        expected = handle.details["expected_nodes"]
        if status.alive_nodes < expected:
            status.state = ClusterState.FAILED
            status.reason = f"only {status.alive_nodes} of {expected} nodes alive"
        return status

    def adopt(self, handle: ClusterHandle) -> ClusterStatus:
        self._check_handle(handle)
        with _lock:
            _reserved_ports.update(_handle_ports(handle))
        return self.status(self.restore_token(handle))

    # -------------------------------------------------------------- terminate
    def terminate(self, handle: ClusterHandle) -> None:
        self._check_handle(handle)
        nodes = handle.details.get("nodes", [])
        for node in nodes:
            if "pid" in node and _death_reason(node) is None:
                _kill(node["pid"], signal.SIGTERM)  # `ray start --block` stops its node gracefully
        if not _wait_gone(handle, self.stop_grace_s):
            for pid in cluster_pids(handle):
                _kill(pid, signal.SIGKILL)
            if not _wait_gone(handle, 5.0):
                raise RuntimeError(f"processes {cluster_pids(handle)} of compute unit {handle.cu_id} survived SIGKILL")
        with _lock:
            _reserved_ports.difference_update(_handle_ports(handle))
            for node in nodes:
                _children.pop(node.get("pid"), None)
        shutil.rmtree(handle.details.get("cluster_dir", ""), ignore_errors=True)
        handle.details["nodes"] = []


# ---------------------------------------------------------------- processes
def _remember(node: dict, process: ManagedProcess) -> None:
    assert process.process is not None
    node["pid"] = process.process.pid
    node["start_time"] = _start_time(process.process.pid)
    with _lock:
        _children[node["pid"]] = process


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (field 3 onwards)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2:].split()


def _start_time(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def _is_same_live_process(pid: int, start_time: int | None) -> bool:
    fields = _proc_stat(pid)
    return fields is not None and fields[0] != "Z" and int(fields[19]) == start_time


def _death_reason(node: dict) -> str | None:
    """None while the node's process runs; otherwise how it ended, as precisely as knowable."""
    if "pid" not in node:
        return "was never started"
    pid = node["pid"]
    child = _children.get(pid)
    if child is not None:
        assert child.process is not None
        returncode = child.process.poll()
        if returncode is None:
            return None
        how = _describe_returncode(returncode)
    elif _is_same_live_process(pid, node.get("start_time")):
        return None
    else:
        how = "is gone (exit status unknown: it was started by an earlier portal process)"
    reported = _ray_exit_report(Path(node["log"]))
    return f"process (pid {pid}) {how}" + (f"; Ray reported: {reported}" if reported else "")


def _describe_returncode(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with code {returncode}"


_RAY_EXIT_LINE = re.compile(r"^\s+(\S+) \[exit code=(-?\d+)\]\s*$")


def _ray_exit_report(log_path: Path) -> str:
    """`ray start --block` names the subprocess that died first, e.g. "raylet [exit code=-9]"."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    return ", ".join(line.strip() for line in lines if _RAY_EXIT_LINE.match(line))


def _node_sessions(handle: ClusterHandle) -> set[int]:
    """Each node leads its own session (its pid is the session id), and everything it starts
    stays in it, Ray workers included (they get process groups of their own, not sessions).
    A session whose leader pid now belongs to another process's session is not ours."""
    sessions = set()
    for node in handle.details.get("nodes", []):
        if "pid" not in node:
            continue
        fields = _proc_stat(node["pid"])
        if fields is None or int(fields[19]) == node.get("start_time") or int(fields[3]) != node["pid"]:
            sessions.add(node["pid"])
    return sessions


def cluster_pids(handle: ClusterHandle) -> list[int]:
    """Live processes of a local cluster: its node processes and all they started."""
    sessions = _node_sessions(handle)
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _proc_stat(int(entry.name))):
            if int(fields[3]) in sessions and fields[0] != "Z":
                pids.append(int(entry.name))
    return pids


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(handle: ClusterHandle, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        for node in handle.details.get("nodes", []):
            child = _children.get(node.get("pid"))
            if child is not None and child.process is not None:
                child.process.poll()  # reap the node process, or it lingers as a zombie
        if not cluster_pids(handle):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


# -------------------------------------------------------------------- ports
def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _reserve_port() -> int:
    with _lock:
        while (port := free_port()) in _reserved_ports:
            pass
        _reserved_ports.add(port)
        return port


def _reserve_port_block(size: int) -> list[int]:
    low, high = _WORKER_PORT_AREA
    with _lock:
        for _ in range(200):
            first = random.randrange(low, high - size)
            block = list(range(first, first + size))
            if not _reserved_ports.intersection(block) and all(_port_is_free(port) for port in block):
                _reserved_ports.update(block)
                return block
    raise ClusterStartError(f"no {size} consecutive free ports between {low} and {high}")


def _handle_ports(handle: ClusterHandle) -> set[int]:
    ports = set(handle.details.get("ports", {}).values())
    for node in handle.details.get("nodes", []):
        ports.update(node["ports"].values())
        if "worker_ports" in node:
            first, last = node["worker_ports"]
            ports.update(range(first, last + 1))
    return ports
