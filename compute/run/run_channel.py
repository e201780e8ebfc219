"""What a run's own process and the Spark host say to each other, over a socket pair.

A workflow's run executes in a process of its own that ends with the run: forked from the warm
host for the unit owner's own workflows (compute/run/forked_runs.py), or spawned in a sandbox of its
own for a workflow another user wrote (compute/run/sandboxed_runs.py). Either way the host keeps the
run's record (`Run`, its `RunProgress`) and the run's process reports to it. The messages are JSON
documents, one a line (never pickle: the process runs code the host must not trust), each bounded:

- process -> host: `steps` (the run's steps), `step` (one step's fields), `log` (one log line),
  `completing` (may the run complete? the host decides, under the lock a cancel takes: the
  completion protocol of `RunProgress` stays one decision), `binding` (a warehouse's catalog
  binding a forked run made, for the host's cache and the next run), `end` (completed, failed or
  cancelled, with the result or the error).
- host -> process: `run` (the job's kind, its args, id and name), `cancel`, `completing` (the
  answer).
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
import traceback
from typing import Any

from compute.contract import JobKind
from compute.run.runs import RunFailed, RunInterrupted, RunProgress, jsonable

# One message's bound: a step's log line is bounded well below it, a result (a run's summary) too.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
CANCEL_REPEAT_SECONDS = 0.5


class ChannelClosed(Exception):
    """The other side ended, or sent what is not a message of this protocol."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = sock.makefile("rb")
        self._sending = threading.Lock()

    def send(self, message: dict) -> None:
        data = (json.dumps(message, default=repr) + "\n").encode()
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"a message of {len(data)} bytes is over the channel's bound")
        with self._sending:
            self.sock.sendall(data)

    def receive(self) -> dict:
        """The next message; raises ChannelClosed at the end or on anything else."""
        try:
            line = self._reader.readline(MAX_MESSAGE_BYTES + 1)
        except OSError as error:
            raise ChannelClosed(str(error)) from None
        if not line:
            raise ChannelClosed("the other side ended")
        if len(line) > MAX_MESSAGE_BYTES or not line.endswith(b"\n"):
            raise ChannelClosed("a message over the channel's bound")
        try:
            message = json.loads(line)
        except ValueError:
            raise ChannelClosed("a message that is not JSON") from None
        if not isinstance(message, dict):
            raise ChannelClosed("a message that is not an object")
        return message

    def close(self) -> None:
        """Close both: the reader holds the socket open as long as it is open itself."""
        for closing in (self._reader, self.sock):
            try:
                closing.close()
            except OSError:
                pass


# ------------------------------------------------------------------ the run's process
class RemoteProgress(RunProgress):
    """The run's progress in its own process: kept here (interruptible code, the log) and reported
    to the host. Whether the run completes is the host's decision, asked for once."""

    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self._channel = channel
        self._answers: queue.Queue[bool] = queue.Queue(maxsize=1)

    def set_steps(self, steps: list[dict]) -> None:
        super().set_steps(steps)
        self._channel.send({"kind": "steps", "steps": steps})

    def update_step(self, name: str, **fields: Any) -> None:
        super().update_step(name, **fields)
        self._channel.send({"kind": "step", "name": name, "fields": fields})

    def log(self, level: str, step: str | None, message: str) -> None:
        super().log(level, step, message)
        self._channel.send({"kind": "log", "level": level, "step": step, "message": message})

    def begin_completion(self) -> bool:
        with self._lock:
            if self._completing or self._cancel.is_set():
                return self._completing
        self._channel.send({"kind": "completing"})
        completes = self._answers.get()
        with self._lock:
            if completes:
                self._completing = True
            else:
                self._cancel.set()
        return completes

    def answer(self, completes: bool) -> None:
        self._answers.put(completes)


def execute(channel: Channel, spark, run: dict, progress: RemoteProgress, before_end=None) -> None:
    """Run `run`'s job here as the host would run it in a thread of its own, and report its end.
    `before_end()` runs once the job has ended, before the end is reported."""
    from compute.run.jobs import run_job

    spark.sparkContext.setJobGroup(
        run["run_id"], run["name"] or run["run_id"], interruptOnCancel=True
    )
    result = None
    try:
        result = run_job(JobKind(run["job"]), spark, run["args"], progress)
    except (
        Exception,
        SystemExit,
        RunInterrupted,
    ) as error:  # `sys.exit()` in user code ends only the run
        end = {
            "outcome": "failed",
            "error": str(error) if isinstance(error, RunFailed) else traceback.format_exc(limit=-5),
        }
    else:
        completed = progress.begin_completion()
        end = {
            "outcome": "completed" if completed else "cancelled",
            "result": jsonable(result) if completed else None,
        }
    if before_end is not None:
        before_end()
    channel.send({"kind": "end", **end})


def listen(channel: Channel, progress: RemoteProgress, spark, run_id: str, on_close) -> None:
    """The host's messages to the run (in a thread of the run's process): a cancel is passed to
    the run's code as the host would pass it (the job group cancelled, RunInterrupted raised, again
    until the code has stopped); the host's end ends the process (`on_close`)."""
    try:
        while True:
            message = channel.receive()
            if (
                message.get("kind") == "cancel"
                and not progress.cancel_requested
                and progress.request_cancel()
            ):
                threading.Thread(
                    target=_keep_cancelling, args=(progress, spark, run_id), daemon=True
                ).start()
            elif message.get("kind") == "completing":
                progress.answer(bool(message.get("completes")))
    except ChannelClosed:
        on_close()


def _keep_cancelling(progress: RemoteProgress, spark, run_id: str) -> None:
    while True:
        try:
            spark.sparkContext.cancelJobGroup(run_id)
        except Exception:  # noqa: BLE001 - the session may be going; the interruption still goes on
            pass
        progress.interrupt()
        time.sleep(CANCEL_REPEAT_SECONDS)


# ------------------------------------------------------------------ the host's side
def follow(channel: Channel, run, on_binding=None) -> dict:
    """Relay the run's process's reports into `run` (compute/run/runs.py Run) until it reports its
    end, which is returned; raises ChannelClosed if it ends without. What the process says is
    checked: only these kinds, with fields of the types the host keeps."""
    while True:
        message = channel.receive()
        kind = message.get("kind")
        if kind == "steps" and isinstance(message.get("steps"), list):
            run.progress.set_steps([step for step in message["steps"] if isinstance(step, dict)])
        elif kind == "step" and isinstance(message.get("fields"), dict):
            run.progress.update_step(
                str(message.get("name")), **{str(k): v for k, v in message["fields"].items()}
            )
        elif kind == "log":
            step = message.get("step")
            run.progress.log(
                str(message.get("level")),
                None if step is None else str(step),
                str(message.get("message")),
            )
        elif kind == "completing":
            channel.send({"kind": "completing", "completes": run.progress.begin_completion()})
        elif kind == "binding" and on_binding is not None:
            on_binding(message)
        elif kind == "end" and message.get("outcome") in ("completed", "failed", "cancelled"):
            return message
