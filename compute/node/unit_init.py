"""The first process in a local compute unit's sandbox: `python -m compute.node.unit_init <plan.json>`.

The portal runs each local compute unit in one bubblewrap sandbox, so that all its Ray
nodes share one network namespace (see app/ray_clusters/sandbox.py). This process starts,
inside it, the forwarders (socat bridges to the portal's side), then the head node together
with the `with_head` processes (the unit's Spark host launcher, which imports Ray while the head
starts, waits for its GCS, and ends once the host is ready), and once the head's GCS port
answers, the workers. An `on_request` process is started
(again) when the portal asks, by creating `<records_dir>/<role>.start`, and it is not running:
the Spark host's launcher, when the unit's host was not started with it or has ended. Being
the nodes' parent, it alone learns
how each ended: it keeps `<records_dir>/<role>.json` up to date with the node's pid (in
the sandbox's PID namespace), whether its ready port answers, and its exit status (as
`subprocess` gives it: negative for a signal). The portal reads those records. It ends
when every node has ended.

The plan (written by the portal before the sandbox starts):
    {"records_dir": str, "forwarders_log": str, "forwarders": [[argv...]],
     "nodes": [{"role": str, "argv": [...], "env": {...}, "dir": str, "log": str, "ready_port": int}],
     "with_head": [same shape as a node], "on_request": [same shape as a node]}
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from compute.contract import HOST_KEY_ENV


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Node:
    def __init__(self, spec: dict, records_dir: Path) -> None:
        self.spec = spec
        self.record_path = records_dir / f"{spec['role']}.json"
        self.process: subprocess.Popen | None = None
        self.ready = False

    def start(self) -> None:
        Path(self.spec["dir"]).mkdir(parents=True, exist_ok=True)
        with open(self.spec["log"], "ab") as log:
            self.process = subprocess.Popen(
                self.spec["argv"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.spec["env"]},
            )
        self.write_record()

    def check(self) -> bool:
        """Updates the record; True while the node runs."""
        assert self.process is not None
        if self.process.poll() is not None:
            self.write_record()
            return False
        if not self.ready and _port_open(self.spec["ready_port"]):
            self.ready = True
            self.write_record()
        return True

    def write_record(self) -> None:
        assert self.process is not None
        record = {
            "pid": self.process.pid,
            "ready": self.ready,
            "returncode": self.process.returncode,
        }
        partial = self.record_path.with_suffix(".part")
        partial.write_text(json.dumps(record))
        partial.replace(self.record_path)


def _with_requested_key(spec: dict, request: Path) -> dict:
    """The launcher's spec with the host key the portal's request names, if it names one (a
    pooled unit's host key changes at its claim; the plan holds the key of the unit's start)."""
    try:
        key = request.read_text()[:80].strip()
    except (OSError, UnicodeDecodeError):
        return spec
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        return spec
    return {**spec, "env": {**spec["env"], HOST_KEY_ENV: key}}


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[0]).read_text())
    records_dir = Path(plan["records_dir"])
    records_dir.mkdir(exist_ok=True)
    with open(plan["forwarders_log"], "ab") as log:
        forwarders = [
            subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
            for command in plan["forwarders"]
        ]
    head, *workers = [Node(spec, records_dir) for spec in plan["nodes"]]
    head.start()
    helpers = [Node(spec, records_dir) for spec in plan.get("with_head", [])]
    for helper in helpers:  # each waits for the head's GCS itself
        helper.start()
    while head.check() and not head.ready:
        time.sleep(0.1)
    running = [head]
    if head.ready:  # workers join through the head's GCS
        for node in workers:
            node.start()
        running += workers
    on_request = plan.get("on_request", []) if head.ready else []
    while running:  # the unit lives as long as its nodes; a helper ending ends nothing
        running = [node for node in running if node.check()]
        helpers = [helper for helper in helpers if helper.check()]
        for spec in on_request:
            request = records_dir / f"{spec['role']}.start"
            if request.exists() and all(helper.spec["role"] != spec["role"] for helper in helpers):
                helper = Node(_with_requested_key(spec, request), records_dir)
                helper.start()  # its record says it runs before the request goes
                helpers.append(helper)
                request.unlink(missing_ok=True)
        time.sleep(0.2)
    for helper in helpers:
        helper.process.terminate()
    for forwarder in forwarders:
        forwarder.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
