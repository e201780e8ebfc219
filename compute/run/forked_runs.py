"""The unit owner's own runs: each in a child forked from the warm Spark host, ended with the run.

A run's Python (its steps' code) would otherwise run in a thread of the host, so what one run
patches (a module, a global, `time.sleep`), the threads it leaves and what it keeps would be there
for the owner's next run. Forked, a run starts from the warm host's state (its imports, its
session, its warehouses' catalog bindings) and everything it changes ends with its process.

- The child talks to the same warm JVM through a py4j connection of its own: right after the fork
  it drops the host's connections from its copy of the gateway's client (the sockets are shared
  with the host, whose thread may be using them: a child must never write to them, nor shut them
  down) and py4j's finalizer queue, whose worker thread a child does not have. The JVM objects it
  made itself are released before it ends (`_release`): only those, told apart by py4j's object
  ids, which grow (everything the host made before the fork has a lower one).
- It never uses Ray (the host's Ray worker threads do not exist in it) and ends with `os._exit`:
  no atexit hook of Ray's or of the host's runs in it.
- Fork cost stays off the warm path: one child is forked ahead (`ForkedRuns.refill`, after a run
  ended, when the catalog binding it made is the host's too), connects to the JVM and makes its
  warehouse sessions ahead (compute/host/spare_sessions.py), writes a run's two records once to a
  local directory (compute/run/record_tables.py `warm_the_record_path`: pyiceberg's first use in
  a process, which the run's end paid before), then waits for a run.
- The run's progress, its end and the decision to complete (under the host's lock that a cancel
  takes) go through compute/run/run_channel.py; a cancel is passed to the child, which cancels its job
  group and interrupts its code as the host did, and the host cancels the job group too.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from compute.run.run_channel import Channel, ChannelClosed, RemoteProgress, execute, listen
from compute.third_party_patches import fresh_py4j_client_after_fork

# How long a child that reported its end may take to release its JVM objects and exit by itself.
EXIT_GRACE_S = 10.0


class ForkedRun:
    """One forked child, seen from the host."""

    def __init__(self, pid: int, channel: Channel) -> None:
        self.pid, self.channel = pid, channel
        self._ended = False

    def cancel(self) -> None:
        try:
            self.channel.send({"kind": "cancel"})
        except OSError:
            pass

    def alive(self) -> bool:
        if self._ended:
            return False
        try:
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                return True
        except ChildProcessError:
            pass
        self._ended = (
            True  # reaped (or not ours to reap): its pid may be another process's from now on
        )
        return False

    def end(self, grace_s: float = 0.0) -> None:
        """Let the child end by itself for `grace_s`, then kill it; reap it either way."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.02)
        if not self._ended:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self._ended = True
        self.channel.close()


class ForkedRuns:
    """Forks the host's run children, one ahead."""

    def __init__(self, spark) -> None:
        self._spark = spark
        self._lock = threading.Lock()
        self._spare: ForkedRun | None = None
        self._forking = ThreadPoolExecutor(1, thread_name_prefix="fork-ahead")
        self._stopped = False

    def take(self) -> ForkedRun:
        """The child forked ahead if there is one, else one forked now."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None and spare.alive():
            return spare
        if spare is not None:
            spare.end()
        return self._fork()

    def refill(self, after_s: float = 0.0) -> None:
        """Fork the next run's child in the background, `after_s` from now (when there is none
        ahead by then; a run that comes first forks its own)."""
        self._forking.submit(self._refill, after_s)

    def _refill(self, after_s: float) -> None:
        time.sleep(after_s)
        with self._lock:
            if self._spare is not None or self._stopped:
                return
        child = self._fork()
        with self._lock:
            if self._spare is None and not self._stopped:
                self._spare, child = child, None
        if child is not None:
            child.end()

    def renew_spare(self) -> None:
        """End the child forked ahead and fork another: a child holds the host as it was when it
        was forked, so a change to the host's state (a setting) reaches the next run only so."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare.end()
        self.refill()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            spare, self._spare = self._spare, None
        if spare is not None:
            spare.end()

    def _fork(self) -> ForkedRun:
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the host's code
            try:
                ours.close()
                _child(self._spark, theirs)
            finally:
                os._exit(1)
        theirs.close()
        return ForkedRun(pid, Channel(ours))


