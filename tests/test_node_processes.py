"""The light processes a local unit's Ray node runs in place of Ray's own Python ones: the node's
waiter (for `ray start --block`) and the idle agents (for the dashboard and runtime-env agents
of a unit without a dashboard). Real processes; Ray itself is exercised by the unit tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray._raylet import persist_port

from app.ray_clusters.local_processes import RAY_EXIT_LINE
from compute.node import idle_agent, node_waiter

# Starts the given commands, prints their pids, then becomes the waiter: as compute.node.ray_node does.
LAUNCHER = """
import os, subprocess, sys
commands = [c.split('\\x1f') for c in sys.argv[2:]]
pids = [subprocess.Popen(c).pid for c in commands]
print(' '.join(map(str, pids)), flush=True)
os.execv(sys.executable, [sys.executable, '-S', sys.argv[1], *(f'{c[-2]}={pid}' for c, pid in zip(commands, pids))])
"""
# A server that notes the SIGTERM it gets in a file, then exits (or, told to, ignores it).
SERVER = """
import signal, sys, time
def on_term(*_):
    open(sys.argv[1], 'a').write(sys.argv[2] + ' ')
    if sys.argv[3] == 'exit':
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print('ready', flush=True)
while True:
    time.sleep(1)
"""


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def start_node(tmp_path: Path, *servers: tuple[str, str]) -> tuple[subprocess.Popen, list[int]]:
    notes = tmp_path / "sigterms"
    commands = [
        "\x1f".join([sys.executable, "-c", SERVER, str(notes), name, on_sigterm])
        for name, on_sigterm in servers
    ]
    node = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, node_waiter.__file__, *commands],
        stdout=subprocess.PIPE,
        text=True,
    )
    pids = [int(pid) for pid in node.stdout.readline().split()]
    # The waiter runs once it catches SIGTERM, and so does each server.
    assert wait_until(
        lambda: (
            node_waiter.__file__ in Path(f"/proc/{node.pid}/cmdline").read_text()
            and all(catches_sigterm(pid) for pid in [node.pid, *pids])
        )
    )
    return node, pids


def catches_sigterm(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(
        next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16
    )
    return bool(caught & 1 << (signal.SIGTERM - 1))


def test_when_a_server_of_the_node_ends_the_waiter_kills_the_others_and_fails(tmp_path):
    node, (raylet, gcs) = start_node(tmp_path, ("raylet", "exit"), ("gcs", "exit"))
    os.kill(gcs, signal.SIGKILL)
    assert node.wait(timeout=10) == 1
    assert wait_until(lambda: not alive(raylet))
    # As `ray start --block` reports it, which the portal reads for the reason (local_processes).
    assert RAY_EXIT_LINE.match(node.stdout.read().splitlines()[-1]).groups() == ("gcs", "-9")


def test_sigterm_stops_the_servers_in_order_and_kills_one_that_ignores_it(tmp_path):
    node, (raylet, stubborn, gcs) = start_node(
        tmp_path, ("raylet", "exit"), ("stubborn", "ignore"), ("gcs", "exit")
    )
    node.send_signal(signal.SIGTERM)
    assert node.wait(timeout=15) == 1  # the stubborn one was killed, not waited for
    assert (tmp_path / "sigterms").read_text().split() == ["raylet", "stubborn", "gcs"]
    assert not any(alive(pid) for pid in (raylet, stubborn, gcs))


def test_the_waiter_is_a_bare_interpreter(tmp_path):
    node, pids = start_node(tmp_path, ("raylet", "exit"))
    modules = Path(f"/proc/{node.pid}/maps").read_text()
    assert "site-packages" not in modules  # no Ray, nothing of the venv's packages
    node.send_signal(signal.SIGTERM)
    assert node.wait(timeout=10) == 1
    assert wait_until(lambda: not any(alive(pid) for pid in pids))


def agent_args(session_dir: Path, node_id: str, **extra: str) -> list[str]:
    return [
        f"--node-id={node_id}",
        "--node-ip-address=127.0.0.1",
        f"--session-dir={session_dir}",
        *(f"--{name.replace('_', '-')}={value}" for name, value in extra.items()),
    ]


@pytest.mark.parametrize("kind", ["dashboard", "runtime_env"])
def test_an_idle_agent_persists_its_ports_as_ray_does_and_dies_with_the_raylet(tmp_path, kind):
    node_id = "ab" * 28
    session, expected = tmp_path / "session", tmp_path / "expected"
    session.mkdir(), expected.mkdir()
    if kind == "dashboard":
        args = agent_args(session, node_id, metrics_export_port=1, grpc_port=2, listen_port=3)
        for name in ("metrics_agent_port", "metrics_export_port", "dashboard_agent_listen_port"):
            persist_port(str(expected), node_id, name, -1)  # what Ray's minimal agent writes
    else:
        args = agent_args(session, node_id, runtime_env_agent_port=45678)
        persist_port(str(expected), node_id, "runtime_env_agent_port", 45678)
    # A stand-in raylet: the agent's parent, which the test then kills.
    raylet = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            f"print(subprocess.Popen([sys.executable, '-S', {idle_agent.__file__!r}, *sys.argv[1:]]).pid, flush=True)\n"
            "time.sleep(60)",
            *args,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    agent = int(raylet.stdout.readline())
    want = {path.name: path.read_text() for path in expected.iterdir()}
    assert wait_until(
        lambda: (
            {
                path.name: path.read_text()
                for path in session.iterdir()
                if not path.name.endswith(".tmp")
            }
            == want
        )
    )
    assert alive(agent)
    raylet.kill()
    raylet.wait()
    assert wait_until(lambda: not alive(agent))
