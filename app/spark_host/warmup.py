"""A compute unit's warm Spark session, as the portal sees it.

Each unit hosts one long-lived Spark session (compute/host/spark_host.py) that executions share.
Starting it (a JVM driver and executor JVMs through RayDP) takes most of a cold start, so the
portal starts it as soon as a unit is RUNNING (`warm_up`, when CU_WARM_SPARK_ON_START is on),
while its owner is still choosing what to run; an execution that finds no warm session starts
it itself (`ensure_warm`). A local unit starts its host even earlier, with the cluster, as soon
as the head's GCS answers (`ClusterSpec.spark_host`): then this waits for that host instead.
Either way there is one bootstrap at a time per unit: a lock among this process's threads, and
a lease (`spark-host:<unit id>`) among worker processes.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time

from app import leases
from app.models import ComputeUnit
from app.ray_clusters.base import (
    ClusterBackend,
    ClusterHandle,
    ProgressCallback,
    SparkHostLaunchState,
)
from app.spark_host.client import SparkHostClient, SparkHostError

HOST_CALL_TIMEOUT_SECONDS = 5.0
BOOTSTRAP_TIMEOUT_SECONDS = 180.0
# A bootstrap lease outlives the longest bootstrap, so it needs no renewal.
_LEASE_SECONDS = BOOTSTRAP_TIMEOUT_SECONDS + 30.0

# One bootstrap at a time per compute unit (id → lock).
_locks: dict[int, threading.Lock] = {}
_locks_guard = threading.Lock()  # guards both
# How many runs in this process wait for each unit's host to start (id → count). A host that
# hears of one leaves out warming its write path (compute/host/spark_host.py): the run does that.
_runs_waiting: dict[int, int] = {}
# This process, as the holder of bootstrap leases.
_HOLDER = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
# The Spark host each unit had when this process last found it ready: unit id -> (host URL,
# Spark application id). An execution on such a unit is submitted at once, without the lease
# and the call that `ensure_warm` costs (about 40 ms of a warm run); see `ready_app`.
_ready: dict[int, tuple[str, str]] = {}


class SparkHostUnavailable(Exception):
    """The unit's Spark session could not be started or reached; the message says why."""


