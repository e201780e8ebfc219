"""The bubblewrap sandbox a local compute unit runs in: what its processes see and reach.

Users' PySpark steps run inside a unit's Ray nodes, so the nodes must not see the portal.
Each unit gets ONE bubblewrap sandbox (all its nodes share one network namespace, which
separate sandboxes cannot) with:

- its own PID, network, IPC, UTS and cgroup namespaces: only its own processes in /proc,
  only a loopback interface (nothing of the machine's network, PostgreSQL included);
- a mount view of system dirs, the interpreter, the venv, the jars and the `compute/`
  package read-only, and the unit's own directory writable; not the checkout, the stack's
  var dir, the database file or other units' directories;
- when the portal runs as root, a uid/gid of its own (from `UNIT_UID_RANGE`) and no
  capabilities (setpriv inside bwrap); otherwise the portal's uid in a user namespace;
- an environment the caller builds from an allow-list (bwrap passes on what it is given).

The portal talks to the unit through socat bridges over Unix sockets in the unit's
directory: *ingress* (outside `TCP-LISTEN` on a reserved loopback port -> inside the unit's
Ray dashboard or Spark host port) and *egress* (inside `TCP-LISTEN` -> outside `TCP` to an
allowed endpoint: the catalog and the operator's `LAKEPORT_CU_ALLOWED_ENDPOINTS`). A
loopback endpoint keeps its address inside; a host name is mapped to a loopback alias in
the sandbox's own /etc/hosts. Nothing else is reachable.
"""

from __future__ import annotations

import fcntl
import functools
import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

UNIT_UID_RANGE = range(200001, 265536)
# Loopback aliases for allowed endpoints named by host name (the rest of 127/8 stays free).
_ALIAS_NETWORK = "127.0.100."
# No --die-with-parent: a unit outlives the portal process (a restarted portal adopts it), and
# the parent's death signal would even fire when the portal *thread* that started it ends.
_NAMESPACES = [
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup",
    "--new-session",
]
# The sandbox's own host name, which its /etc/hosts resolves to loopback (Spark looks itself up).
UNIT_HOSTNAME = "lakeport-unit"
_DROP_PRIVILEGES = ["--clear-groups", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]
# What a bridge's relays move per read and write. socat's default, 8 KiB, cost two system calls
# per 8 KiB in each of a bridge's two relays, on the cores the unit computes on: 400 MB took
# 1.1 s through a bridge, against 0.11 s straight and 0.33 s in 128 KiB blocks (bench/RESULTS.md).
BRIDGE_BLOCK_BYTES = 128 * 1024
_SOCAT = ["socat", "-b", str(BRIDGE_BLOCK_BYTES)]


class SandboxUnavailable(RuntimeError):
    """This machine cannot sandbox a compute unit; the message says what is missing."""


@dataclass(frozen=True)
class Endpoint:
    """A `host:port` a unit may connect to."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> "Endpoint":
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"not a host:port endpoint: {text!r}")
        return cls(host.strip("[]"), int(port))

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """The host as an IP address; None for a host name."""
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None

    @property
    def is_loopback(self) -> bool:
        return self.host == "localhost" or (self.ip is not None and self.ip.is_loopback)


@dataclass(frozen=True)
class EgressRoute:
    """One allowed endpoint and where it is reached inside the sandbox."""

    endpoint: Endpoint
    inside_address: str
    socket: Path


def egress_routes(endpoints: list[Endpoint], socket_dir: Path) -> list[EgressRoute]:
    routes: list[EgressRoute] = []
    aliases: dict[str, str] = {}
    for index, endpoint in enumerate(dict.fromkeys(endpoints)):
        if endpoint.is_loopback:
            inside = "127.0.0.1" if endpoint.host == "localhost" else endpoint.host
        elif endpoint.ip is not None:
            # The sandbox has only `lo`: an outside IP address cannot be given to it.
            raise ValueError(
                f"allowed endpoint {endpoint.host}:{endpoint.port}: name it by host name "
                "(an IP address outside loopback cannot be mapped into a compute unit's sandbox)"
            )
        else:
            inside = aliases.setdefault(endpoint.host, f"{_ALIAS_NETWORK}{len(aliases) + 1}")
        routes.append(EgressRoute(endpoint, inside, socket_dir / f"egress-{index}"))
    return routes


def hosts_file_text(routes: list[EgressRoute]) -> str:
    lines = [f"127.0.0.1 localhost {UNIT_HOSTNAME}", "::1 localhost"]
    lines += sorted(
        {
            f"{route.inside_address} {route.endpoint.host}"
            for route in routes
            if not route.endpoint.is_loopback
        }
    )
    return "\n".join(lines) + "\n"


def egress_forwarders(route: EgressRoute) -> tuple[list[str], list[str]]:
    """(outside, inside) socat commands of one egress route."""
    outside = [
        *_SOCAT,
        f"UNIX-LISTEN:{route.socket},fork,unlink-early,perm=0600",
        f"TCP:{route.endpoint.host}:{route.endpoint.port},nodelay",
    ]
    inside = [
        *_SOCAT,
        f"TCP-LISTEN:{route.endpoint.port},bind={route.inside_address},fork,reuseaddr,nodelay",
        f"UNIX-CONNECT:{route.socket}",
    ]
    return outside, inside


def ingress_forwarders(port: int, socket: Path) -> tuple[list[str], list[str]]:
    """(outside, inside) socat commands that make the unit's loopback `port` the portal's too."""
    outside = [
        *_SOCAT,
        f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr,nodelay",
        f"UNIX-CONNECT:{socket}",
    ]
    inside = [
        *_SOCAT,
        f"UNIX-LISTEN:{socket},fork,unlink-early,perm=0600",
        f"TCP:127.0.0.1:{port},nodelay",
    ]
    return outside, inside


def runs_as_root() -> bool:
    return os.geteuid() == 0


def as_unit_user(uid: int | None, command: list[str]) -> list[str]:
    """`command` run as the unit's uid without any capability (as root); unchanged otherwise."""
    if uid is None:
        return command
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", *_DROP_PRIVILEGES, "--", *command]