# ------------------------------------------------------------------ in the child
def _child(spark, sock: socket.socket) -> None:
    from compute.host.spare_sessions import SESSIONS
    from compute.run.pipeline import CATALOGS
    from compute.run.record_tables import warm_the_record_path

    # What the host made stays out of this process's collections: its JVM objects are the host's.
    gc.freeze()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, signal.SIG_DFL)
    _detach_inherited_descriptors(keep={0, 1, 2, sock.fileno()})
    fresh_py4j_client_after_fork(spark)
    _fresh_unit_state(CATALOGS, SESSIONS)
    channel = Channel(sock)
    floor = _object_id_floor(spark)  # also this child's own connection to the JVM, made ahead
    inherited = CATALOGS.bindings()
    for binding in CATALOGS.current_bindings():
        SESSIONS.make_ahead(spark, binding)
    if not select.select([sock], [], [], 0)[0]:  # forked ahead: no run is waiting for it yet
        warm_the_record_path()  # the records' first write in this process, off the run's path
    try:
        run = channel.receive()
    except ChannelClosed:
        os._exit(0)
    progress = RemoteProgress(channel)
    threading.Thread(
        target=listen,
        args=(channel, progress, spark, run["run_id"], lambda: os._exit(1)),
        name="host-messages",
        daemon=True,
    ).start()
    execute(
        channel,
        spark,
        run,
        progress,
        before_end=lambda: _report_bindings(channel, CATALOGS, inherited),
    )
    SESSIONS.release()
    _release(spark, floor)
    os._exit(0)


def _detach_inherited_descriptors(keep: set[int]) -> None:
    """Every descriptor the host had open at the fork (its HTTP connections, py4j's sockets, Ray's,
    the JVM's stdin pipe) becomes /dev/null here: a connection the host closes is closed (a child
    holding its copy would keep it open), and nothing here can write into the host's. The numbers
    stay taken, so an inherited Python object that closes its descriptor closes /dev/null's copy."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd not in keep and fd != null:
                try:
                    os.dup2(null, fd, inheritable=False)
                except OSError:
                    pass
    except OSError:
        pass  # no /proc: the descriptors stay as inherited
    finally:
        os.close(null)


def _fresh_unit_state(catalogs, sessions) -> None:
    """Locks and thread pools the host's threads used: in a child they may be held, and a pool's
    threads are not there (a task submitted to it would wait for ever)."""
    import compute.run.iceberg_rest as iceberg_rest

    catalogs.after_fork()
    sessions.after_fork()
    iceberg_rest._UPLOADS = ThreadPoolExecutor(6, thread_name_prefix="iceberg-upload")


def _object_id_floor(spark) -> int:
    """py4j numbers the JVM objects it hands out in order: this child's start on that count."""
    return _object_number(spark._jvm.java.util.ArrayList()._target_id) or 0


def _object_number(target_id: str) -> int | None:
    return int(target_id[1:]) if target_id[:1] == "o" and target_id[1:].isdigit() else None


def _report_bindings(channel: Channel, catalogs, inherited: dict) -> None:
    """The warehouse bindings this run made, for the host's cache (the next run's child has them)."""
    for warehouse_id, binding in catalogs.bindings().items():
        if inherited.get(warehouse_id) is not binding:
            channel.send(
                {
                    "kind": "binding",
                    "warehouse_id": warehouse_id,
                    "catalog_name": binding.catalog_name,
                    "conf": dict(binding.conf),
                    "expires_at": binding.expires_at,
                    "version": catalogs.version(warehouse_id),
                }
            )


def _release(spark, floor: int) -> None:
    """Release the JVM objects this child made (the run's sessions, frames, plans): what py4j's
    finalizer thread would have told the JVM in the host. Objects the host made are left alone."""
    gc.collect()
    client = spark.sparkContext._gateway._gateway_client
    while True:
        try:
            _, target_id = client.finalizer_deque.pop()
        except IndexError:
            return
        except ValueError:
            continue
        number = _object_number(str(target_id))
        if number is not None and number >= floor:
            try:
                client.garbage_collect_object(target_id, False)
            except Exception:  # noqa: BLE001 - the JVM's side may be gone; the process ends anyway
                return
