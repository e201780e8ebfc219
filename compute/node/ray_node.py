"""Run one node of a loopback-only Ray cluster:
`python -m compute.node.ray_node [--block] [--without-agents] <ray start args>`.

Ray 2.60 keeps every server of a node on 127.0.0.1 only when
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is set (with it unset, `--node-ip-address=127.0.0.1`
is rewritten to the machine's routable address and most ports listen on all interfaces).
The same switch makes `ray start --address=...` refuse to join a worker node to a head,
though. This entry point runs `ray start` in loopback mode and lifts only that refusal:
the CLI module sees a copy of Ray's constants in which multi-node clusters are allowed,
while address resolution (and every process the node spawns, through the environment)
keeps the loopback setting.

It also leaves out what a unit does not use, each a Python process of its own:
- on a head node, Ray's dashboard starts only the modules a unit needs (`DASHBOARD_MODULES`),
  about 90 MiB each other module;
- with `--without-agents` (a unit without a dashboard) the raylet's two agents are
  `idle_agent.py` (under 10 MiB each instead of 124 and 81 MiB);
- with `--block`, once the node runs this process becomes `node_waiter.py`, which waits on
  the node's servers as `ray start --block` would, in under 10 MiB instead of 110.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from compute.third_party_patches import start_ray_node_lean

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
# When a unit runs the dashboard (LAKEPORT_RAY_DASHBOARD): StateHead, the State API, through
# which the portal lists nodes (/api/v0/*); ReportHead: /api/cluster_status and /api/gcs_healthz;
# JobHead: the Jobs API, which starts a unit's Spark host when it was not started with the
# cluster; NodeHead: it records the head node's id, without which the Jobs API finds no agent
# to run a job.
DASHBOARD_MODULES = ("StateHead", "ReportHead", "JobHead", "NodeHead")
HERE = os.path.dirname(os.path.abspath(__file__))
OWN_OPTIONS = ("--block", "--without-agents")


def main(argv: list[str]) -> None:
    os.environ.update(LOOPBACK_ENV)
    import ray.scripts.scripts as ray_cli

    block = "--block" in argv
    # Leave out what a unit does not use; a waiting node's servers die with it.
    start_ray_node_lean(
        dashboard_modules=DASHBOARD_MODULES,
        agent_command=_idle_agent if "--without-agents" in argv else None,
        spawn_reaper=block,
    )
    sys.argv = ["ray", "start", *[arg for arg in argv if arg not in OWN_OPTIONS]]
    try:
        ray_cli.main()
    except SystemExit as exit_:
        if exit_.code:
            raise
    if block:
        servers = _children()
        sys.stdout.flush()
        os.execv(
            sys.executable,
            [
                sys.executable,
                "-S",
                os.path.join(HERE, "node_waiter.py"),
                *(f"{name}={pid}" for name, pid in servers),
            ],
        )


def _idle_agent(arg: str) -> str:
    """The raylet's argument naming an agent's command, with `idle_agent.py` in place of the agent."""
    for option in ("--dashboard_agent_command=", "--runtime_env_agent_command="):
        if arg.startswith(option):
            agent_args = [part for part in shlex.split(arg[len(option) :]) if part.startswith("--")]
            return option + subprocess.list2cmdline(
                [sys.executable, "-S", os.path.join(HERE, "idle_agent.py"), *agent_args]
            )
    return arg


def _children() -> list[tuple[str, int]]:
    """(name, pid) of this process's children, the raylet first (Ray stops it before the others)."""
    children = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as listed:
            for pid in map(int, listed.read().split()):
                with open(f"/proc/{pid}/comm") as comm:
                    children.append((comm.read().strip(), pid))
    return sorted(children, key=lambda child: child[0] != "raylet")


if __name__ == "__main__":
    main(sys.argv[1:])
