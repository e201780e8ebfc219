"""An execution's console log: what its steps print and warn, routed per thread into the
execution's log (kept whole for `console_logs`, its tail shown in the run's progress).
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from contextlib import contextmanager

from compute.run.runs import RunProgress

# Bounds on what one execution's console log keeps in memory.
LOG_LINES_KEPT = 20_000
LOG_MESSAGE_CHARS = 20_000


class ExecutionLog:
    """Everything an execution logs: kept whole for `console_logs`, its tail shown in progress."""

    def __init__(self, progress: RunProgress) -> None:
        self.progress = progress
        self.entries: list[dict] = []
        self._lock = threading.Lock()

    def __call__(self, level: str, step: str | None, message: str) -> None:
        message = (
            message if len(message) <= LOG_MESSAGE_CHARS else message[:LOG_MESSAGE_CHARS] + " [cut]"
        )
        with self._lock:
            if len(self.entries) < LOG_LINES_KEPT:
                self.entries.append(
                    {"ts": time.time(), "level": level, "step": step, "message": message}
                )
            elif len(self.entries) == LOG_LINES_KEPT:
                self.entries.append(
                    {
                        "ts": time.time(),
                        "level": "WARN",
                        "step": step,
                        "message": f"log cut after {LOG_LINES_KEPT} lines",
                    }
                )
        self.progress.log(level, step, message)


class _LineSink:
    """Collects what a step writes to stdout/stderr and logs it line by line."""

    def __init__(self, log: ExecutionLog, step: str, level: str) -> None:
        self.log, self.step, self.level, self._pending = log, step, level, ""

    def write(self, text: str) -> None:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self.log(self.level, self.step, line)

    def close(self) -> None:
        if self._pending:
            self.log(self.level, self.step, self._pending)
            self._pending = ""


_capture = threading.local()
_install_lock = threading.Lock()


class _ThreadRoutedStream:
    """sys.stdout/sys.stderr of the Spark host: a thread running a step writes to that step's
    log, every other thread to the original stream. Executions run side by side in threads,
    so swapping sys.stdout per execution would mix their output."""

    def __init__(self, original, attribute: str) -> None:
        self._original, self._attribute = original, attribute

    def write(self, text: str) -> int:
        sink = getattr(_capture, self._attribute, None)
        if sink is None:
            return self._original.write(text)
        sink.write(text)
        return len(text)

    def flush(self) -> None:
        self._original.flush()

    def __getattr__(self, name: str):
        return getattr(self._original, name)


def _install_routing() -> None:
    with _install_lock:
        if not isinstance(sys.stdout, _ThreadRoutedStream):
            sys.stdout = _ThreadRoutedStream(sys.stdout, "stdout")
        if not isinstance(sys.stderr, _ThreadRoutedStream):
            sys.stderr = _ThreadRoutedStream(sys.stderr, "stderr")
        if not getattr(warnings.showwarning, "lakeport_routed", False):
            original = warnings.showwarning

            def showwarning(message, category, filename, lineno, file=None, line=None):
                sink = getattr(_capture, "stderr", None)
                if sink is None:
                    return original(message, category, filename, lineno, file, line)
                sink.log("WARN", sink.step, f"{category.__name__}: {message} ({filename}:{lineno})")

            showwarning.lakeport_routed = True
            warnings.showwarning = showwarning


@contextmanager
def captured(log: ExecutionLog, step: str):
    _install_routing()
    _capture.stdout, _capture.stderr = _LineSink(log, step, "INFO"), _LineSink(log, step, "WARN")
    try:
        yield
    finally:
        _capture.stdout.close()
        _capture.stderr.close()
        _capture.stdout = _capture.stderr = None
