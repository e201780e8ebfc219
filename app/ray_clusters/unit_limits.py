"""Kernel limits for a local compute unit: a control group for its memory, CPU and tasks.

Ray's CPU and memory figures are bookkeeping: a step can use more than its unit was given
and starve the portal, PostgreSQL and other units. So each local unit runs in a control group
of its own, made before its first process starts (every process of the unit, its sandbox and
its bridges, is started through `join_argv`):

- memory: a hard limit of what the unit asked (swap included, where the kernel accounts it);
  over it, the kernel's OOM killer ends a process of this unit, never one outside it;
- CPU: a CFS quota of the unit's CPUs per period;
- tasks: at most `tasks` processes and threads (a fork bomb stops there).

Both cgroup versions: v1 (one hierarchy per controller, as on these machines) and v2 (one
unified hierarchy, as on most production hosts; the portal needs a delegated subtree there,
`LAKEPORT_CU_CGROUP_PARENT`). `usage()` reads what the unit uses and how often it hit a limit,
so a run that ends over a limit can say which one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")
CFS_PERIOD_US = 100_000
_CONTROLLERS = ("memory", "cpu", "pids")


class LimitsUnavailable(RuntimeError):
    """This machine cannot bound a unit's resources; the message says what is missing."""


@dataclass(frozen=True)
class UnitLimits:
    memory_bytes: int
    cpus: float
    tasks: int
    disk_bytes: int


@dataclass(frozen=True)
class LimitUsage:
    """What a unit uses against its limits, and how often the kernel enforced them."""

    memory_bytes: int = 0
    memory_peak_bytes: int = 0
    cpu_seconds: float = 0.0
    cpu_throttled_seconds: float = 0.0
    tasks: int = 0
    oom_kills: int = 0
    tasks_refused: int = 0


@dataclass(frozen=True)
class LimitsReport:
    """A unit's limits and what it uses against them, for its page."""

    limits: UnitLimits
    usage: LimitUsage
    disk_used_bytes: int | None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _keyed(text: str) -> dict[str, int]:
    """A flat-keyed cgroup file ("key value" lines) as a dict."""
    pairs = (line.split() for line in text.splitlines())
    return {fields[0]: _int(fields[1]) for fields in pairs if len(fields) == 2}


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as error:
        raise LimitsUnavailable(f"could not set {path}: {error.strerror or error}") from None


def _mkdir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise LimitsUnavailable(
            f"could not make the control group {path}: {error.strerror}"
        ) from None


class ControlGroup:
    """One unit's control group (either version): made by `create`, removed by `remove`."""

    version: int

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def procs_files(self) -> list[Path]:
        raise NotImplementedError

    def create(self, limits: UnitLimits) -> None:
        raise NotImplementedError

    def usage(self) -> LimitUsage:
        raise NotImplementedError

    @property
    def dirs(self) -> list[Path]:
        return [path.parent for path in self.procs_files]

    def join_argv(self, command: list[str]) -> list[str]:
        """`command`, started inside this group: a shell joins it, then execs the command (so
        the command's first instruction already runs under the limits)."""
        script = (
            'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
        )
        return [
            "/bin/sh",
            "-c",
            script,
            "lakeport-join",
            *map(str, self.procs_files),
            "--",
            *command,
        ]

    def pids(self) -> list[int]:
        return sorted({_int(line) for path in self.procs_files for line in _read(path).split()})

    def remove(self, timeout_s: float = 5.0) -> None:
        """Remove the group once its processes are gone (the caller kills them first)."""
        deadline = time.monotonic() + timeout_s
        for directory in self.dirs:
            while directory.exists():
                try:
                    directory.rmdir()
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)


