"""The worker: the one process that does Lakeport's background work (`flask --app wsgi lakeport worker`).

Web requests only record intent in the database: a PENDING or TERMINATING compute unit, a QUEUED
execution, a cancel request, a queued sample-data, maintenance or comparison job, the catalog's
part of closing a warehouse; no request waits on a unit. The worker looks for such rows every
WORKER_POLL_SECONDS, and on PostgreSQL at once when a row is added or changes state (the
database announces it: migration 0009, `WorkAnnouncements`), and does the work each asks for in
a thread of its own: starting and stopping units (and stopping what a failed unit left),
preparing, submitting and watching executions, generating sample data, maintaining datasets on
a unit; and, every WORKER_SUPERVISOR_SECONDS, the supervisor pass (dead units become FAILED,
idle ones are stopped), every USAGE_SAMPLE_SECONDS the usage pass (app/usage/work.py:
storage measured from table metadata, stored as samples that pages read), and every
SCHEDULER_SECONDS the scheduler pass (app/schedules/work.py: each schedule's due times, each
fired once), every IDENTITY_CHECK_SECONDS the identity pass (app/auth/work.py: each
active user asked about again at the identity provider), and every GRANTS_RECONCILE_SECONDS the
grants pass (app/warehouses/work.py: each warehouse's grants in Lakekeeper compared with its
shares and repaired, unused group roles deleted; one whose catalog write failed is checked at once).

What there is to do comes from the worker's registry (app/work_registry.py): each feature's
`work.py` joins it with its sources of pending work and its periodic passes, and the worker
imports those modules (`_join_the_features`) and then only iterates the registry.

Each piece of work is claimed through a lease (app/leases.py) named after it, renewed while the
work runs. Two workers never do the same work at once; a worker that dies stops renewing, and
after WORKER_LEASE_SECONDS another worker (or the same one restarted) takes its work over from
what the rows say. Adoption after a restart is nothing else: a RUNNING execution is watched again,
a STARTING unit checked, a TERMINATING one stopped.

The database going away never leaves a dead thread behind a live row: a work thread that hits
the outage ends without recording anything, the loop retries with growing pauses, and once the
database answers again the work is claimed and resumed from its row.

Local compute units started here are the worker's child processes (each leads its own session,
so they outlive a restart of the worker, which adopts them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from flask import Flask
from sqlalchemy.engine import make_url

from app import leases, work_registry
from app.db import DATABASE_UNAVAILABLE

logger = logging.getLogger(__name__)

# Pauses between attempts while the database is unavailable: doubling up to this.
MAX_BACKOFF_SECONDS = 15.0
# How long a stopping worker waits for unit starts and stops under way (its stop timeout is longer).
STOP_GRACE_SECONDS = 15.0


@dataclass
class _Work:
    name: str
    thread: threading.Thread
    lost: threading.Event = field(default_factory=threading.Event)


def _join_the_features() -> None:
    """Fill the registry (app/work_registry.py) with every kind of work the worker does: each
    feature's `work.py` joins it at import, one import line per feature here."""
    from app.auth import work as _auth_work  # noqa: F401
    from app.compute_units import work as _units_work  # noqa: F401
    from app.console import work as _console_work  # noqa: F401
    from app.executions import work as _executions_work  # noqa: F401
    from app.schedules import work as _schedules_work  # noqa: F401
    from app.usage import work as _usage_work  # noqa: F401
    from app.warehouses import work as _warehouses_work  # noqa: F401
    from app.workflows import work as _workflows_work  # noqa: F401


WORK_CHANNEL = "lakeport_work"  # what migration 0009's triggers notify


class WorkAnnouncements:
    """The pause between two passes, cut short when PostgreSQL announces work on WORK_CHANNEL.
    On SQLite, or while PostgreSQL cannot be reached, it is a plain pause."""

    def __init__(self, database_url: str, stopping: threading.Event) -> None:
        url = make_url(database_url)
        self._dsn = (
            url.set(drivername="postgresql").render_as_string(hide_password=False)
            if url.get_backend_name() == "postgresql"
            else None
        )
        self._stopping = stopping
        self._connection: psycopg.Connection | None = None

    def wait(self, timeout: float) -> None:
        if self._dsn is None or self._stopping.is_set():
            self._stopping.wait(timeout)
            return
        try:
            if self._connection is None:
                self._connection = psycopg.connect(self._dsn, autocommit=True, connect_timeout=5)
                self._connection.execute(f"LISTEN {WORK_CHANNEL}")
            # Announcements made during the last pass are waiting here already: one more pass.
            for _ in self._connection.notifies(timeout=timeout, stop_after=1):
                pass
        except psycopg.Error:
            self.close()  # listened again at the next pause
            self._stopping.wait(timeout)

    def close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(psycopg.Error):
                self._connection.close()
            self._connection = None


