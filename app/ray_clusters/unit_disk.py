"""A local compute unit's directory as a filesystem of its own size: its disk limit.

A unit writes Ray's logs and object spill, Spark's scratch space and whatever its users'
code writes into its directory. Left on the machine's filesystem, one step could fill the
disk the portal, PostgreSQL and every other unit write to. So the directory is an ext4
filesystem in a sparse image file of the unit's disk size, loop-mounted (nosuid, nodev) on
the unit's directory: a write past the size fails with "No space left on device" inside
the unit, and nothing outside changes. The image lives in the unit's portal directory (out
of the unit's reach) and takes only what the unit really wrote.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from app.ray_clusters.unit_limits import LimitsUnavailable

IMAGE_NAME = "disk.img"
_TOOLS = ("mkfs.ext4", "mount", "umount")


def disk_problem() -> str | None:
    """Why unit disks cannot be made here, or None."""
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return (
            f"bounding a unit's disk needs {', '.join(missing)} (Debian packages: e2fsprogs, mount)"
        )
    if os.geteuid() != 0:
        return "bounding a unit's disk needs the portal to run as root (it mounts a filesystem per unit)"
    return None


def _run(argv: list[str]) -> None:
    done = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        raise LimitsUnavailable(f"{argv[0]} failed: {(done.stderr or done.stdout).strip()[:300]}")


def mount_unit_disk(unit_dir: Path, portal_dir: Path, size_bytes: int, uid: int | None) -> Path:
    """Make `unit_dir` a filesystem of `size_bytes`, owned by `uid` (0700); returns the image."""
    if (problem := disk_problem()) is not None:
        raise LimitsUnavailable(problem)
    image = portal_dir / IMAGE_NAME
    with open(image, "xb") as file:
        file.truncate(size_bytes)  # sparse: the host's disk holds only what the unit writes
    owner = uid if uid is not None else os.geteuid()
    # No journal (scratch space, gone with the unit) and no reserved blocks: the unit's size is its own.
    _run(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-m",
            "0",
            "-O",
            "^has_journal",
            "-E",
            f"root_owner={owner}:{owner},lazy_itable_init=1",
            str(image),
        ]
    )
    # Not noexec: Spark unpacks native libraries into its scratch space and loads them from there.
    _run(["mount", "-o", "loop,nosuid,nodev", str(image), str(unit_dir)])
    (unit_dir / "lost+found").rmdir()
    unit_dir.chmod(0o700)
    return image


def is_mounted(unit_dir: Path) -> bool:
    return os.path.ismount(unit_dir)


def unmount_unit_disk(unit_dir: Path) -> None:
    """Unmount the unit's filesystem (its processes are gone); the image goes with the portal dir."""
    for argv in (["umount", str(unit_dir)], ["umount", "--lazy", str(unit_dir)]):
        if not is_mounted(unit_dir):
            return  # never mounted, or unmounted meanwhile (two stops of one unit may race)
        try:
            _run(argv)
            return
        except LimitsUnavailable:
            if argv[1] == "--lazy" and is_mounted(unit_dir):
                raise
            # still busy: detach it now, the kernel frees it when it can


def disk_used_bytes(unit_dir: Path) -> int | None:
    """Bytes in use on the unit's filesystem, or None when it has none."""
    if not is_mounted(unit_dir):
        return None
    stats = os.statvfs(unit_dir)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


def disk_full(unit_dir: Path, free_share: float = 0.03) -> bool:
    """Whether the unit's filesystem has less than `free_share` of its room left (its room is a
    little less than the unit's disk size: the filesystem keeps its own metadata there)."""
    if not is_mounted(unit_dir):
        return False
    stats = os.statvfs(unit_dir)
    return stats.f_bavail < free_share * stats.f_blocks
