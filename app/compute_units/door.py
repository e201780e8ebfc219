"""The portal's one door to a compute unit: every call that runs something on a unit's Spark
host goes through here, for executions (app/executions/work.py), comparisons and dataset
maintenance alike. Callers never reach the unit's cluster backend or its lifecycle themselves.

A door is one object per unit (`UnitDoor`), built once: the unit's row, its cluster's handle with
its secrets restored, and one client of its Spark host, closed with the door (it is a context
manager). It is opened on a RUNNING unit (`UnitDoor.running`), on the first of several whose host
answers ready (`UnitDoor.first_ready`), or on any unit with a cluster to pass a cancel to
(`UnitDoor.of_unit`). Through it: `make_ready` (its Spark session warm), `submit(spec)` (the
typed ExecutionSpec, serialized only by the transport), `watch` (the run's record, answered as
soon as the run ends), `cancel`, `touch` (the unit is busy: its idle clock goes back), `usage`
and `over_limit` (its kernel limits), `failure` (why it cannot run anything any more), and
`run_to_end` for one-off jobs without a watcher.

Beside the unit, a run takes a catalog token acting as its user for one warehouse (`run_token`)
and the binding the unit reaches the catalog with (`catalog_binding`). What goes wrong is said in
the errors here, each with a message for the unit's owner: `UnitUnavailable`, `NoCatalogToken`,
`RunNotCompleted`, and the transport's `SparkHostError`.

Only the worker calls through this door: requests record what they want (app/worker.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from flask import current_app

from app.compute_units import handles, service, supervision
from app.db import get_db
from app.extensions import lakekeeper
from app.lakekeeper.errors import LakekeeperError
from app.models import ComputeUnit, UnitState, User, Warehouse
from app.ray_clusters.base import ClusterHandle, ProgressCallback, no_progress
from app.ray_clusters.unit_limits import LimitUsage
from app.spark_host import warmup
from app.spark_host.client import SparkHostClient, SparkHostError
from app.untrusted import clean_text
from compute.contract import ACCESS_DELEGATION, ExecutionSpec, JobKind, RunState

__all__ = [
    "HOST_CALL_TIMEOUT_SECONDS",
    "NoCatalogToken",
    "RunNotCompleted",
    "SparkHostError",
    "UnitDoor",
    "UnitUnavailable",
    "catalog_binding",
    "failure_reason",
    "run_token",
    "unit_failure",
]

logger = logging.getLogger(__name__)

HOST_CALL_TIMEOUT_SECONDS = warmup.HOST_CALL_TIMEOUT_SECONDS


class UnitUnavailable(Exception):
    """The unit cannot take a run: it stopped, it has no Spark host, its host did not start."""


class NoCatalogToken(Exception):
    """The catalog gave no token for the run; the message says why, for its user."""


class RunNotCompleted(Exception):
    """A run the caller waited for ended otherwise than COMPLETED, or was not taken."""


# --- The catalog side of a run ---------------------------------------------------------------


def run_token(warehouse: Warehouse, user: User) -> str:
    """A short-lived catalog token acting as `user`, for this one warehouse: the catalog
    attributes the run's calls to that user and allows what their grants allow, never the
    portal's service identity."""
    try:
        return lakekeeper().user_token(user.subject, warehouse.lakekeeper_id).access_token
    except LakekeeperError as error:
        raise NoCatalogToken(f"no catalog token for the run: {error.user_message}") from None


def catalog_binding(warehouse: Warehouse, token: str) -> dict:
    """How a unit reaches `warehouse` through the catalog with `token` (see run_token)."""
    config = current_app.config
    project_id = config["LAKEKEEPER_PROJECT_ID"]
    return {
        "uri": f"{config['LAKEKEEPER_URL'].rstrip('/')}/catalog",
        # Lakekeeper resolves `<project>/<name>` in a project other than its default one.
        "warehouse": f"{project_id}/{warehouse.lakekeeper_name}"
        if project_id
        else warehouse.lakekeeper_name,
        "token": token,
        "access_delegation": ACCESS_DELEGATION,
    }


# --- The unit side ------------------------------------------------------------------------


def unit_failure(cu_id: int | None) -> str | None:
    """Why the unit cannot run anything any more (checked against its cluster), or None."""
    db = get_db()
    db.expire_all()
    cu = db.get(ComputeUnit, cu_id) if cu_id is not None else None
    if cu is None:
        return "the compute unit stopped: it was deleted"
    if cu.state == UnitState.RUNNING:
        try:
            supervision.refresh(cu)  # a dead cluster becomes FAILED with its reason
        except Exception:
            logger.exception("checking compute unit %s failed", cu_id)
    if cu.state != UnitState.RUNNING:
        return f"the compute unit stopped: {cu.reason or cu.state.lower()}"
    return None


