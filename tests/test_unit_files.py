"""A unit's directory is hostile input: links (to files, to directories, dangling), FIFOs, huge
files and directories where files belong never make the portal read, write or truncate
anything outside the unit, block, or repeat a secret. Also: text from a unit is cleaned and
bounded (app/untrusted.py). No cluster is needed: the files are laid out as a unit's code
would lay them out, and the portal's own code reads and writes them."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from app.ray_clusters.base import ClusterHandle
from app.ray_clusters.local import SPARK_HOST_LAUNCHER, LocalClusterBackend
from app.ray_clusters.local_processes import node_record, unit_log_tail
from app.ray_clusters.unit_files import UnitDir, UnsafeUnitFile
from app.untrusted import Limits, bounded, clean_lines, clean_text

SECRET = "portal-secret-7f3a9c"


@pytest.fixture
def machine_file(tmp_path) -> Path:
    """A file of the machine's, outside the unit, that only root may read."""
    path = tmp_path / "machine" / "shadow"
    path.parent.mkdir()
    path.write_text(f'{{"pid": 1, "ready": true, "returncode": null, "secret": "{SECRET}"}}\n')
    path.chmod(0o600)
    return path


@pytest.fixture
def unit(tmp_path) -> tuple[LocalClusterBackend, ClusterHandle]:
    """A unit's directory and portal directory as `LocalClusterBackend.start` lays them out."""
    unit_dir, portal_dir = (
        tmp_path / "units" / "ab12cd34",
        tmp_path / "units" / ".portal" / "ab12cd34",
    )
    (unit_dir / "nodes").mkdir(parents=True)
    portal_dir.mkdir(parents=True)
    handle = ClusterHandle(
        backend="local",
        cu_id="7",
        details={
            "cluster_dir": str(unit_dir),
            "portal_dir": str(portal_dir),
            "spark_host_on_request": True,
            "nodes": [{"role": "head", "log": str(unit_dir / "head.log")}],
        },
    )
    return LocalClusterBackend(), handle  # its own base dir is not used by these calls


def unit_path(handle: ClusterHandle, relative: str) -> Path:
    return Path(handle.details["cluster_dir"]) / relative


def test_a_start_request_never_writes_through_a_link_the_unit_made(unit, tmp_path, machine_file):
    backend, handle = unit
    request = unit_path(handle, f"nodes/{SPARK_HOST_LAUNCHER}.start")
    outside = tmp_path / "machine" / "created-by-the-portal"
    for target in (
        outside,
        machine_file,
    ):  # dangling (the portal would create it), then an existing file
        request.symlink_to(target)
        assert backend.launch_spark_host(handle) is True
        UnitDir(handle.details["cluster_dir"]).create_replacing(
            f"nodes/{SPARK_HOST_LAUNCHER}.start"
        )
        assert request.is_file() and not request.is_symlink() and request.stat().st_size == 0
        request.unlink()
    assert not outside.exists()
    assert SECRET in machine_file.read_text()  # not truncated
    assert (
        backend.launch_spark_host(handle) is True and request.is_file() and not request.is_symlink()
    )


def test_a_start_request_refuses_a_linked_directory(unit, tmp_path):
    backend, handle = unit
    elsewhere = tmp_path / "machine-dir"
    elsewhere.mkdir()
    nodes = unit_path(handle, "nodes")
    nodes.rmdir()
    nodes.symlink_to(elsewhere, target_is_directory=True)

    with pytest.raises(UnsafeUnitFile, match="not a directory the portal made"):
        backend.launch_spark_host(handle)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("make", ["file link", "dir link", "dangling", "fifo", "directory"])
def test_a_node_record_that_is_not_a_plain_file_is_no_record(unit, machine_file, tmp_path, make):
    _, handle = unit
    record = unit_path(handle, "nodes/head.json")
    if make == "file link":
        record.symlink_to(machine_file)
    elif make == "dir link":
        nodes = unit_path(handle, "nodes")
        nodes.rmdir()
        nodes.symlink_to(machine_file.parent, target_is_directory=True)
        (machine_file.parent / "head.json").write_text(machine_file.read_text())
    elif make == "dangling":
        record.symlink_to(tmp_path / "nothing")
    elif make == "fifo":
        os.mkfifo(record)
    else:
        record.mkdir()

    started = time.monotonic()
    assert node_record(handle, {"role": "head"}) is None
    assert time.monotonic() - started < 1  # a FIFO never blocks the portal


def test_a_plain_node_record_is_read(unit):
    _, handle = unit
    unit_path(handle, "nodes/head.json").write_text(
        '{"pid": 12, "ready": true, "returncode": null}'
    )
    assert node_record(handle, {"role": "head"}) == {"pid": 12, "ready": True, "returncode": None}


