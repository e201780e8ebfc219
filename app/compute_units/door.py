"""The portal's one door to a compute unit: every call that runs something on a unit's Spark
host goes through here, for executions (app/executions/runner.py), comparisons and dataset
maintenance alike.

A run on a unit takes the same five things whoever asks: the unit's running host (`running_host`),
made ready (`make_ready`); a catalog token acting as the run's user for one warehouse
(`run_token`) and the binding the unit reaches the catalog with (`catalog_binding`); the submit;
then a watch, a wait (`run_to_end`) or a cancel. What goes wrong is said in the errors here,
each with a message for the unit's owner: `UnitUnavailable`, `NoCatalogToken`, `RunNotCompleted`,
and the transport's `SparkHostError`.

Only the worker calls through this door: requests record what they want (app/worker.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from flask import current_app

from app.compute_units import lifecycle
from app.compute_units.backends import backend_for
from app.db import get_db
from app.extensions import lakekeeper
from app.lakekeeper.errors import LakekeeperError
from app.models import ComputeUnit, User, Warehouse
from app.ray_clusters.base import ClusterHandle, ProgressCallback, no_progress
from app.spark_host import warmup
from app.spark_host.client import SparkHostClient, SparkHostError
from app.states import UnitState
from app.untrusted import clean_text
from compute.contract import ACCESS_DELEGATION, RunState

__all__ = [
    "HOST_CALL_TIMEOUT_SECONDS",
    "NoCatalogToken",
    "RunNotCompleted",
    "SparkHostClient",
    "SparkHostError",
    "UnitUnavailable",
    "REASON_LIMIT",
    "cancel",
    "catalog_binding",
    "failure_reason",
    "first_ready_host",
    "forget_ready",
    "make_ready",
    "ready_app",
    "run_to_end",
    "run_token",
    "running_host",
    "submit",
    "unit_failure",
    "watching",
]

logger = logging.getLogger(__name__)

HOST_CALL_TIMEOUT_SECONDS = warmup.HOST_CALL_TIMEOUT_SECONDS
# The longest reason a row holds (the executions' and jobs' reason columns).
REASON_LIMIT = 2000
ready_app = warmup.ready_app
forget_ready = warmup.forget_ready


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
            lifecycle.refresh(cu)  # a dead cluster becomes FAILED with its reason
        except Exception:
            logger.exception("checking compute unit %s failed", cu_id)
    if cu.state != UnitState.RUNNING:
        return f"the compute unit stopped: {cu.reason or cu.state.lower()}"
    return None


def running_host(cu_id: int | None) -> tuple[ComputeUnit, ClusterHandle]:
    """The unit and its cluster's handle, if its row says RUNNING. Its cluster is not asked (that
    costs a call to Ray's dashboard): a dead unit shows when its host does not answer, and then
    `unit_failure` says why. Raises UnitUnavailable."""
    db = get_db()
    db.expire_all()
    cu = db.get(ComputeUnit, cu_id) if cu_id is not None else None
    if cu is None:
        raise UnitUnavailable("the compute unit stopped: it was deleted")
    if cu.state != UnitState.RUNNING:
        raise UnitUnavailable(f"the compute unit stopped: {cu.reason or cu.state.lower()}")
    handle = lifecycle.handle_of(cu)
    if handle is None or not handle.spark_host_url:
        raise UnitUnavailable("the compute unit has no Spark host address")
    return cu, handle


def make_ready(
    cu: ComputeUnit, handle: ClusterHandle, progress: ProgressCallback = no_progress
) -> None:
    """The unit's Spark session is warm (the first run on a unit may wait for it to start, and
    `progress` says so). Raises UnitUnavailable."""
    try:
        warmup.ensure_warm(
            cu, handle, backend_for(cu.kind, current_app.config), progress, for_a_run=True
        )
    except warmup.SparkHostUnavailable as error:
        raise UnitUnavailable(unit_failure(cu.id) or str(error)) from None


def first_ready_host(units: Iterable[ComputeUnit]) -> tuple[ComputeUnit, ClusterHandle] | None:
    """The first of `units` whose Spark host answers ready, with its handle, or None."""
    for cu in units:
        handle = lifecycle.handle_of(cu)
        if handle is None or not handle.spark_host_url:
            continue
        try:
            with SparkHostClient(handle, timeout=HOST_CALL_TIMEOUT_SECONDS) as client:
                if client.info().get("state") == "ready":
                    return cu, handle
        except SparkHostError:
            continue
    return None


# --- Runs ------------------------------------------------------------------------------


def submit(handle: ClusterHandle, code: str, args: dict, name: str) -> str:
    """Hand `code` with `args` to the unit's host; the run's id. Raises SparkHostError."""
    with SparkHostClient(handle, timeout=HOST_CALL_TIMEOUT_SECONDS) as client:
        return client.submit(code, args, name=name)["run_id"]


def watching(handle: ClusterHandle) -> SparkHostClient:
    """A connection to the unit's host for a watcher's loop (`run`, `info`, `cancel`); close it
    (it is a context manager)."""
    return SparkHostClient(handle, timeout=HOST_CALL_TIMEOUT_SECONDS)


def cancel(cu_id: int | None, run_id: str) -> dict:
    """Ask the unit to cancel run `run_id`; the run as the unit answers. Raises LookupError when
    the unit is gone and SparkHostError when it does not answer."""
    cu = get_db().get(ComputeUnit, cu_id) if cu_id is not None else None
    handle = lifecycle.handle_of(cu) if cu is not None else None
    if handle is None:
        raise LookupError("the compute unit is gone")
    with SparkHostClient(handle, timeout=HOST_CALL_TIMEOUT_SECONDS) as client:
        return client.cancel(run_id)


def run_to_end(
    cu: ComputeUnit, handle: ClusterHandle, code: str, args: dict, name: str, timeout_s: float
) -> dict:
    """Run `code` on the unit and wait (at most `timeout_s`) for its result: for one-off jobs,
    which have no watcher. Raises UnitUnavailable, or RunNotCompleted with the unit's reason."""
    make_ready(cu, handle)
    try:
        with SparkHostClient(handle, timeout=HOST_CALL_TIMEOUT_SECONDS) as client:
            run = client.wait(client.submit(code, args, name=name)["run_id"], timeout_s=timeout_s)
    except SparkHostError as error:
        raise RunNotCompleted(f"the compute unit did not run it: {error}") from None
    if run["state"] != RunState.COMPLETED:
        raise RunNotCompleted(
            failure_reason(run.get("error")) if run.get("error") else run["state"].lower()
        )
    result = run.get("result")
    return result if isinstance(result, dict) else {}


def failure_reason(error: object) -> str:
    """The reason to show for a failed run: the unit's own message, or the last line of a
    traceback (the exception); cleaned, since users' code wrote it."""
    error = clean_text(error or "", 64 * 1024).strip()
    if error.startswith("Traceback"):
        error = error.splitlines()[-1]
    return clean_text(error or "the run failed without saying why", REASON_LIMIT)
