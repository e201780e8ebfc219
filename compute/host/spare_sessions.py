"""Warehouse sessions: a Spark session of its own per run, bound to one warehouse's catalog,
and one made ahead per warehouse so that a run does not wait for it.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from compute.host.catalog_cache import CatalogBinding
from compute.host.spark_session import close_session_catalog


class SpareSessions:
    """One warehouse session made ahead per warehouse, so that an execution does not wait for
    `warehouse_session` (a new session, its settings, the catalog's start: 30-60 ms of a warm
    run). Each session serves one execution only, so the temporary views and settings a run
    makes never reach another: a run takes the spare, and once it has ended the next spare is
    made in the background (not while the run competes for the unit's CPUs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spares: dict[str, tuple[str, Future]] = {}  # warehouse id -> (catalog name, session)
        self._maker = ThreadPoolExecutor(1, thread_name_prefix="spare-session")
        # Whether a run's end makes the next spare: in the host, yes; in a run's own forked
        # process (compute/run/forked_runs.py), which ends with the run, the spares are made before it.
        self.ahead_after_runs = True

    def take(self, spark, binding: CatalogBinding):
        """A session bound to `binding`, made current and the thread's active session."""
        with self._lock:
            catalog_name, spare = self._spares.pop(binding.warehouse_id, (None, None))
        if spare is not None and spare.done() and spare.exception() is None:
            session = spare.result()
            if catalog_name == binding.catalog_name:
                spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.setActiveSession(
                    session._jsparkSession
                )
                return session
            close_session_catalog(session, catalog_name)  # made for a binding since replaced
        return warehouse_session(spark, binding)

    def retire(self, session, catalog_name: str) -> None:
        """Close a session a run has used (its catalog's connections), in the background: the
        run's end does not wait for it, and the next spare is made after it."""
        self._maker.submit(close_session_catalog, session, catalog_name)

    def after_fork(self) -> None:
        """In a forked child: a fresh lock and maker (the host's maker thread is not in it)."""
        self._lock = threading.Lock()
        self._maker = ThreadPoolExecutor(1, thread_name_prefix="spare-session")
        self.ahead_after_runs = False

    def release(self) -> None:
        """Close every spare not taken and wait for the sessions being retired (a forked run's end)."""
        with self._lock:
            spares, self._spares = list(self._spares.values()), {}
        for catalog_name, spare in spares:
            self._maker.submit(
                lambda name=catalog_name, made=spare: (
                    close_session_catalog(made.result(), name) if made.exception() is None else None
                )
            )
        self._maker.shutdown(wait=True)

    def make_ahead(self, spark, binding: CatalogBinding) -> None:
        with self._lock:
            self._spares[binding.warehouse_id] = (
                binding.catalog_name,
                self._maker.submit(_spare, spark, binding),
            )


def _spare(spark, binding: CatalogBinding):
    session = warehouse_session(spark, binding)
    spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.clearActiveSession()  # of this maker thread
    return session


def warehouse_session(spark, binding: CatalogBinding):
    """A Spark session of its own (same SparkContext) whose one catalog is `binding`, made current
    and the thread's active session (clear it when done)."""
    session = spark.newSession()
    for key, value in binding.conf.items():
        session.conf.set(key, value)
    # Iceberg reads a catalog's Hadoop overrides from the thread's active session, when the
    # catalog is first used: here, by making it current.
    spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.setActiveSession(
        session._jsparkSession
    )
    session.catalog.setCurrentCatalog(binding.catalog_name)
    return session


SESSIONS = SpareSessions()
