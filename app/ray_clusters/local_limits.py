"""The kernel limits a local compute unit runs under: what it asked, made real.

`LocalLimits` is the operator's policy (`LAKEPORT_CU_*` settings): how many tasks a node may
have, how much disk a unit gets, where the control groups go, and whether a unit may start
without limits at all (only when the operator says so by name: without them, one user's step
can starve the machine). It makes a unit's control group (`unit_limits`) and disk
(`unit_disk`) before the unit's first process starts, records them in the unit's handle (so a
restarted portal can read and remove them) and removes them after the unit's processes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from app.ray_clusters import unit_disk
from app.ray_clusters.base import ClusterSpec
from app.ray_clusters.unit_limits import (
    CGROUP_MOUNT,
    ControlGroup,
    LimitsReport,
    LimitsUnavailable,
    LimitUsage,
    UnitLimits,
    control_group,
    over_limit_reason,
    require_limits,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalLimits:
    tasks_per_node: int = 4096
    disk_bytes: int = 10 * 2**30
    cgroup_parent: str = "lakeport"
    allow_unlimited: bool = False  # LAKEPORT_CU_ALLOW_UNLIMITED_UNITS
    cgroup_mount: Path = CGROUP_MOUNT

    def __post_init__(self) -> None:
        if self.tasks_per_node < 64:
            raise ValueError(
                f"a node needs at least 64 tasks (Ray's and Spark's own), not {self.tasks_per_node}"
            )
        if self.disk_bytes < 256 * 2**20:
            raise ValueError(
                f"a unit needs at least 256 MiB of disk for its logs, not {self.disk_bytes} bytes"
            )

    def apply(self, spec: ClusterSpec, unit_dir: Path, portal_dir: Path, uid: int | None) -> dict:
        """Make the unit's control group and disk; the handle's `limits` record. Raises
        LimitsUnavailable when they cannot be had, unless the operator allowed units without."""
        limits = UnitLimits(
            memory_bytes=spec.memory_bytes_per_node * spec.node_count,
            cpus=float(spec.cpus_per_node * spec.node_count),
            tasks=self.tasks_per_node * spec.node_count,
            disk_bytes=self.disk_bytes,
        )
        try:
            require_limits(self.cgroup_parent, self.cgroup_mount)
            group = control_group(unit_dir.name, self.cgroup_parent, self.cgroup_mount)
            group.create(limits)
        except LimitsUnavailable as error:
            if not self.allow_unlimited:
                raise LimitsUnavailable(
                    f"local compute units run under kernel limits, and {error}"
                ) from None
            logger.warning(
                "compute unit %s starts WITHOUT resource limits (allowed by the operator): %s",
                spec.cu_id,
                error,
            )
            return {}
        record = {
            **limits.__dict__,
            "cgroup": {
                "version": group.version,
                "name": unit_dir.name,
                "parent": self.cgroup_parent,
                "mount": str(self.cgroup_mount),
            },
        }
        try:
            unit_disk.mount_unit_disk(unit_dir, portal_dir, limits.disk_bytes, uid)
        except (LimitsUnavailable, OSError) as error:
            if not self.allow_unlimited:
                group.remove()
                raise LimitsUnavailable(
                    f"local compute units run with a disk limit, and {error}"
                ) from None
            logger.warning(
                "compute unit %s starts WITHOUT a disk limit (allowed by the operator): %s",
                spec.cu_id,
                error,
            )
            return {**record, "disk_bytes": 0}
        return record


def _group(record: dict) -> ControlGroup | None:
    if not record.get("cgroup"):
        return None
    cgroup = record["cgroup"]
    return control_group(cgroup["name"], cgroup["parent"], Path(cgroup.get("mount", CGROUP_MOUNT)))


def _limits(record: dict) -> UnitLimits:
    return UnitLimits(
        **{name: record[name] for name in ("memory_bytes", "cpus", "tasks", "disk_bytes")}
    )


def join_argv(record: dict, argv: list[str]) -> list[str]:
    """`argv`, started inside the unit's control group (unchanged for a unit without limits)."""
    group = _group(record)
    return group.join_argv(argv) if group else argv


def report(record: dict, unit_dir: Path) -> LimitsReport | None:
    if (group := _group(record)) is None:
        return None
    return LimitsReport(_limits(record), group.usage(), unit_disk.disk_used_bytes(unit_dir))


def usage(record: dict) -> LimitUsage | None:
    group = _group(record)
    return group.usage() if group else None


def over_limit(record: dict, before: LimitUsage | None, unit_dir: Path) -> str | None:
    """Which limit the unit went over since `before`, in words (None: none, or no limits)."""
    if before is None or (group := _group(record)) is None:
        return None
    limits = _limits(record)
    if reason := over_limit_reason(limits, before, group.usage()):
        return reason
    if limits.disk_bytes and unit_disk.disk_full(unit_dir):
        used = unit_disk.disk_used_bytes(unit_dir) or 0
        return (
            f"the compute unit's disk is full: {used / 2**30:.3g} GiB of its {limits.disk_bytes / 2**30:.3g} GiB "
            "are used (what its steps write in its directory counts)"
        )
    return None


def release(record: dict, unit_dir: Path) -> None:
    """Unmount the unit's disk and remove its control group (its processes are gone)."""
    if record.get("disk_bytes"):
        unit_disk.unmount_unit_disk(unit_dir)
    if (group := _group(record)) is not None:
        group.remove()
