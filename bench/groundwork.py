"""A run's groundwork (app/executions/work.py `_Groundwork`): the run's catalog token and the
warehouse's check in the catalog, begun side by side on the worker's threads, against the same
two calls one after the other. Each HTTP request the portal's process sends is delayed by a
round trip (0, 25 and 50 ms, as a catalog and an identity provider in another zone or region
would answer), so the figure says what the parallel start saves where the catalog is not on
this machine. Target: at 25 and 50 ms side by side saves at least half a round trip; at 0 ms it
costs at most 5 ms (the hand-off to the worker's threads).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import httpx

from app.executions import work
from app.models import Execution, ExecutionState
from bench.harness import Bench, Summary, interleaved, median, spread, verdict

NAME = "groundwork"
ROUNDS = 9
ROUND_TRIPS_MS = (0, 25, 50)


@contextlib.contextmanager
def delayed_requests(round_trip_ms: float) -> Iterator[None]:
    """Every request of an httpx client in this process waits `round_trip_ms` before it goes."""
    original = httpx.HTTPTransport.handle_request

    def handle_request(transport, request):
        time.sleep(round_trip_ms / 1000)
        return original(transport, request)

    httpx.HTTPTransport.handle_request = handle_request
    try:
        yield
    finally:
        httpx.HTTPTransport.handle_request = original


def run(bench: Bench, options) -> Summary:
    print(
        f"\n== groundwork: the run's catalog token and the warehouse's check, side by side and "
        f"one after the other, with {', '.join(map(str, ROUND_TRIPS_MS))} ms per request, "
        f"median of {ROUNDS}"
    )
    execution = _execution(bench)
    warehouse, owner = bench.warehouse(), bench.owner()

    def side_by_side() -> None:
        groundwork = work._Groundwork.start(execution)
        groundwork.check()
        groundwork.token()

    def one_after_the_other() -> None:
        work._check_warehouse(execution, warehouse)
        work._run_token(warehouse, owner)

    lines, met = [], True
    with bench.app.app_context():
        side_by_side(), one_after_the_other()  # clients and caches made, as on a warm worker
        for round_trip_ms in ROUND_TRIPS_MS:
            timings: dict[str, list[float]] = {"side by side": [], "one after the other": []}
            with delayed_requests(round_trip_ms):
                interleaved(
                    ROUNDS,
                    [
                        _timed(side_by_side, timings["side by side"]),
                        _timed(one_after_the_other, timings["one after the other"]),
                    ],
                )
            saved_ms = (
                median(timings["one after the other"]) - median(timings["side by side"])
            ) * 1000
            wanted_ms = round_trip_ms / 2 if round_trip_ms else -5.0
            met = met and saved_ms >= wanted_ms
            for label, values in timings.items():
                print(f"  {round_trip_ms} ms per request, {label}: {spread(values, 's', 3)}")
            print(f"  {round_trip_ms} ms per request: side by side saves {saved_ms:.1f} ms")
            lines.append(f"{round_trip_ms} ms: {saved_ms:+.0f} ms")
    print(f"  {verdict(met)}")
    return Summary(NAME, "saved per run at a round trip of " + ", ".join(lines), met)


def _timed(measure, into: list[float]):
    def timed() -> None:
        started = time.perf_counter()
        measure()
        into.append(time.perf_counter() - started)

    return timed


def _execution(bench: Bench) -> Execution:
    """A queued execution into the bench's warehouse (never driven: only its groundwork runs)."""
    workflow_id = bench.create_workflow(
        "bench-groundwork", [{"name": "one", "kind": "sql", "code": "SELECT 1 AS n"}]
    )
    warehouse = bench.warehouse()
    return bench.add(
        Execution(
            owner_id=warehouse.owner_id,
            workflow_id=workflow_id,
            workflow_version_id=bench.workflow_version_id(workflow_id),
            workflow_version=1,
            warehouse_id=warehouse.id,
            warehouse_name=warehouse.name,
            state=ExecutionState.CANCELLED,
        )
    )
