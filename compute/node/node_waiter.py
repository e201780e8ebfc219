"""What a unit's Ray node runs once `ray start` has started it:
`python -S node_waiter.py <name>=<pid>...` (the raylet first).

`ray start --block` keeps a Python process with all of Ray imported (about 110 MiB) only to
wait on the node's servers. `compute.node.ray_node` execs into this waiter instead, which keeps
that contract in a bare interpreter (standard library only, under 10 MiB): while the servers
run, it runs; when one of them ends, it kills the others and exits 1; on SIGTERM it stops them
as Ray does, one after another in the order given, each with SIGTERM and then SIGKILL after a
second, and exits 1. The servers are its children (the exec kept the pid that started them),
so `wait` tells it when one ends; it logs that as `ray start --block` does ("  raylet [exit
code=-9]"), which the portal reads for the reason a node failed.
"""

import os
import signal
import sys
import time

GRACE_SECONDS = 1.0


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _reaped_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return True
        except ChildProcessError:
            return True
        time.sleep(0.02)
    return False


def stop(servers: list[int]) -> None:
    for pid in servers:
        _signal(pid, signal.SIGTERM)
        if not _reaped_within(pid, GRACE_SECONDS):
            _signal(pid, signal.SIGKILL)
            _reaped_within(pid, GRACE_SECONDS)


def main(argv: list[str]) -> int:
    names = {int(pid): name for name, pid in (arg.rsplit("=", 1) for arg in argv)}
    servers = list(names)

    def on_sigterm(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop(servers)
        sys.exit(1)

    signal.signal(signal.SIGTERM, on_sigterm)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        if pid in servers:
            print(
                f"Some Ray subprocesses exited unexpectedly:\n  {names[pid]} "
                f"[exit code={os.waitstatus_to_exitcode(status)}]",
                flush=True,
            )
            for other in servers:
                _signal(other, signal.SIGKILL)
            return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
