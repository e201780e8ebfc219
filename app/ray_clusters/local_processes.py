"""A local compute unit's processes, as the portal sees them from outside its sandbox.

Pids with their kernel start times (a reused pid is never mistaken for a node), the sandbox's
PID namespace, what the unit's init records of each node (`compute/node/unit_init.py`, read as
hostile input through `UnitDir`) and how a node ended, in words. `children` holds the outside
processes (bwrap, the bridges) this portal process started, to reap them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from app.ray_clusters.base import ClusterHandle
from app.ray_clusters.unit_files import UnitDir
from app.untrusted import clean_lines, clean_text

# What the portal reads of a unit's files at most: a node record, a log's tail.
RECORD_MAX_BYTES = 4096
LOG_TAIL_BYTES = 64 * 1024
# Outside processes (bwrap, socat bridges) this portal process started, by pid, to reap them.
children: dict[int, subprocess.Popen] = {}


def all_pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (field 3 onwards)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    fields = proc_stat(pid)
    return int(fields[19]) if fields else None


def is_same_live_process(pid: int, start_time: int | None) -> bool:
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z" and int(fields[19]) == start_time


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def sandbox_namespace(handle: ClusterHandle) -> str | None:
    """The unit's PID namespace while its first process lives (when it ends, so does every
    process in it; a namespace id can be reused afterwards)."""
    box = handle.details.get("sandbox", {})
    if "pid_namespace" in box and is_same_live_process(box["init_pid"], box["init_start_time"]):
        return box["pid_namespace"]
    return None


def sandbox_running(handle: ClusterHandle) -> bool:
    return sandbox_namespace(handle) is not None


def unit_dir(handle: ClusterHandle) -> UnitDir:
    return UnitDir(handle.details["cluster_dir"])


def node_record(handle: ClusterHandle, node: dict) -> dict | None:
    """What the unit's init reports of a node (`compute/node/unit_init.py`). The file is in the unit's
    writable dir, so it is read as hostile input, checked for shape and never trusted over a
    live process."""
    try:
        record = json.loads(
            unit_dir(handle).read_head(f"nodes/{node['role']}.json", RECORD_MAX_BYTES)
        )
    except (OSError, ValueError):
        return None
    if not (
        isinstance(record, dict)
        and isinstance(record.get("pid"), int)
        and isinstance(record.get("returncode"), (int, type(None)))
    ):
        return None
    return record


def learn_pid(handle: ClusterHandle, node: dict) -> None:
    """The host's pid of a node, from its pid inside the sandbox (NSpid in /proc/<pid>/status)."""
    namespace = sandbox_namespace(handle)
    if "pid" in node or namespace is None or (record := node_record(handle, node)) is None:
        return
    for pid in all_pids():
        if pid_namespace(pid) != namespace:
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        nspids = next(
            (line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), []
        )
        if nspids and int(nspids[-1]) == record["pid"]:
            node.update(pid=pid, start_time=start_time(pid))
            return


def death_reason(handle: ClusterHandle, node: dict) -> str | None:
    """None while the node's process runs; otherwise how it ended, as precisely as knowable."""
    if "pid" in node and is_same_live_process(node["pid"], node.get("start_time")):
        return None
    record = node_record(handle, node)
    if record is not None and record["returncode"] is not None:
        how = describe_returncode(record["returncode"])
    elif sandbox_running(handle):
        return None  # not started yet, or ended a moment ago: the init records it
    elif "pid" not in node:
        return "was never started (the unit's sandbox ended)"
    else:
        how = "is gone (exit status unknown: the unit's sandbox ended)"
    who = f"process (pid {node['pid']})" if "pid" in node else "process"
    reported = ray_exit_report(handle, node)
    return f"{who} {how}" + (f"; Ray reported: {reported}" if reported else "")


def describe_returncode(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with code {returncode}"


# How Ray (and compute/node/node_waiter.py) logs a node's server that ended: "  raylet [exit code=-9]".
RAY_EXIT_LINE = re.compile(r"^\s+(\S+) \[exit code=(-?\d+)\]\s*$")


def ray_exit_report(handle: ClusterHandle, node: dict) -> str:
    """`ray start --block` names the subprocess that died first, e.g. "raylet [exit code=-9]"."""
    try:
        text = (
            unit_dir(handle)
            .read_tail(Path(node["log"]).name, LOG_TAIL_BYTES)
            .decode(errors="replace")
        )
    except OSError:
        return ""
    reported = ", ".join(line.strip() for line in text.splitlines() if RAY_EXIT_LINE.match(line))
    return clean_text(reported, 500, one_line=True)


def unit_log_tail(handle: ClusterHandle, name: str, *, lines: int = 10, limit: int = 2000) -> str:
    """The last lines of a log in the unit's dir, read as hostile input and cleaned for a reason."""
    try:
        text = unit_dir(handle).read_tail(name, LOG_TAIL_BYTES).decode(errors="replace")
    except OSError:
        return ""
    return clean_lines(text, lines=lines, limit=limit)


def log_tail(handle: ClusterHandle, name: str, lines: int = 10) -> str:
    """The last lines of a log the portal's own processes (bwrap, the bridges) write."""
    try:
        text = (
            UnitDir(handle.details["portal_dir"])
            .read_tail(name, LOG_TAIL_BYTES)
            .decode(errors="replace")
        )
    except (KeyError, OSError):
        return "(no log)"
    return clean_lines(text, lines=lines, limit=2000) or "(empty log)"


def outside_sessions(handle: ClusterHandle) -> set[int]:
    """Each outside process (bwrap, a bridge) leads its own session. A session whose leader
    pid now belongs to another process's session is not ours."""
    sessions = set()
    for process in handle.details.get("processes", []):
        fields = proc_stat(process["pid"])
        if (
            fields is None
            or int(fields[19]) == process["start_time"]
            or int(fields[3]) != process["pid"]
        ):
            sessions.add(process["pid"])
    return sessions


def cluster_pids(handle: ClusterHandle, *, sandbox_only: bool = False) -> list[int]:
    """Live processes of a local cluster: everything in its sandbox, and (unless
    `sandbox_only`) the outside processes and what they started."""
    sessions = set() if sandbox_only else outside_sessions(handle)
    namespace = sandbox_namespace(handle)
    box_pid = handle.details.get("sandbox", {}).get("pid")
    pids = []
    for pid in all_pids():
        fields = proc_stat(pid)
        if fields is None or fields[0] == "Z":
            continue
        if (
            int(fields[3]) in sessions
            or (sandbox_only and pid == box_pid and int(fields[3]) == pid)
            or (namespace is not None and pid_namespace(pid) == namespace)
        ):
            pids.append(pid)
    return pids


def kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def wait_gone(handle: ClusterHandle, timeout: float, *, sandbox_only: bool = False) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        for process in handle.details.get("processes", []):
            if (child := children.get(process["pid"])) is not None:
                child.poll()  # reap it, or it lingers as a zombie
        if not cluster_pids(handle, sandbox_only=sandbox_only):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