class Worker:
    """Claims and runs the background work of one app (one database)."""

    def __init__(self, app: Flask, worker_id: str | None = None) -> None:
        self.app = app
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.poll_seconds = app.config["WORKER_POLL_SECONDS"]
        self.lease_seconds = app.config["WORKER_LEASE_SECONDS"]
        self.stopping = threading.Event()
        self.announcements = WorkAnnouncements(app.config["DATABASE_URL"], self.stopping)
        self._work: dict[str, _Work] = {}
        self._lock = threading.Lock()
        self._loop: threading.Thread | None = None
        self._last_renewal = 0.0

        _join_the_features()
        # The periodic passes by lease, with their period (app/work_registry.py), and when each
        # comes next.
        self._passes = {
            entry.lease: (app.config[entry.period_setting], entry.run)
            for entry in work_registry.passes()
        }
        now = time.monotonic()
        self._next_pass = {
            entry.lease: now + entry.first_delay(app.config) for entry in work_registry.passes()
        }

    # --- running ------------------------------------------------------------------------------

    def run(self) -> None:
        """The loop, until `stop()`: one pass per WORKER_POLL_SECONDS or announcement, waiting out
        database outages."""
        logger.info("worker %s started", self.id)
        failures = 0
        while not self.stopping.is_set():
            try:
                with self.app.app_context():
                    self.tick()
                if failures:
                    logger.warning(
                        "worker %s: the database answers again; resuming the work", self.id
                    )
                failures = 0
                pause = self.poll_seconds
            except Exception as error:  # e.g. the schema is not migrated yet: the same patience
                failures += 1
                pause = min(MAX_BACKOFF_SECONDS, self.poll_seconds * 2**failures)
                if isinstance(error, DATABASE_UNAVAILABLE):
                    logger.warning(
                        "worker %s: database unavailable (%s); trying again in %.1f s",
                        self.id,
                        str(error).splitlines()[0][:200],
                        pause,
                    )
                else:
                    logger.exception(
                        "worker %s: pass failed; trying again in %.1f s", self.id, pause
                    )
            self.announcements.wait(pause)
        self.announcements.close()
        self._let_unit_steps_finish()
        self._release_finished(everything=True)
        logger.info("worker %s stopped", self.id)

    def start(self) -> "Worker":
        """Run the loop in a thread of this process (tests; the CLI runs it in the main thread)."""
        self._loop = threading.Thread(target=self.run, name=f"worker-{self.id}", daemon=True)
        self._loop.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        if self._loop is not None:
            self._loop.join(timeout)

    def tick(self) -> None:
        """One pass: renew held leases, release finished work, claim and start new work, and the
        periodic passes that are due."""
        self._renew()
        self._release_finished()
        for name, function, subject in work_registry.pending_work():
            if self.stopping.is_set():
                return
            with self._lock:
                if name in self._work:
                    continue
            if leases.claim(name, self.id, self.lease_seconds):
                self._begin(name, function, subject)
        for lease, (period, function) in self._passes.items():
            if time.monotonic() >= self._next_pass[lease]:
                self._next_pass[lease] = time.monotonic() + period
                self._begin_periodic(lease, function)

    # --- inside ---------------------------------------------------------------------------------

    def _begin(self, name: str, function: Callable[[int], None], subject: int) -> None:
        thread = threading.Thread(
            target=self._perform, args=(name, function, subject), name=f"work-{name}", daemon=True
        )
        with self._lock:
            self._work[name] = _Work(name, thread)
        thread.start()

    def _perform(self, name: str, function: Callable[[int], None], subject: int) -> None:
        with self._lock:
            leases.hold_in_this_thread(self._work[name])
        try:
            with self.app.app_context():
                function(subject)
        except DATABASE_UNAVAILABLE as error:
            # Nothing could be recorded: the work is picked up again once the database answers.
            logger.warning(
                "worker %s: %s paused, the database is unavailable (%s)",
                self.id,
                name,
                str(error).splitlines()[0][:200],
            )
        except Exception:
            logger.exception("worker %s: %s failed", self.id, name)

    def _let_unit_steps_finish(self) -> None:
        """On stop, give unit starts and stops a moment to finish: one cut short may leave a
        cluster that nobody has the handle of yet. Watches are simply taken over later."""
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        with self._lock:
            steps = [work.thread for name, work in self._work.items() if name.startswith("unit-")]
        for thread in steps:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _renew(self) -> None:
        if time.monotonic() - self._last_renewal < self.lease_seconds / 3:
            return
        with self._lock:
            names = [name for name, work in self._work.items() if work.thread.is_alive()]
        lost = leases.renew(names, self.id, self.lease_seconds)
        self._last_renewal = time.monotonic()
        with self._lock:
            for name in lost & self._work.keys():
                logger.warning("worker %s: %s was taken over by another worker", self.id, name)
                self._work[name].lost.set()

    def _release_finished(self, everything: bool = False) -> None:
        with self._lock:
            finished = [
                name
                for name, work in self._work.items()
                if everything or not work.thread.is_alive()
            ]
            if everything:  # what still runs stops where it can (a watch) and is taken over
                for work in self._work.values():
                    work.lost.set()
        if not finished:
            return
        try:
            with self.app.app_context():
                leases.release(finished, self.id)
        except DATABASE_UNAVAILABLE:
            return  # released next time, or they expire
        with self._lock:
            for name in finished:
                if name in self._work and (everything or not self._work[name].thread.is_alive()):
                    del self._work[name]

    def _begin_periodic(self, lease: str, function: Callable[[], None]) -> None:
        """Start a periodic pass in a thread of its own (it asks units or the catalog, which can be
        slow) unless the last one still runs; one worker at a time does it (its lease)."""
        with self._lock:
            if lease in self._work:
                return
        if leases.claim(lease, self.id, self.lease_seconds):
            self._begin(lease, lambda _nothing: function(), 0)


def run_worker(app: Flask) -> None:
    """The `lakeport worker` command: the loop in this process until SIGTERM or Ctrl-C."""
    worker = Worker(app)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: worker.stopping.set())
    worker.run()
