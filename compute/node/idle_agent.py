"""Stands in for Ray's dashboard agent and runtime-env agent on a unit without a dashboard:
`python -S idle_agent.py <the agent's own arguments>`.

The raylet starts both agents, waits for the ports they persist in the session directory, and
ends when one ends. On a unit nothing asks them anything: no dashboard reads the dashboard
agent, metrics are not exported, and no task or actor names a runtime environment. So this
persists what Ray's minimal dashboard agent persists (-1: not served) and the runtime-env
agent's port as it was assigned, then sleeps until the raylet ends: under 10 MiB each
instead of 124 and 81 MiB.
Standard library only, run without site-packages.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def _options(argv: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)


def _persist_port(session_dir: str, node_id: str, name: str, port: int) -> None:
    # As ray._raylet.persist_port writes it: the number alone, in <name>_<node id>, atomically.
    path = os.path.join(session_dir, f"{name}_{node_id}")
    with open(path + ".tmp", "w") as file:
        file.write(str(port))
    os.replace(path + ".tmp", path)


def _die_with_the_raylet() -> None:
    # Ray's agents watch the raylet and end with it; this one has the kernel do it.
    raylet = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != raylet:  # it ended before the request took effect
        sys.exit(1)


def main(argv: list[str]) -> None:
    _die_with_the_raylet()
    options = _options(argv)
    if "runtime-env-agent-port" in options:
        ports = {"runtime_env_agent_port": int(options["runtime-env-agent-port"])}
    else:
        ports = {
            "metrics_agent_port": -1,
            "metrics_export_port": -1,
            "dashboard_agent_listen_port": -1,
        }
    for name, port in ports.items():
        _persist_port(options["session-dir"], options["node-id"], name, port)
    while True:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
