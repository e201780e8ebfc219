"""Local compute units: an isolated Ray cluster made of processes on this machine, sandboxed.

Each node (a head and N workers) is one `ray start --block` process, run through
`compute.node.ray_node` so every Ray server listens on 127.0.0.1 only (once the node runs, that
process is `compute/node/node_waiter.py`). All nodes of a unit run
in ONE bubblewrap sandbox (`sandbox.py`), started with `compute.node.unit_init` as its first
process: it starts the head, then the workers, and records how each node ended, which only
a parent can learn. The portal reaches the unit's dashboard and Spark host through socat
bridges on reserved loopback ports; the unit reaches only the allowed endpoints through
bridges the other way. Users' PySpark steps run in these nodes: nothing of the portal's
environment, files or network is theirs to read.

Isolation between compute units on one machine, and from the machine:
- ports: every port Ray would otherwise default is chosen explicitly, free and reserved
  (`local_ports.py`), including the worker port range;
- files: each cluster has its own directory (Ray temp dirs, logs, Spark scratch space),
  0700 and owned by its own uid, removed on terminate; the portal touches it only through
  `unit_files.UnitDir` and keeps its own files for the unit out of the unit's sight;
- resources: a control group and a filesystem of its own size per unit (`local_limits.py`),
  made before its first process;
- access: each cluster has its own Ray auth token, which also guards its dashboard.

The handle records pids (with their kernel start times, so a reused pid is not mistaken
for a node), the sandbox's PID namespace, ports and paths, so a restarted portal can check
liveness and terminate. `terminate` stops the node processes, then kills whatever is left
in the unit's PID namespace and the outside processes' sessions; never `ray stop`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from app.ray_clusters import local_limits, local_ports, sandbox, unit_files
from app.ray_clusters.base import (
    ClusterBackend,
    ClusterHandle,
    ClusterSpec,
    ClusterStartError,
    ClusterStatus,
    NodeStatus,
    ProgressCallback,
    SparkHostLaunch,
    SparkHostLaunchState,
    no_progress,
)
from app.ray_clusters.local_limits import LocalLimits
from app.ray_clusters.local_processes import (
    all_pids,
    children,
    cluster_pids,
    death_reason,
    is_same_live_process,
    kill,
    learn_pid,
    log_tail,
    node_record,
    pid_namespace,
    proc_stat,
    sandbox_running,
    start_time,
    unit_dir,
    unit_log_tail,
    wait_gone,
)
from app.ray_clusters.ray_dashboard import RayApiError, RayDashboard
from app.ray_clusters.unit_files import UnitDir
from app.ray_clusters.unit_limits import LimitsUnavailable, LimitUsage
from app.states import UnitState
from compute.build.jars import jars_dir
from compute.contract import SparkHostSettings, secret_digest

logger = logging.getLogger(__name__)
PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_BASE_DIR = Path(tempfile.gettempdir()) / "lakeport-cu"

# Ray puts Unix sockets at <temp dir>/session_<date>_<pid>/sockets/plasma_store; Linux
# caps socket paths at 107 bytes, so the temp dir must stay short.
_RAY_SOCKET_SUFFIX_LEN = 66
_SOCKET_PATH_MAX = 107
WORKER_PORTS_PER_NODE = 100
# A node's own ports, by the names its handle records, and the `ray start` options that take them.
_NODE_PORT_OPTIONS = {
    "node_manager": "node-manager-port",
    "object_manager": "object-manager-port",
    "agent_http": "dashboard-agent-listen-port",
    "agent_grpc": "dashboard-agent-grpc-port",
    "runtime_env_agent": "runtime-env-agent-port",
    "metrics_export": "metrics-export-port",
}
# Ports the portal reaches inside a unit, through ingress bridges.
_INGRESS_PORTS = ("dashboard", "spark_host")
# The record name of the process that starts a unit's Spark host with the unit (compute/node/unit_init.py).
SPARK_HOST_LAUNCHER = "spark-host-launcher"
# The file the unit's init takes as a request to start the launcher (compute/node/unit_init.py).
_LAUNCH_REQUEST = f"nodes/{SPARK_HOST_LAUNCHER}.start"
# A unit that did not start: its reason shows this many lines of the failing node's log, and
# the last KEPT_LOG_BYTES of each log are kept for the last FAILED_STARTS_KEPT such units.
START_FAILURE_LOG_LINES = 15
KEPT_LOG_BYTES = 256 * 1024
FAILED_STARTS_KEPT = 20


def allowed_endpoints(catalog_url: str, operator_endpoints: str) -> list[sandbox.Endpoint]:
    """What local units may connect to: the catalog, and the operator's `host:port` list."""
    catalog = urlsplit(catalog_url)
    if not catalog.hostname:
        raise ValueError(f"catalog URL {catalog_url!r} has no host")
    endpoints = [
        sandbox.Endpoint(
            catalog.hostname, catalog.port or (443 if catalog.scheme == "https" else 80)
        )
    ]
    return endpoints + [
        sandbox.Endpoint.parse(item) for item in operator_endpoints.split(",") if item.strip()
    ]


