"""A compute unit cannot touch the machine it runs on: a real local unit's code attacks its
machine as a hostile user's step would, and the kernel limits and the portal's handling of
the unit's directory hold. Each attack asserts that nothing outside the unit changed and
nothing secret came back.

The attacking code runs as a Ray job on the unit: a process inside the unit's sandbox, as
its uid and under its control group, exactly where a PySpark step's Python runs.
Run it alone, under the heavy lock: it starts compute units.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from app.ray_clusters.base import ClusterSpec, ClusterStartError
from app.ray_clusters.local import LocalClusterBackend, cluster_pids, failed_start_logs_dir
from app.ray_clusters.local_limits import LocalLimits
from app.ray_clusters.unit_files import UnitDir
from app.ray_clusters.unit_limits import cgroup_version

MiB = 2**20
LIMITS = LocalLimits(tasks_per_node=400, disk_bytes=512 * MiB)
SECRET = "portal-secret-" + secrets.token_hex(6)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or cgroup_version() is None,
    reason="kernel limits need root and cgroups (as on this project's machines)",
)


@pytest.fixture(scope="module")
def backend():
    return LocalClusterBackend(limits=LIMITS)


@pytest.fixture(scope="module")
def unit(backend):
    handle = backend.start(
        ClusterSpec(cu_id="test-boundary", name="boundary", cpus_per_node=1, memory_gb_per_node=1)
    )
    yield handle
    backend.terminate(handle)
    assert cluster_pids(handle) == []


def run_in_unit(handle, script: str, timeout_s: float = 90) -> dict:
    """Run `script` in the unit (a Ray job's driver); what it printed after RESULT, as JSON."""
    jobs = JobSubmissionClient(handle.dashboard_url, headers=handle.auth_headers())
    job_id = jobs.submit_job(entrypoint=f"python -c {shlex.quote(script)}")
    deadline = time.monotonic() + timeout_s
    while jobs.get_job_status(job_id) not in (
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.STOPPED,
    ):
        assert time.monotonic() < deadline, jobs.get_job_logs(job_id)[-2000:]
        time.sleep(0.5)
    logs = jobs.get_job_logs(job_id)
    line = next((line for line in logs.splitlines() if line.startswith("RESULT ")), None)
    assert line, logs[-3000:]
    return json.loads(line[7:])


def machine_still_fine(portal_pid: int) -> None:
    os.kill(portal_pid, 0)  # the portal lives
    assert subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"], timeout=10).returncode == 0


def test_the_unit_runs_in_its_own_control_group_and_filesystem(backend, unit):
    unit_dir = Path(unit.details["cluster_dir"])
    assert os.path.ismount(unit_dir)
    for pid in cluster_pids(unit):
        try:
            groups = Path(f"/proc/{pid}/cgroup").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended since it was listed (a Ray worker's helper)
        assert f"/lakeport/{unit_dir.name}" in groups, (pid, groups)
    report = backend.status(unit).limits
    assert (
        report.limits.memory_bytes == 2**30
        and report.limits.cpus == 1
        and report.limits.tasks == 400
    )
    assert 0 < report.usage.memory_bytes <= 2**30 and 0 < report.usage.tasks <= 400
    assert report.disk_used_bytes is not None and report.disk_used_bytes < 512 * MiB


CPU_HOG = r"""
import json, multiprocessing, time
def burn(seconds):
    end = time.time() + seconds
    while time.time() < end:
        pass
procs = [multiprocessing.Process(target=burn, args=(4,)) for _ in range(3)]
[p.start() for p in procs]
[p.join() for p in procs]
print("RESULT " + json.dumps({"done": True}))
"""


def test_a_step_gets_no_more_cpu_than_its_unit(backend, unit):
    before, started = backend.limit_usage(unit), time.monotonic()
    assert run_in_unit(unit, CPU_HOG) == {"done": True}
    wall = time.monotonic() - started
    used = backend.limit_usage(unit).cpu_seconds - before.cpu_seconds
    assert used <= 1.0 * wall + 0.5, f"{used:.1f} CPU-seconds in {wall:.1f} s on a 1-CPU unit"
    assert backend.limit_usage(unit).cpu_throttled_seconds > before.cpu_throttled_seconds


# At the limit the unit's own Ray (its dashboard, the job's agent) cannot start threads either,
# so the result goes to a file in the unit's dir, which the test reads as the portal would.
FORK_BOMB = r"""
import json, os, subprocess
started, refused = [], 0
for _ in range(600):
    try:
        started.append(subprocess.Popen(["sleep", "30"]))
    except OSError:
        refused += 1
for process in started:
    process.kill(); process.wait()
path = os.path.join(os.environ["HOME"], "bomb.json")
with open(path + ".part", "w") as file:
    json.dump({"started": len(started), "refused": refused}, file)
os.rename(path + ".part", path)
"""


DISK_FILLER = r"""
import errno, json, os
written, error = 0, None
try:
    with open(os.path.join(os.environ["HOME"], "fill"), "wb") as file:
        for _ in range(800):
            file.write(b"\1" * 2**20)
            written += 2**20
        file.flush(); os.fsync(file.fileno())
except OSError as e:
    error = errno.errorcode.get(e.errno)
print("RESULT " + json.dumps({"written": written, "error": error}))
"""


def test_a_step_cannot_write_more_than_its_units_disk(backend, unit):
    free_before = os.statvfs("/").f_bavail * os.statvfs("/").f_frsize
    result = run_in_unit(unit, DISK_FILLER)
    assert result["error"] == "ENOSPC" and result["written"] <= 512 * MiB
    assert "disk is full" in backend.over_limit(unit, backend.limit_usage(unit))
    image = Path(unit.details["portal_dir"]) / "disk.img"
    assert image.stat().st_blocks * 512 <= 530 * MiB  # what the machine's disk holds for it
    assert free_before - os.statvfs("/").f_bavail * os.statvfs("/").f_frsize < 600 * MiB
    run_in_unit(
        unit, 'import os; os.remove(os.path.join(os.environ["HOME"], "fill")); print("RESULT {}")'
    )


LINKS = r"""
import json, os
home = os.environ["HOME"]
def replace_with_link(relative, target):
    path = os.path.join(home, relative)
    if os.path.lexists(path):
        os.remove(path)
    os.symlink(target, path)
replace_with_link("nodes/spark-host-launcher.start", "OUTSIDE")
replace_with_link("spark-host-launcher.log", "/proc/PORTAL_PID/environ")
replace_with_link("head.log", "MACHINE_FILE")
os.mkfifo(os.path.join(home, "nodes", "worker-1.json"))
print("RESULT " + json.dumps({"done": True}))
"""


def test_links_and_fifos_the_unit_makes_never_reach_the_machine(
    backend, unit, tmp_path, monkeypatch
):
    monkeypatch.setenv("LAKEPORT_SECRET_KEY", SECRET)
    outside = tmp_path / "created-by-the-portal"
    machine_file = tmp_path / "root-only"
    machine_file.write_text(f"{SECRET}\n  raylet [exit code=1]\n")
    machine_file.chmod(0o600)
    script = (
        LINKS.replace("OUTSIDE", str(outside))
        .replace("PORTAL_PID", str(os.getpid()))
        .replace("MACHINE_FILE", str(machine_file))
    )
    assert run_in_unit(unit, script) == {"done": True}
    unit.details["spark_host_on_request"] = (
        True  # the portal's request path, as for a unit with a host on request
    )
    try:
        backend.launch_spark_host(unit)
        texts = [backend.spark_host_launch_log(unit), backend.status(unit).reason]
    finally:
        unit.details["spark_host_on_request"] = False
    assert not outside.exists()
    assert machine_file.read_text().startswith(SECRET)  # not truncated
    assert not any(SECRET in text or "raylet [exit code=1]" in text for text in texts), texts


def test_a_unit_that_fails_to_start_says_why_and_keeps_its_logs(backend, monkeypatch):
    plan_node = LocalClusterBackend._plan_node

    def with_a_bad_flag(self, handle, spec, role):
        plan_node(self, handle, spec, role)
        handle.details["nodes"][-1]["plan"]["argv"].append("--no-such-flag")

    monkeypatch.setattr(LocalClusterBackend, "_plan_node", with_a_bad_flag)
    with pytest.raises(ClusterStartError) as failure:
        backend.start(ClusterSpec(cu_id="test-bad-start", name="bad start", memory_gb_per_node=1))
    reason = str(failure.value)
    assert "head node process" in reason and "exited with code" in reason
    assert "the last lines of its log" in reason and "no-such-flag" in reason
    kept = sorted(
        failed_start_logs_dir(backend.base_dir).iterdir(), key=lambda path: path.stat().st_mtime
    )[-1]
    assert "no-such-flag" in (kept / "head.log").read_text()
    assert not Path(backend.base_dir, kept.name).exists()  # the unit itself is gone


def test_only_the_operators_setting_lets_a_unit_start_without_limits(tmp_path):
    backend = LocalClusterBackend(
        limits=LocalLimits(cgroup_mount=tmp_path, allow_unlimited=True)
    )  # no cgroups there
    handle = backend.start(
        ClusterSpec(
            cu_id="test-unlimited", name="unlimited", memory_gb_per_node=1, include_dashboard=False
        )
    )
    try:
        assert handle.details["limits"] == {} and not os.path.ismount(handle.details["cluster_dir"])
        assert backend.limit_usage(handle) is None and backend.over_limit(handle, None) is None
    finally:
        backend.terminate(handle)


MEMORY_HOG = r"""
import json, subprocess, sys
child = subprocess.run([sys.executable, "-c",
    "b = bytearray(1536 * 2**20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')"],
    capture_output=True, text=True)
print("RESULT " + json.dumps({"returncode": child.returncode, "out": child.stdout}))
"""


def test_a_step_over_its_memory_is_ended_by_the_kernel_and_says_so(backend, unit):
    """Late in the module: the kernel ends the hungriest process of the unit, which is the step's."""
    before = backend.limit_usage(unit)
    result = run_in_unit(unit, MEMORY_HOG)
    assert result == {"returncode": -9, "out": ""}  # killed, inside the unit only
    reason = backend.over_limit(unit, before)
    assert reason and "memory limit of 1 GiB" in reason and "ended 1 of its processes" in reason
    assert backend.limit_usage(unit).memory_peak_bytes <= 2**30
    machine_still_fine(os.getpid())


def test_a_step_cannot_start_more_processes_than_its_unit_may(backend):
    """On a unit of its own: at the limit, the unit's own Ray processes cannot start threads
    either, so the unit may not survive it. Nothing outside it notices."""
    unit = backend.start(
        ClusterSpec(cu_id="test-fork-bomb", name="fork bomb", cpus_per_node=1, memory_gb_per_node=1)
    )
    try:
        before = backend.limit_usage(unit)
        jobs = JobSubmissionClient(unit.dashboard_url, headers=unit.auth_headers())
        jobs.submit_job(entrypoint=f"python -c {shlex.quote(FORK_BOMB)}")
        deadline = time.monotonic() + 90
        while True:
            try:
                result = json.loads(
                    UnitDir(unit.details["cluster_dir"]).read_head("bomb.json", 4096)
                )
                break
            except OSError:
                assert time.monotonic() < deadline, "the step never finished"
                time.sleep(0.5)
        assert result["refused"] > 0 and result["started"] < 400
        assert backend.limit_usage(unit).tasks_refused > before.tasks_refused
        assert "limit of 400 processes and threads" in backend.over_limit(unit, before)
        machine_still_fine(os.getpid())
    finally:
        backend.terminate(unit)
    assert cluster_pids(unit) == []
