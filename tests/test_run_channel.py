"""What a run's own process and the Spark host say to each other (compute/run/run_channel.py), over a
real socket pair, without Spark: progress relayed, the completion decision taken by the host under
the lock a cancel takes, and what a hostile process may send refused."""

from __future__ import annotations

import socket
import threading

import pytest

from compute.contract import JobKind
from compute.run.run_channel import (
    MAX_MESSAGE_BYTES,
    Channel,
    ChannelClosed,
    RemoteProgress,
    follow,
    listen,
)
from compute.run.runs import Run


class FakeSpark:
    class sparkContext:  # noqa: N801 - stands for pyspark's attribute
        groups: list[str] = []

        @classmethod
        def setJobGroup(cls, group, name, interruptOnCancel=False):  # noqa: N802 - pyspark's name
            cls.groups.append(group)

        @classmethod
        def cancelJobGroup(cls, group):  # noqa: N802
            pass


def pair() -> tuple[Channel, Channel]:
    host, process = socket.socketpair()
    return Channel(host), Channel(process)


def in_process(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_progress_and_the_end_reach_the_hosts_record():
    host, process = pair()
    run = Run(run_id="r1", name="x", kind=JobKind.EXECUTION, args={})

    def the_run():
        progress = RemoteProgress(process)
        in_process(lambda: listen(process, progress, FakeSpark, "r1", on_close=lambda: None))
        progress.set_steps([{"name": "a", "state": "pending"}])
        progress.update_step("a", state="done", rows_out=3)
        progress.log("INFO", "a", "hello")
        assert progress.begin_completion() is True
        assert progress.begin_completion() is True  # asked once, then known
        process.send({"kind": "end", "outcome": "completed", "result": {"n": 3}})

    thread = in_process(the_run)
    end = follow(host, run)
    thread.join(5)
    assert end == {"kind": "end", "outcome": "completed", "result": {"n": 3}}
    assert run.progress.public()["steps"] == [{"name": "a", "state": "done", "rows_out": 3}]
    assert [line["message"] for line in run.progress.public()["logs"]] == ["hello"]
    assert (
        run.progress.completing and not run.progress.request_cancel()
    )  # completion began: a cancel is refused


def test_a_cancel_the_host_accepted_first_means_the_run_does_not_complete():
    host, process = pair()
    run = Run(run_id="r2", name="x", kind=JobKind.EXECUTION, args={})
    assert run.progress.request_cancel()
    answers = []

    def the_run():
        progress = RemoteProgress(process)
        in_process(lambda: listen(process, progress, FakeSpark, "r2", on_close=lambda: None))
        answers.append(progress.begin_completion())
        answers.append(progress.cancel_requested)
        process.send({"kind": "end", "outcome": "cancelled"})

    thread = in_process(the_run)
    assert follow(host, run)["outcome"] == "cancelled"
    thread.join(5)
    assert answers == [False, True]
    assert not run.progress.completing


def test_what_a_hostile_process_sends_is_bounded_and_checked():
    host, process = pair()
    run = Run(run_id="r3", name="x", kind=JobKind.EXECUTION, args={})

    def hostile():
        process.send({"kind": "log", "level": ["not", "text"], "step": {"a": 1}, "message": 5})
        process.send({"kind": "steps", "steps": ["not a step", {"name": "ok"}]})
        process.send({"kind": "binding", "warehouse_id": "w"})  # no taker: ignored
        try:
            process.sock.sendall(b"x" * (MAX_MESSAGE_BYTES + 10) + b"\n")
        except OSError:
            pass  # the host stopped reading

    in_process(hostile)
    with pytest.raises(ChannelClosed, match="bound"):
        follow(host, run)
    logged = run.progress.public()["logs"][0]
    assert (logged["level"], logged["step"], logged["message"]) == (
        "['not', 'text']",
        "{'a': 1}",
        "5",
    )
    assert run.progress.public()["steps"] == [{"name": "ok"}]


def test_a_process_that_ends_without_its_end_is_told_apart():
    host, process = pair()
    run = Run(run_id="r4", name="x", kind=JobKind.EXECUTION, args={})
    process.send({"kind": "log", "level": "INFO", "step": None, "message": "started"})
    process.close()
    with pytest.raises(ChannelClosed):
        follow(host, run)


def test_the_next_runs_process_is_forked_after_the_end_is_answered():
    """A fork holds the host's interpreter lock while the kernel copies its page tables: forked
    as the run ends, the next run's process held up the answer to the watcher waiting for it."""
    from compute.contract import Isolation
    from compute.host import spark_host
    from compute.host.spark_host import SparkSessionHost

    host_end, process_end = pair()
    forked_when: list[tuple[bool, float]] = []
    run = Run(run_id="r1", name="x", kind=JobKind.EXECUTION, args={})

    class Child:
        channel = host_end

        def end(self, grace_s: float = 0.0) -> None:
            pass

    class Forks:
        def take(self):
            return Child()

        def refill(self, after_s: float = 0.0) -> None:
            forked_when.append((run.finished.is_set(), after_s))

    host = SparkSessionHost.__new__(SparkSessionHost)  # no Spark: only the run's relay is used
    host._forks = Forks()

    def the_run():
        assert process_end.receive()["kind"] == "run"
        process_end.send({"kind": "end", "outcome": "failed", "error": "boom"})

    in_process(the_run)
    host._execute_apart(run, Isolation.PROCESS)
    assert run.state == "FAILED" and run.error == "boom"
    assert forked_when == [(True, spark_host.FORK_AHEAD_AFTER_END_S)]
    assert spark_host.FORK_AHEAD_AFTER_END_S > 0
