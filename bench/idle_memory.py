"""Idle memory: what a warm compute unit holds while it runs nothing. The resident set size
(RSS) summed over every process of the unit (its sandbox: Ray's head processes, the Spark
host, RayDP's master and the executor JVMs, Python workers), measured after the warm benchmark
and a short settle. Target ≤ 2.0 GiB (issue 21; 2.5 GiB before).

RSS counts pages shared between processes once per process (shared libraries, Ray's object
store), so the sum of the proportional set size (PSS) is printed beside it: that is what the
unit costs the machine. Per-process figures show where the memory goes.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

from app.compute_units import handles
from app.models import ComputeUnit
from app.ray_clusters.local import cluster_pids
from bench.harness import Bench, Summary, verdict

NAME = "idle-memory"
TARGET_GIB = 2.0  # issue 21 (was 2.5)
SETTLE_S = 10.0
GIB = 2**30


def run(bench: Bench, options) -> Summary:
    print(
        f"\n== idle-memory: RSS of a warm, idle compute unit, summed over its processes (after {SETTLE_S:g} s idle)"
    )
    cu_id = bench.compute_unit_id()
    bench.wait_until_spark_ready(cu_id)
    time.sleep(SETTLE_S)
    with bench.app.app_context():
        handle = handles.handle_of(bench.row(ComputeUnit, cu_id))
    processes = [
        process for pid in cluster_pids(handle) if (process := _memory_of(pid)) is not None
    ]
    rss = sum(process["rss"] for process in processes)
    pss = sum(process["pss"] for process in processes)
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for process in processes:
        by_kind[process["kind"]].append(process)
    print(f"  {len(processes)} processes: RSS {rss / GIB:.2f} GiB, PSS {pss / GIB:.2f} GiB")
    for kind, members in sorted(by_kind.items(), key=lambda item: -sum(p["rss"] for p in item[1])):
        print(
            f"    {kind:<34} ×{len(members):<2} RSS {sum(p['rss'] for p in members) / 2**20:7.0f} MiB"
            f"  PSS {sum(p['pss'] for p in members) / 2**20:7.0f} MiB"
        )
    met = rss / GIB <= TARGET_GIB
    print(
        f"  RSS {rss / GIB:.2f} GiB (target ≤ {TARGET_GIB} GiB, {rss / GIB / TARGET_GIB:.2f}× the target): "
        f"{verdict(met)}"
    )
    return Summary(
        NAME,
        f"RSS {rss / GIB:.2f} GiB over {len(processes)} processes (PSS {pss / GIB:.2f} GiB; "
        f"target ≤ {TARGET_GIB} GiB)",
        met,
    )


def _memory_of(pid: int) -> dict | None:
    """RSS and PSS in bytes and what kind of process it is; None if it is gone."""
    proc = Path(f"/proc/{pid}")
    try:
        status = dict(
            line.split(":", 1) for line in (proc / "status").read_text().splitlines() if ":" in line
        )
        argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        try:
            rollup = (proc / "smaps_rollup").read_text()
            pss = (
                next(
                    int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")
                )
                * 1024
            )
        except (OSError, StopIteration):
            pss = 0
    except OSError:
        return None
    rss = int(status.get("VmRSS", "0 kB").split()[0]) * 1024
    return {"pid": pid, "rss": rss, "pss": pss, "kind": _kind(status.get("Name", "").strip(), argv)}


def _kind(name: str, argv: list[str]) -> str:
    """A short label: the program, and for Java and Python the part of the unit it is."""
    line = " ".join(argv)
    if Path(argv[0]).name in (
        "gcs_server",
        "raylet",
    ):  # Ray's own binaries, inside its Python package
        return f"Ray: {Path(argv[0]).name}"
    if name == "java" or argv[0].endswith("java"):
        # The driver is pyspark's gateway JVM, which holds RayDP's app master; executors are Ray
        # Java actors (RayDP gives them an initial heap). RayDP's own launcher JVM and app master
        # actor would be Java processes of their own, if they ran.
        if "pyspark-shell" in argv:
            return "java: Spark driver"
        if "org.apache.spark.deploy.raydp.AppMasterEntryPoint" in argv:
            return "java: RayDP app master launcher"
        if "io.ray.runtime.runner.worker.DefaultWorker" in argv:
            return (
                "java: Spark executor"
                if any(arg.startswith("-Xms") for arg in argv)
                else "java: RayDP app master"
            )
        return "java: other"
    if name.startswith(("python", "ray::")) or "python" in argv[0]:
        for marker, label in (
            ("ray::SparkHost", "python: Spark host actor"),
            ("ray::_Unwrapped", "python: Spark host actor"),  # compute/host/spark_host.py
            ("ray::RayDPSparkMaster", "python: RayDP master actor"),
            ("idle_agent.py", "python: Ray agent stand-in"),  # compute/node/idle_agent.py
            ("node_waiter.py", "python: Ray node waiter"),  # compute/node/node_waiter.py
            ("compute.node.unit_init", "python: the unit's init"),
            ("ray::DashboardAgent", "python: Ray dashboard agent"),
            ("ray::RuntimeEnvAgent", "python: Ray runtime env agent"),
            ("compute.node.ray_node", "python: Ray node launcher"),
            ("ray::", "python: Ray worker"),
            ("pyspark.daemon", "python: PySpark worker"),
            ("pyspark.worker", "python: PySpark worker"),
            ("dashboard", "python: Ray dashboard"),
            ("log_monitor", "python: Ray log monitor"),
            ("runtime_env", "python: Ray runtime env agent"),
            ("default_worker", "python: Ray worker"),
            ("ray start", "python: ray start"),
            ("ray/scripts", "python: ray start"),
            ("monitor.py", "python: Ray monitor"),
        ):
            if marker in line:
                return label
        return f"python: {Path(argv[1]).name if len(argv) > 1 else 'other'}"
    return name or Path(argv[0]).name