def spark_host_size(cu: ComputeUnit) -> dict:
    """Spark on the whole unit: one executor per node with all its CPUs and half its memory
    (the rest is Ray's object store, the Spark driver on the head and the JVMs' overhead)."""
    memory_mb = max(512, int(cu.memory_gb * 1024 / 2) // 128 * 128)
    return {
        "executors": cu.worker_nodes + 1,
        "executor_cores": cu.cpus,
        "executor_memory": f"{memory_mb}m",
    }


def ensure_warm(
    cu: ComputeUnit,
    handle: ClusterHandle,
    backend: ClusterBackend,
    progress: ProgressCallback = lambda _phase: None,
    *,
    for_a_run: bool = False,
) -> dict:
    """The unit's Spark host answers and its session is ready; bootstrap it if it is not there,
    or wait for the bootstrap under way. `for_a_run`: a run waits for it. Returns the host's
    info; raises SparkHostUnavailable."""
    with _locks_guard:
        lock = _locks.setdefault(cu.id, threading.Lock())
        _runs_waiting[cu.id] = _runs_waiting.get(cu.id, 0) + for_a_run
    try:
        return _ensure_warm_alone(cu, handle, backend, progress, lock)
    finally:
        with _locks_guard:
            if (waiting := _runs_waiting.pop(cu.id) - for_a_run) > 0:
                _runs_waiting[cu.id] = waiting


def _ensure_warm_alone(
    cu: ComputeUnit,
    handle: ClusterHandle,
    backend: ClusterBackend,
    progress: ProgressCallback,
    lock: threading.Lock,
) -> dict:
    with lock:
        lease = f"spark-host:{cu.id}"
        deadline = time.monotonic() + BOOTSTRAP_TIMEOUT_SECONDS
        while not leases.claim(lease, _HOLDER, _LEASE_SECONDS):
            if time.monotonic() > deadline:  # another worker's bootstrap takes too long
                raise SparkHostUnavailable(
                    "the compute unit's Spark host is being started elsewhere for too long"
                )
            time.sleep(0.5)
        try:
            return _ensure_warm(cu, handle, backend, progress)
        finally:
            leases.release([lease], _HOLDER)


def _ensure_warm(
    cu: ComputeUnit, handle: ClusterHandle, backend: ClusterBackend, progress: ProgressCallback
) -> dict:
    with SparkHostClient(handle, timeout=HOST_CALL_TIMEOUT_SECONDS) as client:
        try:
            info = _started_with_the_unit(cu.id, backend, handle, client)
        except SparkHostError:
            if backend.launch_spark_host(handle):  # the unit starts it itself: no Ray Job
                progress("starting the Spark host")
                try:
                    info = _started_with_the_unit(cu.id, backend, handle, client)
                except SparkHostError:
                    raise SparkHostUnavailable(
                        "the compute unit's Spark host did not start: "
                        f"{backend.spark_host_launch_log(handle) or 'no output'}"
                    ) from None
            else:
                info = _bootstrapped(cu, backend, handle, client, progress)
        deadline = time.monotonic() + BOOTSTRAP_TIMEOUT_SECONDS
        try:
            while info["state"] == "warming" and time.monotonic() < deadline:
                time.sleep(0.25)
                info = _info(client, cu.id)
        except SparkHostError as error:
            raise SparkHostUnavailable(
                f"the compute unit's Spark host stopped answering: {error}"
            ) from None
    if info["state"] != "ready":
        raise SparkHostUnavailable(
            f"the compute unit's Spark session is not usable ({info['state']}): {info.get('error')}"
        )
    _ready[cu.id] = (handle.spark_host_url, info["app_id"])
    return info


def ready_app(cu_id: int, handle: ClusterHandle) -> str | None:
    """The Spark application id of the unit's host if this process found it ready at the
    handle's address, else None."""
    url, app_id = _ready.get(cu_id, (None, None))
    return app_id if url == handle.spark_host_url else None


def forget_ready(cu_id: int) -> None:
    """The unit's host did not answer as a ready host does: the next execution asks it first."""
    _ready.pop(cu_id, None)


def _bootstrapped(
    cu: ComputeUnit,
    backend: ClusterBackend,
    handle: ClusterHandle,
    client: SparkHostClient,
    progress: ProgressCallback,
) -> dict:
    """The host started through Ray's Jobs API, for units whose cluster cannot start it itself."""
    if backend.spark_host_launch(handle) == SparkHostLaunchState.ENDED and not handle.dashboard_url:
        # Started with the unit, and it failed; Ray Jobs (a second try) need the dashboard.
        raise SparkHostUnavailable(
            "the compute unit's Spark host did not start: "
            f"{backend.spark_host_launch_log(handle) or 'no output'}"
        )
    try:
        return client.bootstrap(
            **spark_host_size(cu), timeout_s=BOOTSTRAP_TIMEOUT_SECONDS, progress=progress
        )
    except Exception as error:  # Ray's Jobs API raises its own errors too
        raise SparkHostUnavailable(
            f"the compute unit's Spark host did not start: {error}"
        ) from None


def _started_with_the_unit(
    cu_id: int, backend: ClusterBackend, handle: ClusterHandle, client: SparkHostClient
) -> dict:
    """The host's info, waiting for one the unit's backend started with the cluster to answer.
    Raises SparkHostError when there is no host to wait for: then it is bootstrapped."""
    deadline = time.monotonic() + BOOTSTRAP_TIMEOUT_SECONDS
    while True:
        try:
            return _info(client, cu_id)
        except SparkHostError:
            if (
                backend.spark_host_launch(handle) != SparkHostLaunchState.STARTING
                or time.monotonic() > deadline
            ):
                raise
        time.sleep(0.25)


def _info(client: SparkHostClient, cu_id: int) -> dict:
    """The host's info, telling it whether a run in this process waits for it."""
    return client.info(run_waiting=_runs_waiting.get(cu_id, 0) > 0)
