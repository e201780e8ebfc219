"""Child processes of the local stack: start, wait until ready, stop cleanly.

Every service the local stack runs (SeaweedFS, the OpenID Connect provider, the
Lakekeeper-compatible dev catalog, the portal) is a `ManagedProcess`. Output goes to a
log file so a failed start can be explained with the tail of that log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from app.ports import free_port, port_is_open  # noqa: F401  (re-exported for the stack and tests)


class ServiceStartError(RuntimeError):
    """A service did not become ready; the message carries the tail of its log."""


def http_ok(url: str, expect: Callable[[httpx.Response], bool] | None = None) -> Callable[[], bool]:
    """A readiness probe: the URL answers (2xx, or whatever `expect` accepts)."""

    def probe() -> bool:
        try:
            response = httpx.get(url, timeout=1.0)
        except httpx.HTTPError:
            return False
        return expect(response) if expect else response.is_success

    return probe


class ManagedProcess:
    """One child process with a log file, a readiness probe and a clean stop."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        log_dir: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        ready: Callable[[], bool] | None = None,
        stop_timeout: float = 10.0,
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.ready = ready
        self.stop_timeout = stop_timeout
        self.log_path = Path(log_dir) / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> "ManagedProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        # A new session, so Ctrl-C in the terminal reaches only the orchestrator,
        # which then stops each child in order.
        self.process = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise ServiceStartError(
                    f"{self.name} exited with code {self.process.returncode} while starting:\n{self.log_tail()}"
                )
            if self.ready is None or self.ready():
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceStartError(
                    f"{self.name} was not ready within {timeout:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if not self.running:
            return
        assert self.process is not None
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
