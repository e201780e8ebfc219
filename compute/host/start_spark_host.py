"""Ray Job entrypoint: `python -m compute.host.start_spark_host '<SparkHostSettings JSON>'`.

Creates the compute unit's Spark host (in the unit's own Ray namespace) on the node this
job's driver runs on (the head node, where Ray runs job drivers), or finds the one already
there; waits until its Spark session is warm; prints the host's info as one JSON line;
exits 0 when it is ready. A host whose session failed is removed, so the next attempt
starts afresh. The settings carry only the SHA-256 of the host's secret: this command line
is visible to any code on the cluster (`ray job list`).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import asdict, replace

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from compute.contract import HOST_KEY_ENV, SparkHostSettings
from compute.host.spark_host import ACTOR_NAME, SparkHost

# How often to ask the GCS whether the node this driver joins is up, and for how long.
NODE_POLL_SECONDS = 0.05
NODE_WAIT_SECONDS = 60.0


def main(argv: list[str]) -> int:
    settings = SparkHostSettings.from_json(argv[0])
    if key := os.environ.get(
        HOST_KEY_ENV
    ):  # a relaunch after the key changed (compute/node/unit_init.py)
        settings = replace(settings, secret_sha256=key)
    if address := os.environ.get("RAY_ADDRESS"):
        _wait_for_a_live_node(address)
    ray.init(namespace=settings.namespace, log_to_driver=False)
    host = SparkHost.options(
        name=ACTOR_NAME,
        lifetime="detached",
        get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        ),
    ).remote(asdict(settings))
    info = ray.get(host.wait_ready.remote(settings.warm_timeout_s))
    print(json.dumps(info), flush=True)
    if info["state"] != "ready":
        ray.kill(host)
        return 1
    return 0


def _wait_for_a_live_node(gcs_address: str) -> None:
    """Returns once the GCS lists a live node. A local unit starts this launcher with its head
    node, so that Ray's import here overlaps with the head's start: the GCS may not answer yet.
    And `ray.init` looks for the node it joins once a second until the node's raylet has
    registered: waiting here at a finer step saves up to a second of a cold start. Whatever
    goes wrong is left for `ray.init` to report."""
    from ray._raylet import GcsClient
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    deadline = time.monotonic() + NODE_WAIT_SECONDS
    while not _answers(gcs_address) and time.monotonic() < deadline:
        time.sleep(NODE_POLL_SECONDS)
    try:
        client = GcsClient(address=gcs_address)
        while time.monotonic() < deadline:
            if client.get_all_node_info(timeout=1, state_filter=GcsNodeInfo.GcsNodeState.ALIVE):
                return
            time.sleep(NODE_POLL_SECONDS)
    except Exception:  # noqa: BLE001 - ray.init says what is wrong, in Ray's words
        return


def _answers(gcs_address: str) -> bool:
    """Whether the GCS's port takes a connection; True for an address that is not `host:port`
    (Ray's own forms, such as `auto`: `ray.init` resolves those)."""
    host, _, port = gcs_address.rpartition(":")
    if not host or not port.isdigit():
        return True
    try:
        with socket.create_connection((host, int(port)), timeout=NODE_POLL_SECONDS):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