def account_files(uid: int, home: Path) -> dict[str, str]:
    """/etc/passwd and /etc/group with the unit's uid named (Hadoop's login refuses a nameless uid)."""
    passwd = (
        Path("/etc/passwd").read_text()
        + f"{UNIT_HOSTNAME}:x:{uid}:{uid}::{home}:/usr/sbin/nologin\n"
    )
    group = Path("/etc/group").read_text() + f"{UNIT_HOSTNAME}:x:{uid}:\n"
    return {"/etc/passwd": passwd, "/etc/group": group}


def bwrap_argv(
    *,
    unit_dir: Path,
    uid: int | None,
    read_only: list[Path],
    etc_files: dict[str, Path],
    command: list[str],
) -> list[str]:
    """The bwrap command line that runs `command` in the unit's sandbox.

    `read_only` must be real paths (no symlinks): a bind follows none. Every parent dir of a
    bind target is made 0755 first, else bwrap makes it 0700 root and the unit's uid could
    not traverse it."""
    argv = ["bwrap", *_NAMESPACES, "--hostname", UNIT_HOSTNAME]
    if uid is None:
        argv.append("--unshare-user")
    else:
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        path = Path("/", name)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    argv += ["--ro-bind", "/etc", "/etc"]
    for target, source in etc_files.items():  # generated files in place of the machine's
        argv += ["--ro-bind", str(source), target]
    argv += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--tmpfs",
        "/dev/shm",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
    ]
    # Binds under /tmp land on the tmpfs: their parents are made like any other.
    visible = [Path("/usr"), Path("/etc")]
    made = {Path(p) for p in ("/", "/proc", "/dev", "/tmp")}

    def bind(option: str, path: Path) -> None:
        if any(path == seen or seen in path.parents for seen in visible):
            return  # already visible through a bind above
        for parent in reversed(path.parents):
            if parent not in made and not any(
                parent == seen or seen in parent.parents for seen in visible
            ):
                argv.extend(["--perms", "0755", "--dir", str(parent)])
                made.add(parent)
        argv.extend([option, str(path), str(path)])
        visible.append(path)

    for path in read_only:
        bind("--ro-bind", path)
    bind("--bind", unit_dir)
    argv += ["--chdir", str(unit_dir), "--"]
    return argv + as_unit_user(uid, command)


@functools.cache
def sandbox_problem() -> str | None:
    """Why this machine cannot sandbox compute units, or None when it can (probed once)."""
    needed = ["bwrap", "socat"] + (["setpriv"] if runs_as_root() else [])
    missing = [tool for tool in needed if shutil.which(tool) is None]
    if missing:
        return (
            f"local compute units run in a sandbox, and {', '.join(missing)} is not installed "
            "(Debian packages: bubblewrap, socat, util-linux)"
        )
    probe_dir = Path(os.environ.get("TMPDIR", "/tmp"))
    argv = bwrap_argv(
        unit_dir=probe_dir.resolve(),
        uid=UNIT_UID_RANGE[0] if runs_as_root() else None,
        read_only=[],
        etc_files={},
        command=["true"],
    )
    try:
        done = subprocess.run(
            argv,
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"local compute units run in a sandbox, and bwrap could not run: {error}"
    if done.returncode != 0:
        return (
            "local compute units run in a sandbox, and bwrap could not create one here (namespaces "
            f"refused?): {(done.stderr or done.stdout).strip() or f'exit code {done.returncode}'}"
        )
    return None


def require_sandbox() -> None:
    if (problem := sandbox_problem()) is not None:
        raise SandboxUnavailable(problem)


def make_unit_dir(base_dir: Path) -> tuple[Path, int | None]:
    """A fresh unit dir, owned by a uid no other unit dir has (as root), else by the portal's."""
    base_dir.mkdir(parents=True, exist_ok=True)
    if base_dir.stat().st_uid != os.geteuid():
        raise SandboxUnavailable(f"{base_dir} belongs to another user; compute units cannot use it")
    base_dir.chmod(0o711)  # a unit can reach its own dir but not list the others
    # A lock file, so two portal processes never hand out the same uid.
    with open(base_dir / ".uids.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        unit_dir = base_dir / secrets.token_hex(4)
        unit_dir.mkdir(mode=0o700)
        if not runs_as_root():
            return unit_dir, None
        used = {entry.stat().st_uid for entry in base_dir.iterdir() if entry.is_dir()}
        uid = next((uid for uid in UNIT_UID_RANGE if uid not in used), None)
        if uid is None:
            unit_dir.rmdir()
            raise SandboxUnavailable(f"all {len(UNIT_UID_RANGE)} compute-unit uids are in use")
        os.chown(unit_dir, uid, uid)
        return unit_dir, uid


def runtime_paths() -> list[Path]:
    """What the unit's Python needs read-only: the base interpreter and the venv, as real paths."""
    return [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]


def sandbox_python() -> str:
    """The venv's interpreter by its real path (a symlinked venv is not there inside)."""
    return str(Path(sys.prefix).resolve() / "bin" / "python")
