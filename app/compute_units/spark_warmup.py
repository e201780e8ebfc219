"""A compute unit's warm Spark session, as the portal sees it.

Each unit hosts one long-lived Spark session (compute/spark_host.py) that executions share.
Starting it (a JVM driver and executor JVMs through RayDP) takes most of a cold start, so the
portal starts it as soon as a unit is RUNNING (`warm_up`, when CU_WARM_SPARK_ON_START is on),
while its owner is still choosing what to run; an execution that finds no warm session starts
it itself (`ensure_warm`). Either way there is one bootstrap at a time per unit.
"""
from __future__ import annotations

import threading
import time

from app.models import ComputeUnit
from app.ray_clusters.base import ClusterHandle, ProgressCallback
from app.ray_clusters.spark_host_client import SparkHostClient, SparkHostError

HOST_CALL_TIMEOUT_SECONDS = 5.0
BOOTSTRAP_TIMEOUT_SECONDS = 180.0

# One bootstrap at a time per compute unit (id → lock).
_locks: dict[int, threading.Lock] = {}
_locks_guard = threading.Lock()


class SparkHostUnavailable(Exception):
    """The unit's Spark session could not be started or reached; the message says why."""


def spark_host_size(cu: ComputeUnit) -> dict:
    """Spark on the whole unit: one executor per node with all its CPUs and half its memory
    (the rest is Ray's object store, the Spark driver on the head and the JVMs' overhead)."""
    memory_mb = max(512, int(cu.memory_gb * 1024 / 2) // 128 * 128)
    return {"executors": cu.worker_nodes + 1, "executor_cores": cu.cpus, "executor_memory": f"{memory_mb}m"}


def ensure_warm(cu: ComputeUnit, handle: ClusterHandle, progress: ProgressCallback = lambda _phase: None) -> dict:
    """The unit's Spark host answers and its session is ready; bootstrap it if it is not there,
    or wait for the bootstrap under way. Returns the host's info; raises SparkHostUnavailable."""
    with _locks_guard:
        lock = _locks.setdefault(cu.id, threading.Lock())
    with lock, SparkHostClient(handle, timeout=HOST_CALL_TIMEOUT_SECONDS) as client:
        try:
            info = client.info()
        except SparkHostError:
            try:
                info = client.bootstrap(**spark_host_size(cu), timeout_s=BOOTSTRAP_TIMEOUT_SECONDS,
                                        progress=progress)
            except Exception as error:  # Ray's Jobs API raises its own errors too
                raise SparkHostUnavailable(f"the compute unit's Spark host did not start: {error}") from None
        deadline = time.monotonic() + BOOTSTRAP_TIMEOUT_SECONDS
        try:
            while info["state"] == "warming" and time.monotonic() < deadline:
                time.sleep(0.25)
                info = client.info()
        except SparkHostError as error:
            raise SparkHostUnavailable(f"the compute unit's Spark host stopped answering: {error}") from None
    if info["state"] != "ready":
        raise SparkHostUnavailable(
            f"the compute unit's Spark session is not usable ({info['state']}): {info.get('error')}")
    return info
