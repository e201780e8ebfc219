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
# StateHead: the State API, through which RayDP finds its actors and the portal lists nodes
# (/api/v0/*); ReportHead: /api/cluster_status and /api/gcs_healthz; JobHead: the Jobs API,
# which starts a unit's Spark host when it was not started with the cluster; NodeHead: it
# records the head node's id, without which the Jobs API finds no agent to run a job.
DASHBOARD_MODULES = ("StateHead", "ReportHead", "JobHead", "NodeHead")


def main(argv: list[str]) -> None:
    os.environ.update(LOOPBACK_ENV)
    import ray._private.ray_constants as ray_constants
    import ray._private.services as ray_services
    import ray.scripts.scripts as ray_cli

    # `ray start` has no option for the dashboard's modules; its dashboard process has one.
    start_ray_process = ray_services.start_ray_process

    def start_with_fewer_dashboard_modules(command, process_type, *args, **kwargs):
        if process_type == ray_constants.PROCESS_TYPE_DASHBOARD:
            command = [*command, f"--modules-to-load={','.join(DASHBOARD_MODULES)}"]
        return start_ray_process(command, process_type, *args, **kwargs)

    ray_services.start_ray_process = start_with_fewer_dashboard_modules

    joinable = types.ModuleType(ray_constants.__name__)
    joinable.__dict__.update(vars(ray_constants))
    joinable.ENABLE_RAY_CLUSTER = True
    ray_cli.ray_constants = joinable
    sys.argv = ["ray", "start", *argv]
    ray_cli.main()


if __name__ == "__main__":
    main(sys.argv[1:])
