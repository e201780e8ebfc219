"""A run on a unit's Spark host: its states, the progress it publishes, and how a cancel
interrupts it (compute/host/spark_host.py keeps the run table; compute/run/pipeline.py reports through
`RunProgress`).
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from compute.contract import JobKind, RunState

# The log lines a run's progress shows (its whole log is the pipeline's console_logs table).
LOG_LINES_SHOWN = 200


class RunFailed(Exception):
    """Raised by an execution's code that has already explained (in its progress log) what
    went wrong: the run's error is this message alone, without a traceback."""


class RunInterrupted(BaseException):
    """Raised in a run's thread, inside `RunProgress.interruptible()`, when the run is cancelled:
    it stops Python code that runs no Spark job (a loop, a sleep). A BaseException, so that
    user code's `except Exception` does not swallow it."""


class RunProgress:
    """What a running execution publishes for its watchers: its steps, a tail of its log,
    and whether it was asked to stop. Written by the execution's thread, read by status calls.

    Cancelling and completing are one decision, taken under `_lock`: once the run has begun to
    complete (`begin_completion`, before it marks anything complete) a cancel is refused, and
    once a cancel is accepted the run can no longer complete."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: list[dict] = []
        self._logs: deque[dict] = deque(maxlen=LOG_LINES_SHOWN)
        self._cancel = threading.Event()
        self._completing = False
        self._interruptible_thread: int | None = None  # the thread inside interruptible(), if any

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    @property
    def completing(self) -> bool:
        return self._completing

    def request_cancel(self) -> bool:
        """Accept a cancel, unless the run has begun to complete; True if accepted (now or before)."""
        with self._lock:
            if self._completing:
                return False
            self._cancel.set()
            return True

    def begin_completion(self) -> bool:
        """Decide that the run completes, unless it was cancelled; True if it completes."""
        with self._lock:
            if not self._cancel.is_set():
                self._completing = True
            return self._completing

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """Code the run may be interrupted in once cancelled (RunInterrupted is raised in it).
        Outside this block, the run's own bookkeeping (dropping tables, writing logs) is never
        interrupted."""
        install_interruptible_sleep()
        try:
            with self._lock:
                if self._cancel.is_set():
                    raise RunInterrupted()
                self._interruptible_thread = threading.get_ident()
            _interruptible.progress = self
            yield
        finally:
            # Stop being interruptible and withdraw an interruption not raised yet, under the
            # lock `interrupt` takes; one raised meanwhile is caught and this tried again.
            while True:
                try:
                    with self._lock:
                        self._interruptible_thread = None
                        _set_async_exception(threading.get_ident(), None)
                    _interruptible.progress = None
                    break
                except RunInterrupted:
                    pass

    def interrupt(self) -> bool:
        """Raise RunInterrupted in the run's thread if it runs interruptible Python code now (not
        a call into the JVM: the job group's cancel ends that one cleanly). True if raised."""
        with self._lock:
            thread = self._interruptible_thread
            if thread is None or not self._cancel.is_set() or _in_jvm_call(thread):
                return False
            return _set_async_exception(thread, RunInterrupted)

    def set_steps(self, steps: list[dict]) -> None:
        with self._lock:
            self._steps = [dict(step) for step in steps]

    def update_step(self, name: str, **fields: Any) -> None:
        with self._lock:
            for step in self._steps:
                if step["name"] == name:
                    step.update(fields)

    def log(self, level: str, step: str | None, message: str) -> None:
        with self._lock:
            self._logs.append({"ts": time.time(), "level": level, "step": step, "message": message})

    def public(self) -> dict:
        with self._lock:
            return {"steps": [dict(step) for step in self._steps], "logs": list(self._logs)}


@dataclass
class Run:
    run_id: str
    name: str
    kind: JobKind
    args: dict
    state: str = RunState.QUEUED
    submitted_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    result: Any = None
    progress: RunProgress = field(default_factory=RunProgress)
    finished: threading.Event = field(default_factory=threading.Event, repr=False)
    # The process the run's code runs in, when not the host's own (compute/run/forked_runs.py,
    # compute/run/sandboxed_runs.py): it takes a cancel and is ended with the run.
    process: Any = field(default=None, repr=False)

    @property
    def cancel_requested(self) -> bool:
        return self.progress.cancel_requested

    def public(self) -> dict:
        return {
            "run_id": self.run_id,
            "name": self.name,
            "state": self.state,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
            "result": self.result,
            "progress": self.progress.public(),
            # Whether a cancel was accepted, and whether the run has begun to complete (a cancel
            # is then refused): a canceller learns which one won.
            "cancel_requested": self.cancel_requested,
            "completing": self.progress.completing,
        }


# The run whose interruptible code the current thread runs (see RunProgress.interruptible).
_interruptible = threading.local()
_sleep_lock = threading.Lock()


def install_interruptible_sleep() -> None:
    """`time.sleep` in interruptible code waits for its run's cancel instead, and raises
    RunInterrupted when it comes: a blocked sleep never sees an interruption raised in its
    thread. Every other thread sleeps as before."""
    with _sleep_lock:
        if getattr(time.sleep, "lakeport_interruptible", False):
            return
        original = time.sleep

        def sleep(seconds: float) -> None:
            progress = getattr(_interruptible, "progress", None)
            if progress is None:
                return original(seconds)
            if progress._cancel.wait(seconds):
                raise RunInterrupted()
            return None

        sleep.lakeport_interruptible = True
        time.sleep = sleep


def _set_async_exception(thread_id: int, exception: type[BaseException] | None) -> bool:
    """Raise `exception` in that thread at its next Python instruction (None withdraws one not
    raised yet)."""
    return (
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread_id), ctypes.py_object(exception) if exception else None
        )
        == 1
    )


def _in_jvm_call(thread_id: int) -> bool:
    """Whether that thread waits for the JVM (py4j) right now."""
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if "/py4j/" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def jsonable(value: Any) -> Any:
    """A run's result as JSON carries it: the value itself, or its repr when JSON cannot hold it."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)
