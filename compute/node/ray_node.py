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
import types

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
    _leave_out_what_a_unit_does_not_use(without_agents="--without-agents" in argv, waiting=block)
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


def _leave_out_what_a_unit_does_not_use(*, without_agents: bool, waiting: bool) -> None:
    import ray._private.node as ray_node
    import ray._private.ray_constants as ray_constants
    import ray._private.services as ray_services
    import ray.scripts.scripts as ray_cli

    start_ray_process = ray_services.start_ray_process

    def start_process(command, process_type, *args, **kwargs):
        # `ray start` has no option for the dashboard's modules; its dashboard process has one.
        # With `--include-dashboard=false` Ray names its own (one module, no subprocesses).
        if process_type == ray_constants.PROCESS_TYPE_DASHBOARD and not any(
            arg.startswith("--modules-to-load=") for arg in command
        ):
            command = [*command, f"--modules-to-load={','.join(DASHBOARD_MODULES)}"]
        # Nothing asks the agents of a unit without a dashboard anything, and no runtime
        # environment is built (no task or actor names one); yet the raylet will not start
        # without both agent commands, and ends when an agent ends.
        if without_agents and process_type == ray_constants.PROCESS_TYPE_RAYLET:
            command = [_idle_agent(arg) for arg in command]
        return start_ray_process(command, process_type, *args, **kwargs)

    ray_services.start_ray_process = start_process
    # Nothing speaks Ray Client to a unit (the portal talks HTTP to its Spark host), and `ray
    # start` cannot go without its server (a port of 0 is refused): it is never started.
    ray_node.Node.start_ray_client_server = lambda _node: None
    # Without the dashboard Ray still starts its API server, for usage stats alone (which units
    # do not send): about 115 MiB that nothing reads.
    start_api_server = ray_node.Node.start_api_server

    def start_api_server_for_the_dashboard(node, *, include_dashboard, raise_on_failure):
        if include_dashboard is False:
            node._webui_url = None
            return None
        return start_api_server(
            node, include_dashboard=include_dashboard, raise_on_failure=raise_on_failure
        )

    ray_node.Node.start_api_server = start_api_server_for_the_dashboard
    if waiting:
        # The servers die with this process (the kernel's parent-death signal, which `ray start
        # --block` asks for too, and which survives the exec into the waiter): a node killed
        # leaves nothing behind.
        node_init = ray_node.Node.__init__
        ray_node.Node.__init__ = lambda node, *args, **kwargs: node_init(
            node, *args, **{**kwargs, "spawn_reaper": True}
        )

    joinable = types.ModuleType(ray_constants.__name__)
    joinable.__dict__.update(vars(ray_constants))
    joinable.ENABLE_RAY_CLUSTER = True
    ray_cli.ray_constants = joinable


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