def test_a_log_linked_to_the_portals_environment_repeats_nothing(unit, monkeypatch):
    backend, handle = unit
    monkeypatch.setenv("LAKEPORT_SECRET_KEY", SECRET)
    launcher_log = unit_path(handle, f"{SPARK_HOST_LAUNCHER}.log")
    launcher_log.symlink_to(f"/proc/{os.getpid()}/environ")

    assert backend.spark_host_launch_log(handle) == ""
    unit_path(handle, "head.log").symlink_to(f"/proc/{os.getpid()}/environ")
    assert unit_log_tail(handle, "head.log") == ""


def test_a_huge_log_is_read_by_its_tail_only(unit):
    _, handle = unit
    log = unit_path(handle, "head.log")
    with open(log, "wb") as file:
        file.truncate(8 * 2**30)  # 8 GiB, sparse
        file.seek(0, os.SEEK_END)
        file.write(b"\nthe last line\x1b[31m with an escape\x00\n")
    started = time.monotonic()
    tail = unit_log_tail(handle, "head.log", lines=3, limit=500)
    assert time.monotonic() - started < 1
    assert tail.endswith("the last line[31m with an escape") and len(tail) <= 500
    assert "\x1b" not in tail and "\x00" not in tail


def test_a_fifo_log_never_blocks_the_portal(unit):
    backend, handle = unit
    os.mkfifo(unit_path(handle, f"{SPARK_HOST_LAUNCHER}.log"))
    done = threading.Event()
    threading.Thread(
        target=lambda: (backend.spark_host_launch_log(handle), done.set()), daemon=True
    ).start()
    assert done.wait(2), "reading a FIFO in the unit's dir blocked"


def test_the_ray_token_is_restored_from_the_portals_copy_only(unit, machine_file):
    backend, handle = unit
    unit_path(handle, "auth_token").symlink_to(machine_file)
    handle.details["auth_token_file"] = str(unit_path(handle, "auth_token"))
    assert (
        backend.restore_token(handle).auth_token is None
    )  # no copy yet: no token, not the machine's file
    Path(handle.details["portal_dir"], "auth_token").write_text("the-units-token")
    assert backend.restore_token(handle).auth_token == "the-units-token"


def test_unit_dir_refuses_paths_that_leave_it(unit):
    _, handle = unit
    unit_dir = UnitDir(handle.details["cluster_dir"])
    for path in ("../x", "/etc/passwd", "nodes/../../x", ""):
        with pytest.raises(ValueError):
            unit_dir.read_head(path, 10)


def test_write_new_never_replaces_what_is_there(unit, machine_file):
    _, handle = unit
    unit_path(handle, "plan.json").symlink_to(machine_file)
    with pytest.raises(FileExistsError):
        UnitDir(handle.details["cluster_dir"]).write_new("plan.json", b"{}")
    assert SECRET in machine_file.read_text()


# --------------------------------------------------------------------- text from a unit
def test_clean_text_drops_controls_and_says_when_it_cut():
    assert clean_text("a\x00b\x1b[2Jc\td\ne\u202e") == "ab[2Jc\td\ne"
    assert clean_text("line\none", one_line=True) == "line one"
    cut = clean_text("x" * 5000, 100)
    kept = cut.split("…")[0]
    assert (
        len(cut) <= 100
        and kept == "x" * len(kept)
        and cut.endswith(f"[cut: {5000 - len(kept)} more characters]")
    )
    assert clean_text(b"bytes") == "b'bytes'"


def test_clean_lines_keeps_the_last_lines_within_the_limit():
    text = "\n".join(f"line {n}" for n in range(100))
    assert clean_lines(text, lines=2, limit=100) == "line 98\nline 99"
    assert len(clean_lines("y" * 10_000, lines=5, limit=300)) <= 300


def test_bounded_cuts_every_part_and_marks_it():
    value = {
        "logs": [{"message": "m" * 50, "level": "INFO\x00"}] * 30,
        "deep": [[[[["x"]]]]],
        **{f"k{n}": n for n in range(20)},
    }
    out = bounded(value, Limits(string=40, items=10, depth=3))
    assert len(out["logs"]) == 11 and out["logs"][-1] == "… [cut: 20 more items]"
    assert (
        out["logs"][0]["message"].endswith("more characters]")
        and len(out["logs"][0]["message"]) <= 40
    )
    assert out["logs"][0]["level"] == "INFO"
    assert out["…"] == "[cut: 12 more keys]"
    assert out["deep"] == [["… [cut: nested too deeply]"]]
