"""Control groups for local units, both versions, against a file tree laid out as the kernel's
(cgroup v2 cannot run on these machines, whose controllers are on v1: the real v1 kernel path is
attacked in test_unit_boundary.py). Also: a machine without limits refuses local units."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from app.ray_clusters.base import ClusterSpec, ClusterStartError
from app.ray_clusters.local import LocalClusterBackend
from app.ray_clusters.local_limits import LocalLimits
from app.ray_clusters.unit_limits import (
    CgroupV1,
    CgroupV2,
    LimitUsage,
    UnitLimits,
    cgroup_version,
    control_group,
    over_limit_reason,
)

LIMITS = UnitLimits(memory_bytes=2 * 2**30, cpus=1.5, tasks=800, disk_bytes=2**30)


def v2_tree(root: Path) -> Path:
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def v1_tree(root: Path) -> Path:
    for controller in ("memory", "cpu", "cpuacct", "pids"):
        (root / controller).mkdir()
        (root / controller / "cgroup.procs").write_text("")
    (root / "unified").mkdir()  # a hybrid machine's empty v2 mount
    return root


def test_the_version_is_told_by_where_the_controllers_are(tmp_path):
    for name in ("v2", "v1", "none"):
        (tmp_path / name).mkdir()
    assert cgroup_version(v2_tree(tmp_path / "v2")) == 2
    assert cgroup_version(v1_tree(tmp_path / "v1")) == 1
    assert cgroup_version(tmp_path / "none") is None


def test_v2_sets_the_limits_and_passes_the_controllers_down(tmp_path):
    mount = v2_tree(tmp_path)
    group = control_group("u1", "lakeport", mount)
    assert isinstance(group, CgroupV2)
    (mount / "lakeport" / "u1").mkdir(parents=True)
    (mount / "lakeport" / "u1" / "memory.swap.max").write_text(
        "max"
    )  # the kernel makes it with the group
    group.create(LIMITS)

    unit = mount / "lakeport" / "u1"
    assert (unit / "memory.max").read_text() == str(2 * 2**30)
    assert (unit / "memory.swap.max").read_text() == "0"
    assert (unit / "cpu.max").read_text() == "150000 100000"
    assert (unit / "pids.max").read_text() == "800"
    for level in (mount, mount / "lakeport"):
        assert set((level / "cgroup.subtree_control").read_text().split()) == {
            "+memory",
            "+cpu",
            "+pids",
        }
    assert group.procs_files == [unit / "cgroup.procs"]


def test_v2_usage_and_what_went_over(tmp_path):
    group = CgroupV2("u1", v2_tree(tmp_path))
    group.path.mkdir(parents=True)
    files = {
        "memory.current": "1000",
        "memory.peak": "2147483648",
        "memory.events": "low 0\noom 1\noom_kill 2\n",
        "pids.current": "37",
        "pids.events": "max 5\n",
        "cpu.stat": "usage_usec 2500000\nthrottled_usec 700000\n",
    }
    for name, text in files.items():
        (group.path / name).write_text(text)
    usage = group.usage()
    assert usage == LimitUsage(
        memory_bytes=1000,
        memory_peak_bytes=2**31,
        cpu_seconds=2.5,
        cpu_throttled_seconds=0.7,
        tasks=37,
        oom_kills=2,
        tasks_refused=5,
    )
    assert over_limit_reason(LIMITS, LimitUsage(oom_kills=1), usage) == (
        "the compute unit went over its memory limit of 2 GiB (peak 2 GiB): the kernel ended 1 of its processes"
    )
    assert over_limit_reason(LIMITS, LimitUsage(oom_kills=2, tasks_refused=1), usage) == (
        "the compute unit reached its limit of 800 processes and threads: 4 new ones were refused"
    )
    assert over_limit_reason(LIMITS, usage, usage) is None


def test_v1_sets_the_limits_in_each_hierarchy(tmp_path):
    mount = v1_tree(tmp_path)
    group = control_group("u1", "lakeport", mount)
    assert isinstance(group, CgroupV1)
    (mount / "memory" / "lakeport" / "u1").mkdir(parents=True)
    (mount / "memory" / "lakeport" / "u1" / "memory.memsw.limit_in_bytes").write_text("")
    group.create(LIMITS)

    assert (mount / "memory/lakeport/u1/memory.limit_in_bytes").read_text() == str(2 * 2**30)
    assert (mount / "memory/lakeport/u1/memory.memsw.limit_in_bytes").read_text() == str(2 * 2**30)
    assert (mount / "cpu/lakeport/u1/cpu.cfs_quota_us").read_text() == "150000"
    assert (mount / "pids/lakeport/u1/pids.max").read_text() == "800"
    assert {path.parent.parent.parent.name for path in group.procs_files} == {
        "memory",
        "cpu",
        "cpuacct",
        "pids",
    }


def test_a_joined_command_is_the_process_in_the_group(tmp_path):
    group = CgroupV2("u1", v2_tree(tmp_path))
    group.path.mkdir(parents=True)
    done = subprocess.run(
        group.join_argv(["sh", "-c", "echo $$"]), capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 0
    assert (group.path / "cgroup.procs").read_text().strip() == done.stdout.strip()


def test_a_group_that_cannot_be_joined_never_runs_the_command(tmp_path):
    group = CgroupV2("u1", v2_tree(tmp_path))  # its directory does not exist: nothing to join
    done = subprocess.run(
        group.join_argv(["touch", str(tmp_path / "ran")]), capture_output=True, timeout=10
    )
    assert done.returncode == 125 and not (tmp_path / "ran").exists()


def test_without_limits_a_local_unit_refuses_to_start_and_leaves_nothing(tmp_path):
    base_dir = Path(
        tempfile.mkdtemp(prefix="lpu", dir="/tmp")
    )  # short: Ray's socket paths live under it
    backend = LocalClusterBackend(
        base_dir, limits=LocalLimits(cgroup_mount=tmp_path)
    )  # no controllers there
    try:
        with pytest.raises(
            ClusterStartError, match="run under kernel limits, and .*no cgroup hierarchy"
        ):
            backend.start(ClusterSpec(cu_id="test-no-limits", name="no limits"))
        assert [path.name for path in base_dir.rglob("*")] in (
            [".uids.lock", ".portal"],
            [".portal", ".uids.lock"],
        )
    finally:
        shutil.rmtree(base_dir)


def test_limits_are_checked_when_the_operator_sets_them():
    with pytest.raises(ValueError, match="at least 64 tasks"):
        LocalLimits(tasks_per_node=10)
    with pytest.raises(ValueError, match="at least 256 MiB"):
        LocalLimits(disk_bytes=2**20)


def test_a_unit_disk_unmounted_meanwhile_by_another_stop_is_not_an_error(monkeypatch, tmp_path):
    """Two stops of one unit (the worker's and the local stack's) may race to unmount it."""
    from app.ray_clusters import unit_disk

    mounted = iter([True, False])  # mounted when looked at, gone when the umount ran
    calls = []

    def run(argv):
        calls.append(argv)
        raise unit_disk.LimitsUnavailable("umount failed: not mounted.")

    monkeypatch.setattr(unit_disk, "is_mounted", lambda _dir: next(mounted))
    monkeypatch.setattr(unit_disk, "_run", run)
    unit_disk.unmount_unit_disk(tmp_path)
    assert calls == [["umount", str(tmp_path)]]
    busy = iter([True, True, True])  # still mounted: busy, then the lazy detach fails too
    monkeypatch.setattr(unit_disk, "is_mounted", lambda _dir: next(busy))
    with pytest.raises(unit_disk.LimitsUnavailable):
        unit_disk.unmount_unit_disk(tmp_path)