class CgroupV1(ControlGroup):
    """cgroup v1: a group of the same name under each controller's hierarchy."""

    version = 1

    def __init__(self, name: str, mount: Path = CGROUP_MOUNT, parent: str = "lakeport") -> None:
        super().__init__(name)
        self.paths = {controller: mount / controller / parent / name for controller in _CONTROLLERS}
        # CPU time used is cpuacct's: a hierarchy of its own on some machines, cpu's on others.
        if (mount / "cpuacct" / "cgroup.procs").exists() and not (
            mount / "cpu" / "cpuacct.usage"
        ).exists():
            self.paths["cpuacct"] = mount / "cpuacct" / parent / name

    @property
    def procs_files(self) -> list[Path]:
        return [path / "cgroup.procs" for path in self.paths.values()]

    def create(self, limits: UnitLimits) -> None:
        for path in self.paths.values():
            _mkdir(path)
        memory, cpu, pids = self.paths["memory"], self.paths["cpu"], self.paths["pids"]
        _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
        if (memory / "memory.memsw.limit_in_bytes").exists():  # swap accounting on: swap counts too
            _write(memory / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        _write(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(int(limits.cpus * CFS_PERIOD_US)))
        _write(pids / "pids.max", str(limits.tasks))

    def usage(self) -> LimitUsage:
        memory, cpu, pids = self.paths["memory"], self.paths["cpu"], self.paths["pids"]
        usage_ns = _read(self.paths.get("cpuacct", cpu) / "cpuacct.usage")
        return LimitUsage(
            memory_bytes=_int(_read(memory / "memory.usage_in_bytes")),
            memory_peak_bytes=_int(_read(memory / "memory.max_usage_in_bytes")),
            cpu_seconds=_int(usage_ns) / 1e9,
            cpu_throttled_seconds=_keyed(_read(cpu / "cpu.stat")).get("throttled_time", 0) / 1e9,
            tasks=_int(_read(pids / "pids.current")),
            oom_kills=_keyed(_read(memory / "memory.oom_control")).get("oom_kill", 0),
            tasks_refused=_keyed(_read(pids / "pids.events")).get("max", 0),
        )


class CgroupV2(ControlGroup):
    """cgroup v2: one group in the unified hierarchy, under a parent the portal may manage."""

    version = 2

    def __init__(self, name: str, mount: Path = CGROUP_MOUNT, parent: str = "lakeport") -> None:
        super().__init__(name)
        self.mount, self.parent = mount, mount / parent
        self.path = self.parent / name

    @property
    def procs_files(self) -> list[Path]:
        return [self.path / "cgroup.procs"]

    def create(self, limits: UnitLimits) -> None:
        _mkdir(self.parent)
        self._delegate_controllers()
        _mkdir(self.path)
        _write(self.path / "memory.max", str(limits.memory_bytes))
        if (self.path / "memory.swap.max").exists():
            _write(self.path / "memory.swap.max", "0")
        _write(self.path / "cpu.max", f"{int(limits.cpus * CFS_PERIOD_US)} {CFS_PERIOD_US}")
        _write(self.path / "pids.max", str(limits.tasks))

    def _delegate_controllers(self) -> None:
        """Turn the controllers on from the mount down to the units' parent (each level must
        pass them to its children)."""
        levels = [self.parent, *self.parent.parents]
        levels = [
            level
            for level in reversed(levels)
            if level == self.mount or self.mount in level.parents
        ]
        for level in levels:
            enabled = set(_read(level / "cgroup.subtree_control").split())
            missing = [name for name in _CONTROLLERS if name not in enabled]
            if missing:
                _write(level / "cgroup.subtree_control", " ".join(f"+{name}" for name in missing))

    def usage(self) -> LimitUsage:
        return LimitUsage(
            memory_bytes=_int(_read(self.path / "memory.current")),
            memory_peak_bytes=_int(_read(self.path / "memory.peak")),
            cpu_seconds=_keyed(_read(self.path / "cpu.stat")).get("usage_usec", 0) / 1e6,
            cpu_throttled_seconds=_keyed(_read(self.path / "cpu.stat")).get("throttled_usec", 0)
            / 1e6,
            tasks=_int(_read(self.path / "pids.current")),
            oom_kills=_keyed(_read(self.path / "memory.events")).get("oom_kill", 0),
            tasks_refused=_keyed(_read(self.path / "pids.events")).get("max", 0),
        )


def cgroup_version(mount: Path = CGROUP_MOUNT) -> int | None:
    """2 for a unified hierarchy with the controllers a unit needs, 1 for v1 hierarchies of
    them, None for neither (a hybrid's empty `unified` mount does not count)."""
    controllers = set(_read(mount / "cgroup.controllers").split())
    if set(_CONTROLLERS) <= controllers:
        return 2
    if all((mount / name / "cgroup.procs").exists() for name in _CONTROLLERS):
        return 1
    return None


def control_group(name: str, parent: str, mount: Path = CGROUP_MOUNT) -> ControlGroup:
    """The unit's control group for this machine's cgroup version (not yet created)."""
    version = cgroup_version(mount)
    if version == 2:
        return CgroupV2(name, mount, parent)
    if version == 1:
        return CgroupV1(name, mount, parent)
    raise LimitsUnavailable(
        f"no cgroup hierarchy with the {', '.join(_CONTROLLERS)} controllers under {mount}"
    )


def require_limits(parent: str, mount: Path = CGROUP_MOUNT) -> None:
    """Raise LimitsUnavailable unless units' control groups can be made here (as root, with
    the controllers mounted and writable)."""
    if os.geteuid() != 0:
        raise LimitsUnavailable(
            "bounding a unit's memory, CPU and tasks needs the portal to run as root "
            "(it makes a control group per unit)"
        )
    group = control_group("probe", parent, mount)
    for directory in group.dirs:
        parent_dir = directory.parent
        try:
            parent_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise LimitsUnavailable(
                f"cannot make control groups under {parent_dir}: {error.strerror}"
            ) from None
        if not os.access(parent_dir, os.W_OK):
            raise LimitsUnavailable(f"cannot make control groups under {parent_dir}: not writable")


def over_limit_reason(limits: UnitLimits, before: LimitUsage, after: LimitUsage) -> str | None:
    """Which limit the unit went over between two readings, and by how much, in words."""
    if after.oom_kills > before.oom_kills:
        return (
            f"the compute unit went over its memory limit of {limits.memory_bytes / 2**30:.3g} GiB "
            f"(peak {after.memory_peak_bytes / 2**30:.3g} GiB): the kernel ended "
            f"{after.oom_kills - before.oom_kills} of its processes"
        )
    if after.tasks_refused > before.tasks_refused:
        return (
            f"the compute unit reached its limit of {limits.tasks} processes and threads: "
            f"{after.tasks_refused - before.tasks_refused} new ones were refused"
        )
    return None
