"""`python -m devstack`: run Lakeport on its local stack until Ctrl-C (this is `make run`)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from app.config import PROJECT_ROOT
from devstack.process import ServiceStartError
from devstack.stack import LocalStack, StackPorts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack", description=__doc__)
    parser.add_argument(
        "--port-base",
        type=int,
        default=5000,
        help="first of the consecutive loopback ports the stack uses (default 5000: portal)",
    )
    parser.add_argument("--free-ports", action="store_true", help="pick any free ports instead")
    parser.add_argument(
        "--var-dir",
        default=str(PROJECT_ROOT / "var" / "devstack"),
        help="where the stack keeps data and logs",
    )
    parser.add_argument(
        "--pool",
        type=int,
        default=1,
        metavar="N",
        help="local units the worker keeps warm for new units of 2 CPUs and 4 GiB (default 1; "
        "0: every unit starts cold)",
    )
    args = parser.parse_args(argv)

    ports = StackPorts.free() if args.free_ports else StackPorts.from_base(args.port_base)
    stack = LocalStack(
        args.var_dir, ports, portal_settings={"LAKEPORT_CU_POOL_SIZE": str(max(0, args.pool))}
    )
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    try:
        stack.start()
    except ServiceStartError as error:
        print(f"\nthe local stack could not start: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        stack.stop()
        return 130
    print(stack.banner(), flush=True)
    try:
        while not stopping.wait(1.0):
            for process in stack.processes:
                if not process.running:
                    print(
                        f"{process.name} stopped unexpectedly:\n{process.log_tail()}",
                        file=sys.stderr,
                    )
                    stopping.set()
    finally:
        print("stopping the local stack…", flush=True)
        stack.stop()
        print("stopped.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
