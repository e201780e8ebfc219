"""Run one node of a loopback-only Ray cluster: `python -m compute.ray_node <ray start args>`.

Ray 2.60 keeps every server of a node on 127.0.0.1 only when
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is set (with it unset, `--node-ip-address=127.0.0.1`
is rewritten to the machine's routable address and most ports listen on all interfaces).
The same switch makes `ray start --address=...` refuse to join a worker node to a head,
though. This entry point runs `ray start` in loopback mode and lifts only that refusal:
the CLI module sees a copy of Ray's constants in which multi-node clusters are allowed,
while address resolution (and every process the node spawns, through the environment)
keeps the loopback setting.

On a head node, Ray's dashboard starts only the modules a unit needs (`DASHBOARD_MODULES`):
each other module is a process of its own, about 90 MiB, that nothing here uses.
"""
from __future__ import annotations

import os
import sys
import types

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
# When a unit runs the dashboard (LAKEPORT_RAY_DASHBOARD): StateHead, the State API, through
# which the portal lists nodes (/api/v0/*); ReportHead: /api/cluster_status and /api/gcs_healthz;
# JobHead: the Jobs API, which starts a unit's Spark host when it was not started with the
# cluster; NodeHead: it records the head node's id, without which the Jobs API finds no agent
# to run a job.
DASHBOARD_MODULES = ("StateHead", "ReportHead", "JobHead", "NodeHead")


def main(argv: list[str]) -> None:
    os.environ.update(LOOPBACK_ENV)
    import ray._private.node as ray_node
    import ray._private.ray_constants as ray_constants
    import ray._private.services as ray_services
    import ray.scripts.scripts as ray_cli

    # `ray start` has no option for the dashboard's modules; its dashboard process has one.
    start_ray_process = ray_services.start_ray_process

    def start_with_fewer_dashboard_modules(command, process_type, *args, **kwargs):
        # With `--include-dashboard=false` Ray names its own (one module, no subprocesses).
        if process_type == ray_constants.PROCESS_TYPE_DASHBOARD and not any(
                arg.startswith("--modules-to-load=") for arg in command):
            command = [*command, f"--modules-to-load={','.join(DASHBOARD_MODULES)}"]
        return start_ray_process(command, process_type, *args, **kwargs)

    ray_services.start_ray_process = start_with_fewer_dashboard_modules
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
        return start_api_server(node, include_dashboard=include_dashboard, raise_on_failure=raise_on_failure)

    ray_node.Node.start_api_server = start_api_server_for_the_dashboard

    joinable = types.ModuleType(ray_constants.__name__)
    joinable.__dict__.update(vars(ray_constants))
    joinable.ENABLE_RAY_CLUSTER = True
    ray_cli.ray_constants = joinable
    sys.argv = ["ray", "start", *argv]
    ray_cli.main()


if __name__ == "__main__":
    main(sys.argv[1:])