class UnitDoor:
    """One unit's door: its row, its cluster's handle and one client of its Spark host."""

    def __init__(self, cu: ComputeUnit, handle: ClusterHandle) -> None:
        self.cu = cu
        self.handle = handle
        self._client = SparkHostClient(handle, timeout=HOST_CALL_TIMEOUT_SECONDS)

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    def running(cls, cu_id: int | None) -> UnitDoor:
        """The door of a unit whose row says RUNNING. Its cluster is not asked (that costs a call
        to Ray's dashboard): a dead unit shows when its host does not answer, and then `failure`
        says why. Raises UnitUnavailable."""
        db = get_db()
        db.expire_all()
        cu = db.get(ComputeUnit, cu_id) if cu_id is not None else None
        if cu is None:
            raise UnitUnavailable("the compute unit stopped: it was deleted")
        if cu.state != UnitState.RUNNING:
            raise UnitUnavailable(f"the compute unit stopped: {cu.reason or cu.state.lower()}")
        handle = handles.handle_of(cu)
        if handle is None or not handle.spark_host_url:
            raise UnitUnavailable("the compute unit has no Spark host address")
        return cls(cu, handle)

    @classmethod
    def of_unit(cls, cu_id: int | None) -> UnitDoor:
        """The door of a unit in whatever state, as long as it has a cluster (to pass a cancel
        on). Raises LookupError when the unit or its cluster is gone."""
        cu = get_db().get(ComputeUnit, cu_id) if cu_id is not None else None
        handle = handles.handle_of(cu) if cu is not None else None
        if handle is None:
            raise LookupError("the compute unit is gone")
        return cls(cu, handle)

    @classmethod
    def first_ready(cls, units: Iterable[ComputeUnit]) -> UnitDoor | None:
        """The door of the first of `units` whose Spark host answers ready, or None."""
        for cu in units:
            handle = handles.handle_of(cu)
            if handle is None or not handle.spark_host_url:
                continue
            door = cls(cu, handle)
            try:
                if door.info().get("state") == "ready":
                    return door
            except SparkHostError:
                pass
            door.close()
        return None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> UnitDoor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- its Spark host ---------------------------------------------------------------------

    def ready_app(self) -> str | None:
        """The Spark application id of the unit's host if this process found it ready before
        (it is not asked again), else None."""
        return warmup.ready_app(self.cu.id, self.handle)

    def forget_ready(self) -> None:
        """Ask the host again before the next run: it did not take one."""
        warmup.forget_ready(self.cu.id)

    def make_ready(self, progress: ProgressCallback = no_progress) -> None:
        """The unit's Spark session is warm (the first run on a unit may wait for it to start, and
        `progress` says so). Raises UnitUnavailable."""
        try:
            warmup.ensure_warm(
                self.cu, self.handle, handles.backend_of(self.cu), progress, for_a_run=True
            )
        except warmup.SparkHostUnavailable as error:
            raise UnitUnavailable(self.failure() or str(error)) from None

    def info(self) -> dict:
        """What the host says of itself; raises SparkHostError."""
        return self._client.info()

    # --- runs -------------------------------------------------------------------------------

    def submit(self, spec: ExecutionSpec) -> str:
        """Hand an execution's spec to the unit's host; the run's id. Raises SparkHostError."""
        return self._client.submit(
            JobKind.EXECUTION, spec.to_json(), name=f"execution-{spec.execution_id}"
        )["run_id"]

    def submit_job(self, kind: JobKind, args: dict, name: str) -> str:
        """Hand a job of another kind (a console query) to the unit's host; the run's id. Raises
        SparkHostError."""
        return self._client.submit(kind, args, name=name)["run_id"]

    def watch(self, run_id: str, wait_s: float) -> dict:
        """The run's record, answered as soon as the run ends or after `wait_s` seconds. Raises
        SparkHostError."""
        return self._client.run(run_id, wait_s=wait_s)

    def cancel(self, run_id: str) -> dict:
        """Ask the unit to cancel run `run_id`; the run as the unit answers. Raises
        SparkHostError when it does not answer."""
        return self._client.cancel(run_id)

    def run_to_end(self, kind: JobKind, args: dict, name: str, timeout_s: float) -> dict:
        """Run a job of `kind` with `args` on the unit and wait (at most `timeout_s`) for its
        result: for one-off jobs (a comparison, maintenance), which have no watcher. Raises
        UnitUnavailable, or RunNotCompleted with the unit's reason."""
        self.make_ready()
        try:
            run_id = self._client.submit(kind, args, name=name)["run_id"]
            run = self._client.wait(run_id, timeout_s=timeout_s)
        except SparkHostError as error:
            raise RunNotCompleted(f"the compute unit did not run it: {error}") from None
        if run["state"] != RunState.COMPLETED:
            raise RunNotCompleted(
                failure_reason(run.get("error")) if run.get("error") else run["state"].lower()
            )
        result = run.get("result")
        return result if isinstance(result, dict) else {}

    # --- the unit ---------------------------------------------------------------------------

    def touch(self) -> None:
        """The unit is busy: push its idle timeout back."""
        service.touch(self.cu.id)

    def usage(self) -> LimitUsage | None:
        """What the unit uses against its kernel limits now (None for kinds without them)."""
        return handles.backend_of(self.cu).limit_usage(self.handle)

    def over_limit(self, before: LimitUsage | None) -> str | None:
        """Which kernel limit the unit went over since `before`, in words, or None."""
        return handles.backend_of(self.cu).over_limit(self.handle, before)

    def failure(self) -> str | None:
        """Why the unit cannot run anything any more (checked against its cluster), or None."""
        return unit_failure(self.cu.id)


def failure_reason(error: object) -> str:
    """The reason to show for a failed run: the unit's own message, or the last line of a
    traceback (the exception); cleaned, since users' code wrote it."""
    error = clean_text(error or "", 64 * 1024).strip()
    if error.startswith("Traceback"):
        error = error.splitlines()[-1]
    return error or "the run failed without saying why"
