"""Run one node of a loopback-only Ray cluster: `python -m compute.ray_node <ray start args>`.

Ray 2.60 keeps every server of a node on 127.0.0.1 only when
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is set (with it unset, `--node-ip-address=127.0.0.1`
is rewritten to the machine's routable address and most ports listen on all interfaces).
The same switch makes `ray start --address=...` refuse to join a worker node to a head,
though. This entry point runs `ray start` in loopback mode and lifts only that refusal:
the CLI module sees a copy of Ray's constants in which multi-node clusters are allowed,
while address resolution (and every process the node spawns, through the environment)
keeps the loopback setting.
"""
from __future__ import annotations

import os
import sys
import types

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def main(argv: list[str]) -> None:
    os.environ.update(LOOPBACK_ENV)
    import ray._private.ray_constants as ray_constants
    import ray.scripts.scripts as ray_cli

    joinable = types.ModuleType(ray_constants.__name__)
    joinable.__dict__.update(vars(ray_constants))
    joinable.ENABLE_RAY_CLUSTER = True
    ray_cli.ray_constants = joinable
    sys.argv = ["ray", "start", *argv]
    ray_cli.main()


if __name__ == "__main__":
    main(sys.argv[1:])