class LocalClusterBackend(ClusterBackend):
    kind = "local"

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        stop_grace_s: float = 5.0,
        endpoints: Sequence[sandbox.Endpoint] = (),
        limits: LocalLimits = LocalLimits(),
    ) -> None:
        self.base_dir = Path(base_dir or DEFAULT_BASE_DIR).resolve()
        # <base>/<8 hex>/<node dir>/ + Ray's session and socket names
        if len(str(self.base_dir)) + 14 + _RAY_SOCKET_SUFFIX_LEN > _SOCKET_PATH_MAX:
            raise ValueError(f"base_dir {self.base_dir} is too long for Ray's Unix socket paths")
        self.stop_grace_s = stop_grace_s
        self.endpoints = list(endpoints)
        self.limits = limits
        sandbox.egress_routes(
            self.endpoints, self.base_dir
        )  # refuses endpoints a sandbox cannot reach

    # ------------------------------------------------------------------ start
    def start(self, spec: ClusterSpec, progress: ProgressCallback = no_progress) -> ClusterHandle:
        deadline = time.monotonic() + spec.start_timeout_s
        handle = self._new_unit(spec)
        dashboard = (
            RayDashboard(handle.dashboard_url, handle.auth_headers(), timeout=2.0)
            if handle.dashboard_url
            else None
        )
        try:
            for role in ["head"] + [f"worker-{index}" for index in range(1, spec.worker_nodes + 1)]:
                self._plan_node(handle, spec, role)
            progress("starting head node")
            self._launch(handle, spec)
            head = handle.details["nodes"][0]
            while not (
                dashboard.healthy() if dashboard else (node_record(handle, head) or {}).get("ready")
            ):
                self._check_start(handle, spec, deadline, "the head node was not ready")
                time.sleep(0.2)
            if spec.worker_nodes:
                progress(f"starting {spec.worker_nodes} worker node(s)")
            self._wait_for_nodes(handle, spec, dashboard, deadline, progress)
        except ClusterStartError:
            self._end_failed_start(handle)
            raise
        except Exception as error:
            self._end_failed_start(handle)
            raise ClusterStartError(f"could not start the cluster: {error}") from error
        finally:
            if dashboard:
                dashboard.close()
        progress("cluster ready")
        return handle

    def _new_unit(self, spec: ClusterSpec) -> ClusterHandle:
        """The unit's directories (its own under its limits, the portal's beside it), its Ray
        token and ports: everything before its first process."""
        try:
            sandbox.require_sandbox()
            cluster_dir, uid = sandbox.make_unit_dir(self.base_dir)
        except sandbox.SandboxUnavailable as error:
            raise ClusterStartError(str(error)) from None
        portal_dir = unit_files.make_portal_dir(cluster_dir)
        try:  # before anything of the unit exists in its dir: the dir becomes its own filesystem
            limits = self.limits.apply(spec, cluster_dir, portal_dir, uid)
        except LimitsUnavailable as error:
            shutil.rmtree(portal_dir, ignore_errors=True)
            cluster_dir.rmdir()
            raise ClusterStartError(str(error)) from None
        token = secrets.token_hex(32)
        token_path = cluster_dir / "auth_token"
        UnitDir(cluster_dir).write_new(token_path.name, token.encode())
        if uid is not None:
            os.chown(token_path, uid, uid)  # Ray in the unit reads it
        # The portal's copy, read back after a restart: the unit's own can be anything by then.
        UnitDir(portal_dir).write_new("auth_token", token.encode())
        ports = {
            name: local_ports.reserve_port()
            for name in (
                "gcs",
                "dashboard",
                "autoscaler_metrics",
                "dashboard_metrics",
                "spark_host",
            )
        }
        return ClusterHandle(
            backend=self.kind,
            cu_id=spec.cu_id,
            dashboard_url=f"http://127.0.0.1:{ports['dashboard']}"
            if spec.include_dashboard
            else None,
            auth_token=token,
            spark_host_url=f"http://127.0.0.1:{ports['spark_host']}",
            spark_host_nonce=spec.spark_host.nonce if spec.spark_host else None,
            details={
                "cluster_dir": str(cluster_dir),
                "portal_dir": str(portal_dir),
                "limits": limits,
                "auth_token_file": str(token_path),
                "gcs_address": f"127.0.0.1:{ports['gcs']}",
                "ports": ports,
                "expected_nodes": spec.node_count,
                "uid": uid,
                "nodes": [],
                "processes": [],  # outside the sandbox: bwrap and the socat bridges
                "sandbox": {},
            },
        )

    def _end_failed_start(self, handle: ClusterHandle) -> None:
        """Keep the logs of a unit that did not start (bounded tails, beside the units' dirs,
        for the operator), then remove the unit like any other."""
        try:
            kept = failed_start_logs_dir(self.base_dir) / Path(handle.details["cluster_dir"]).name
            kept.mkdir(parents=True, mode=0o700, exist_ok=True)
            names = [Path(node["log"]).name for node in handle.details.get("nodes", [])]
            for name in names + [f"{SPARK_HOST_LAUNCHER}.log"]:
                try:
                    (kept / name).write_bytes(unit_dir(handle).read_tail(name, KEPT_LOG_BYTES))
                except OSError:
                    continue
            if (outside := Path(handle.details["portal_dir"]) / "outside.log").is_file():
                shutil.copyfile(outside, kept / "outside.log")
            _prune_failed_start_logs(self.base_dir)
        except OSError as error:
            logger.warning("could not keep the logs of compute unit %s: %s", handle.cu_id, error)
        self.terminate(handle)

    def _node_env(
        self, cluster_dir: Path, token_path: Path, ports: dict[str, int]
    ) -> dict[str, str]:
        """The whole environment of the unit's processes: an allow-list, nothing of the portal's."""
        compute_package = (PROJECT_ROOT / "compute").resolve()
        env = {
            "PATH": os.pathsep.join(
                [str(Path(sandbox.sandbox_python()).parent), "/usr/local/bin", "/usr/bin", "/bin"]
            ),
            "HOME": str(cluster_dir),
            "TMPDIR": "/tmp",
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            # Only `compute/` is visible there, so `import app` fails inside the sandbox.
            "PYTHONPATH": str(compute_package.parent),
            "PYSPARK_PYTHON": sandbox.sandbox_python(),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "LAKEPORT_JARS_DIR": str(jars_dir().resolve()),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token_path),
            "RAY_USAGE_STATS_ENABLED": "0",
            # Fixed defaults in Ray (44217, 44227): two clusters would fight over them.
            "AUTOSCALER_METRIC_PORT": str(ports["autoscaler_metrics"]),
            "DASHBOARD_METRIC_PORT": str(ports["dashboard_metrics"]),
        }
        if os.environ.get("JAVA_HOME"):
            env["JAVA_HOME"] = os.environ["JAVA_HOME"]
        return env

    def _read_only_paths(self) -> list[Path]:
        paths = [
            *sandbox.runtime_paths(),
            jars_dir().resolve(),
            (PROJECT_ROOT / "compute").resolve(),
        ]
        if os.environ.get("JAVA_HOME"):
            paths.append(Path(os.environ["JAVA_HOME"]).resolve())
        return paths

    def _plan_node(self, handle: ClusterHandle, spec: ClusterSpec, role: str) -> None:
        cluster_dir = Path(handle.details["cluster_dir"])
        node_dir = cluster_dir / ("h" if role == "head" else f"w{role.split('-')[1]}")
        ports = {name: local_ports.reserve_port() for name in _NODE_PORT_OPTIONS}
        node = {
            "role": role,
            "ports": ports,
            "dir": str(node_dir),
            "log": str(cluster_dir / f"{role}.log"),
            "cpus": spec.cpus_per_node,
            "memory_bytes": spec.memory_bytes_per_node - spec.object_store_bytes,
        }
        handle.details["nodes"].append(node)  # from here on, terminate releases what the node holds
        worker_ports = local_ports.reserve_port_block(WORKER_PORTS_PER_NODE)
        node["worker_ports"] = [worker_ports[0], worker_ports[-1]]
        argv = [
            sandbox.sandbox_python(),
            "-m",
            "compute.node.ray_node",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={node_dir}",
            f"--num-cpus={spec.cpus_per_node}",
            f"--memory={node['memory_bytes']}",
            f"--object-store-memory={spec.object_store_bytes}",
            *(f"--{option}={ports[name]}" for name, option in _NODE_PORT_OPTIONS.items()),
            f"--min-worker-port={worker_ports[0]}",
            f"--max-worker-port={worker_ports[-1]}",
            "--disable-usage-stats",
            # It streams every worker's output to the drivers, where nothing reads it (the Spark
            # host's own output is its launcher's log); the logs stay in the node's directory.
            "--include-log-monitor=false",
            # Without a dashboard nothing asks Ray's agents anything: stand-ins take their place.
            *([] if spec.include_dashboard else ["--without-agents"]),
        ]
        cluster_ports = handle.details["ports"]
        if role == "head":
            argv += [
                "--head",
                f"--port={cluster_ports['gcs']}",
                f"--include-dashboard={'true' if spec.include_dashboard else 'false'}",
                # The autoscaler's monitor reports to the dashboard's cluster status; a unit has a fixed size.
                *([] if spec.include_dashboard else ["--no-monitor"]),
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={cluster_ports['dashboard']}",
            ]
        else:
            argv.append(f"--address={handle.details['gcs_address']}")
        node["plan"] = {
            "role": role,
            "argv": argv,
            "log": node["log"],
            "dir": str(node_dir / "spark"),
            # Spark's scratch space stays inside the cluster directory, which terminate removes.
            "env": {"SPARK_LOCAL_DIRS": str(node_dir / "spark")},
            "ready_port": cluster_ports["gcs"] if role == "head" else ports["node_manager"],
        }

    def _launch(self, handle: ClusterHandle, spec: ClusterSpec) -> None:
        """Starts the sandbox (with the nodes' init inside) and the bridges outside it."""
        cluster_dir = Path(handle.details["cluster_dir"])
        uid = handle.details["uid"]
        socket_dir = cluster_dir / "sock"
        socket_dir.mkdir()
        if uid is not None:
            os.chown(socket_dir, uid, uid)
        routes = sandbox.egress_routes(self.endpoints, socket_dir)
        generated = {"/etc/hosts": sandbox.hosts_file_text(routes)}
        if uid is not None:
            generated.update(sandbox.account_files(uid, cluster_dir))
        etc_files = {
            target: Path(handle.details["portal_dir"]) / Path(target).name for target in generated
        }
        for target, text in generated.items():
            etc_files[target].write_text(text)
            etc_files[target].chmod(0o644)
        egress = [sandbox.egress_forwarders(route) for route in routes]
        ingress = [
            sandbox.ingress_forwarders(handle.details["ports"][name], socket_dir / name)
            for name in _INGRESS_PORTS
            if name != "dashboard" or spec.include_dashboard
        ]
        ingress += [
            sandbox.ingress_forwarders(port, socket_dir / f"port-{port}")
            for port in spec.extra_ports
        ]
        plan_path = cluster_dir / "plan.json"
        launcher = self._spark_host_launcher(handle, spec.spark_host) if spec.spark_host else None
        UnitDir(cluster_dir).write_new(
            plan_path.name,
            mode=0o644,
            data=json.dumps(
                {
                    "records_dir": str(cluster_dir / "nodes"),
                    "forwarders_log": str(cluster_dir / "forwarders.log"),
                    "forwarders": [inside for _, inside in egress + ingress],
                    "nodes": [node.pop("plan") for node in handle.details["nodes"]],
                    "with_head": [launcher] if launcher and spec.spark_host.with_cluster else [],
                    "on_request": [launcher] if launcher else [],
                }
            ).encode(),
        )
        handle.details["spark_host_launched"] = bool(launcher and spec.spark_host.with_cluster)
        handle.details["spark_host_on_request"] = launcher is not None
        env = self._node_env(
            cluster_dir, Path(handle.details["auth_token_file"]), handle.details["ports"]
        )
        bwrap = sandbox.bwrap_argv(
            unit_dir=cluster_dir,
            uid=uid,
            read_only=self._read_only_paths(),
            etc_files=etc_files,
            command=[sandbox.sandbox_python(), "-m", "compute.node.unit_init", str(plan_path)],
        )
        bridge_env = {"PATH": "/usr/bin:/bin"}
        for outside, _ in egress:
            self._spawn(handle, "egress bridge", sandbox.as_unit_user(uid, outside), bridge_env)
        handle.details["sandbox"] = {"pid": self._spawn(handle, "sandbox", bwrap, env)}
        for outside, _ in ingress:
            self._spawn(handle, "ingress bridge", sandbox.as_unit_user(uid, outside), bridge_env)
        self._find_namespace(handle)

    @staticmethod
    def _spark_host_launcher(handle: ClusterHandle, launch: SparkHostLaunch) -> dict:
        """The unit's init starts the Spark host's launcher with the head node (the launcher
        waits for the head's GCS): the same entrypoint as the Ray Job a bootstrap submits, as a
        plain driver of the cluster."""
        settings = SparkHostSettings(
            port=handle.details["ports"]["spark_host"],
            namespace=handle.spark_host_namespace,
            secret_sha256=launch.secret_sha256,
            bind_loopback=True,
            executors=launch.executors,
            executor_cores=launch.executor_cores,
            executor_memory=launch.executor_memory,
            warm_timeout_s=launch.warm_timeout_s,
        )
        cluster_dir = Path(handle.details["cluster_dir"])
        return {
            "role": SPARK_HOST_LAUNCHER,
            "argv": [
                sandbox.sandbox_python(),
                "-m",
                "compute.host.start_spark_host",
                settings.to_json(),
            ],
            "env": {"RAY_ADDRESS": handle.details["gcs_address"]},
            "dir": str(cluster_dir / "h"),
            "log": str(cluster_dir / f"{SPARK_HOST_LAUNCHER}.log"),
            "ready_port": handle.details["ports"]["spark_host"],
        }

    def spark_host_launch(self, handle: ClusterHandle) -> SparkHostLaunchState:
        if unit_dir(handle).exists(
            _LAUNCH_REQUEST
        ):  # the unit's init starts the launcher, then takes the request
            return SparkHostLaunchState.STARTING
        record = node_record(handle, {"role": SPARK_HOST_LAUNCHER})
        if record is None:  # not started yet: with the cluster's head; or never
            return (
                SparkHostLaunchState.STARTING
                if handle.details.get("spark_host_launched")
                else SparkHostLaunchState.NONE
            )
        return (
            SparkHostLaunchState.STARTING
            if record["returncode"] is None
            else SparkHostLaunchState.ENDED
        )

    def launch_spark_host(self, handle: ClusterHandle) -> bool:
        """Ask the unit's init to start the Spark host's launcher (compute/node/unit_init.py): the
        unit's first host when it was not started with the cluster, or a new one after its host
        ended. No Ray Job, so no dashboard, is needed."""
        if not handle.details.get("spark_host_on_request"):
            return False  # a unit started before units could
        if (
            self.spark_host_launch(handle) != SparkHostLaunchState.STARTING
        ):  # one launcher at a time
            # The request names the host's present key (a pooled unit's changed at its claim):
            # the unit's init hands it to the launcher, whose plan holds the key of the start.
            key = (
                secret_digest(handle.spark_host_secret).encode()
                if handle.spark_host_secret
                else b""
            )
            unit_dir(handle).create_replacing(_LAUNCH_REQUEST, key, mode=0o644)
        return True

    def spark_host_launch_log(self, handle: ClusterHandle) -> str:
        return unit_log_tail(handle, f"{SPARK_HOST_LAUNCHER}.log", lines=5, limit=1000)

    def _spawn(self, handle: ClusterHandle, name: str, argv: list[str], env: dict[str, str]) -> int:
        with open(Path(handle.details["portal_dir"]) / "outside.log", "ab") as log:
            # Its own session, which terminate kills as a whole.
            process = subprocess.Popen(
                local_limits.join_argv(handle.details.get("limits", {}), argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=handle.details["cluster_dir"],
                start_new_session=True,
            )
        children[process.pid] = process
        handle.details["processes"].append(
            {"name": name, "pid": process.pid, "start_time": start_time(process.pid)}
        )
        return process.pid

    def _find_namespace(self, handle: ClusterHandle) -> None:
        """The sandbox's PID namespace, through its first process (bwrap's child, pid 1 inside)."""
        box = handle.details["sandbox"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for pid in all_pids():
                fields = proc_stat(pid)
                if fields and int(fields[1]) == box["pid"] and (namespace := pid_namespace(pid)):
                    box.update(
                        init_pid=pid, init_start_time=int(fields[19]), pid_namespace=namespace
                    )
                    return
            if (child := children.get(box["pid"])) is not None and child.poll() is not None:
                break
            time.sleep(0.02)
        raise ClusterStartError(f"the sandbox did not start: {log_tail(handle, 'outside.log')}")

    def _check_start(
        self, handle: ClusterHandle, spec: ClusterSpec, deadline: float, late: str
    ) -> None:
        """Raises if a node died, the sandbox ended or time is up; learns nodes' pids on the way."""
        for node in handle.details["nodes"]:
            learn_pid(handle, node)
            if (reason := death_reason(handle, node)) is not None:
                tail = unit_log_tail(
                    handle, Path(node["log"]).name, lines=START_FAILURE_LOG_LINES, limit=700
                )
                raise ClusterStartError(
                    f"{node['role']} node {reason}"
                    + (f"; the last lines of its log:\n{tail}" if tail else "; its log is empty")
                )
        if not sandbox_running(handle):
            raise ClusterStartError(f"the sandbox ended: {log_tail(handle, 'outside.log')}")
        if time.monotonic() > deadline:
            raise ClusterStartError(
                f"did not become healthy within {spec.start_timeout_s:.0f} s: {late}"
            )

    def _wait_for_nodes(
        self,
        handle: ClusterHandle,
        spec: ClusterSpec,
        dashboard: RayDashboard | None,
        deadline: float,
        progress: ProgressCallback,
    ) -> None:
        expected = handle.details["expected_nodes"]
        joined = -1
        while True:
            nodes = handle.details["nodes"]
            if dashboard is not None:
                try:
                    now_joined = sum(node.alive for node in dashboard.nodes())
                except RayApiError:
                    now_joined = 0
            else:
                now_joined = sum(
                    bool((node_record(handle, node) or {}).get("ready")) for node in nodes
                )
            if now_joined != joined:
                joined = now_joined
                progress(f"waiting for nodes: {joined} of {expected} joined")
            self._check_start(handle, spec, deadline, f"{joined} of {expected} nodes joined")
            if joined >= expected and all("pid" in node for node in nodes):
                return
            time.sleep(0.3)

    def restore_token(self, handle: ClusterHandle) -> ClusterHandle:
        """The unit's Ray token, from the portal's own copy (the one in the unit's dir is the
        unit's to change)."""
        if handle.auth_token is not None:
            return handle
        # A unit started before the portal kept its own copy has only the unit's: read without
        # following links (it only ever goes to that unit's own dashboard).
        kept = handle.details.get("portal_dir") or handle.details.get("cluster_dir", "")
        try:
            token = UnitDir(kept).read_head("auth_token", 256)
        except (OSError, ValueError):
            return handle
        handle.auth_token = token.decode("ascii", "replace").strip() or None
        return handle

    # ----------------------------------------------------------------- status
    def status(self, handle: ClusterHandle) -> ClusterStatus:
        self._check_handle(handle)
        if not handle.details.get("nodes"):
            return ClusterStatus(UnitState.TERMINATED)
        for node in handle.details["nodes"]:
            if (reason := death_reason(handle, node)) is not None:
                over = self.over_limit(handle, LimitUsage())
                return ClusterStatus(
                    UnitState.FAILED,
                    reason=f"{node['role']} node {reason}" + (f"; {over}" if over else ""),
                )
        status = self._live_status(handle)
        status.limits = local_limits.report(
            handle.details.get("limits", {}), Path(handle.details["cluster_dir"])
        )
        return status

    def limit_usage(self, handle: ClusterHandle) -> LimitUsage | None:
        return local_limits.usage(handle.details.get("limits", {}))

    def over_limit(self, handle: ClusterHandle, before: LimitUsage | None) -> str | None:
        return local_limits.over_limit(
            handle.details.get("limits", {}), before, Path(handle.details["cluster_dir"])
        )

    def _live_status(self, handle: ClusterHandle) -> ClusterStatus:
        if handle.dashboard_url is None:
            return self._status_from_the_nodes(handle)
        try:
            with RayDashboard(handle.dashboard_url, handle.auth_headers()) as dashboard:
                status = dashboard.cluster_status()
        except RayApiError as error:
            # Every node process is alive, so the cluster is; only the figures are missing.
            return ClusterStatus(UnitState.RUNNING, reason=f"resource figures unavailable: {error}")
        expected = handle.details["expected_nodes"]
        if status.alive_nodes < expected:
            status.state = UnitState.FAILED
            status.reason = f"only {status.alive_nodes} of {expected} nodes alive"
        return status

    @staticmethod
    def _status_from_the_nodes(handle: ClusterHandle) -> ClusterStatus:
        """A unit without a dashboard: its nodes as started (each node's process is alive). What
        is in use is what its Spark host reports (`use_from_spark_host`, asked by the portal):
        only the host and its Spark session take Ray resources on a unit."""
        nodes = [
            NodeStatus(
                node_id=node["role"],
                is_head=node["role"] == "head",
                alive=True,
                cpus=float(node.get("cpus", 0)),
                memory_bytes=int(node.get("memory_bytes", 0)),
            )
            for node in handle.details["nodes"]
        ]
        return ClusterStatus(
            UnitState.RUNNING,
            nodes=nodes,
            cpus_total=sum(node.cpus for node in nodes),
            memory_total_bytes=sum(node.memory_bytes for node in nodes),
            use_from_spark_host=True,
        )

    def adopt(self, handle: ClusterHandle) -> ClusterStatus:
        self._check_handle(handle)
        local_ports.reserve(local_ports.handle_ports(handle))
        return self.status(self.restore_token(handle))

    # -------------------------------------------------------------- terminate
    def terminate(self, handle: ClusterHandle) -> None:
        self._check_handle(handle)
        nodes = handle.details.get("nodes", [])
        for node in nodes:
            if "pid" in node and is_same_live_process(node["pid"], node.get("start_time")):
                kill(node["pid"], signal.SIGTERM)  # the node's waiter stops its servers gracefully
        wait_gone(handle, self.stop_grace_s, sandbox_only=True)
        for pid in cluster_pids(handle):  # the bridges, and whatever did not stop in time
            kill(pid, signal.SIGKILL)
        if not wait_gone(handle, 5.0):
            raise RuntimeError(
                f"processes {cluster_pids(handle)} of compute unit {handle.cu_id} survived SIGKILL"
            )
        local_ports.release(local_ports.handle_ports(handle))
        for process in handle.details.get("processes", []):
            children.pop(process["pid"], None)
        if handle.details.get("cluster_dir"):
            local_limits.release(
                handle.details.get("limits", {}), Path(handle.details["cluster_dir"])
            )
        for directory in ("cluster_dir", "portal_dir"):
            if handle.details.get(directory):
                shutil.rmtree(handle.details[directory], ignore_errors=True)
        handle.details["nodes"] = []


def failed_start_logs_dir(base_dir: Path) -> Path:
    """Where the logs of units that did not start are kept (root-only, not in any unit's view)."""
    return base_dir / ".portal" / "failed-starts"


def _prune_failed_start_logs(base_dir: Path) -> None:
    kept = sorted(failed_start_logs_dir(base_dir).iterdir(), key=lambda path: path.stat().st_mtime)
    for old in kept[:-FAILED_STARTS_KEPT]:
        shutil.rmtree(old, ignore_errors=True)
