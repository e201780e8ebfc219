"""Portal load: 300 simulated users, each watching a running execution and a compute unit the
way their browser does: the execution page's live partial, its log tail and the unit's row,
each polled again after the delay its last answer names (the `hx-trigger="load delay:…"` chains
of templates/executions/_live.html, _log_tail.html and compute_units/_row.html), revalidated
with the ETag of the copy held (`If-None-Match`; a 304 is a success), for 60 s against the
portal served by gunicorn as shipped (gunicorn.conf.py) on loopback, with alice's session. The
users open their pages spread over the first 10 s, and are measured once all are polling.
The execution is a real one, running a step that sleeps on the benchmarks' compute unit.
Target: p95 ≤ 200 ms and no errors. Baseline: the same requests from one user alone.
"""

from __future__ import annotations

import http.client
import multiprocessing
import re
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from urllib.parse import urlsplit

from app.models import Execution, ExecutionState
from bench.harness import BROWSER_USER_AGENT, Bench, BenchError, Summary, verdict

NAME = "portal-load"
USERS = 300
DURATION_S = 60.0
SOLO_DURATION_S = 15.0
TARGET_P95_MS = 200.0
REQUEST_TIMEOUT_S = 10.0
# Users open their pages over the longest poll delay (a running unit's row: 10 s), as people do at
# random moments; their polls are measured from then on, for DURATION_S.
ARRIVAL_S = 10.0
# The delay a polling partial names for its next poll (app/live_partials.py decides it).
NEXT_POLL = re.compile(rb'hx-trigger="load delay:(\d+)s"')
SLEEPING_STEP = [
    {
        "name": "waits",
        "kind": "python",
        "output": True,
        "code": "import time\n\ndef run(spark):\n    time.sleep(600)\n    return spark.range(1)",
    }
]


def run(bench: Bench, options) -> Summary:
    print(
        f"\n== portal-load: {USERS} users polling a running execution and a unit row, {DURATION_S:g} s, "
        "portal under gunicorn as shipped"
    )
    cu_id = bench.compute_unit_id()
    execution_id = _running_execution(bench, cu_id)
    base_url = bench.start_web_portal()
    cookies = {"session": bench.client.get_cookie("session").value}
    paths = {
        "execution": (f"/executions/{execution_id}", 1.0),
        "log tail": (f"/executions/{execution_id}/logs?tail=1", 1.0),
        "unit row": (f"/compute-units/{cu_id}/row", 5.0),
    }
    try:
        solo = _load(base_url, cookies, paths, users=1, duration_s=SOLO_DURATION_S)
        loaded = _load(base_url, cookies, paths, users=USERS, duration_s=DURATION_S)
    finally:
        bench.cancel_execution(execution_id)
    for label, result in (("1 user", solo), (f"{USERS} users", loaded)):
        print(
            f"  {label}: {result['requests']} requests ({result['requests'] / result['seconds']:.0f}/s), "
            f"p50 {result['p50']:.0f} ms, p95 {result['p95']:.0f} ms, p99 {result['p99']:.0f} ms, "
            f"max {result['max']:.0f} ms, errors {result['errors']}"
        )
        for path_label, figures in result["by_path"].items():
            print(
                f"    {path_label:<10} n={figures['n']:<5} ({figures['not_modified']} answered 304) "
                f"p50 {figures['p50']:.0f} ms, p95 {figures['p95']:.0f} ms"
            )
    if loaded["error_samples"]:
        print(f"  errors, e.g.: {'; '.join(loaded['error_samples'][:3])}")
    met = loaded["p95"] <= TARGET_P95_MS and loaded["errors"] == 0
    print(
        f"  p95 {loaded['p95']:.0f} ms under load vs {solo['p95']:.0f} ms alone ({loaded['p95'] / solo['p95']:.1f}×); "
        f"target p95 ≤ {TARGET_P95_MS:.0f} ms ({loaded['p95'] / TARGET_P95_MS:.2f}× the target) and 0 errors: "
        f"{verdict(met)}"
    )
    return Summary(
        NAME,
        f"{USERS} users: p50 {loaded['p50']:.0f} / p95 {loaded['p95']:.0f} / p99 {loaded['p99']:.0f} ms, "
        f"{loaded['errors']} errors, {loaded['requests'] / loaded['seconds']:.0f} req/s "
        f"(1 user: p95 {solo['p95']:.0f} ms; target p95 ≤ {TARGET_P95_MS:.0f} ms, 0 errors)",
        met,
    )


def _running_execution(bench: Bench, cu_id: int) -> int:
    workflow_id = bench.create_workflow("bench-portal-load", SLEEPING_STEP)
    execution_id = bench.submit(workflow_id, cu_id)
    execution = bench.wait_for_row(
        Execution,
        execution_id,
        lambda row: (
            row.state != ExecutionState.QUEUED
            and (row.state in ExecutionState.FINAL or '"running"' in (row.progress or ""))
        ),
        300,
        "the sleeping execution",
        poll_s=0.2,
    )
    if execution.state != ExecutionState.RUNNING:
        raise BenchError(f"the execution to watch is {execution.state}: {execution.reason}")
    return execution_id


def _load(
    base_url: str,
    cookies: dict,
    paths: dict[str, tuple[str, float]],
    *,
    users: int,
    duration_s: float,
) -> dict:
    """`users` browsers polling `paths` (label → (path, delay before its first answer names one)) for `duration_s`,
    run in a process of their own: the simulated browsers must not share an interpreter (and its
    lock) with the benchmark's own process, and each is a thread with a keep-alive
    connection per poller, as light as a load generator gets in Python."""
    with ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        samples, not_modified, errors, seconds = pool.submit(
            _poll_as_browsers, base_url, cookies, paths, users, duration_s
        ).result()
    every = sorted(value for values in samples.values() for value in values)
    if not every:
        raise BenchError(f"no request to the portal succeeded: {'; '.join(errors[:3])}")
    return {
        "requests": len(every) + len(errors),
        "seconds": seconds,
        "errors": len(errors),
        "error_samples": errors,
        **_percentiles(every),
        "max": every[-1],
        "by_path": {
            label: {
                "n": len(values),
                "not_modified": not_modified[label],
                **_percentiles(sorted(values)),
            }
            for label, values in samples.items()
            if values
        },
    }


def _poll_as_browsers(
    base_url: str, cookies: dict, paths: dict[str, tuple[str, float]], users: int, duration_s: float
) -> tuple[dict[str, list[float]], dict[str, int], list[str], float]:
    address = urlsplit(base_url)
    headers = {
        "HX-Request": "true",
        "User-Agent": BROWSER_USER_AGENT,
        "Cookie": "; ".join(f"{name}={value}" for name, value in cookies.items()),
    }
    samples: dict[str, list[float]] = {label: [] for label in paths}
    not_modified = dict.fromkeys(paths, 0)
    errors: list[str] = []
    measure_from = time.monotonic() + ARRIVAL_S
    stop_at = measure_from + duration_s

    def poll(label: str, path: str, delay_s: float, offset_s: float) -> None:
        time.sleep(offset_s)  # users arrive at random moments, not at once
        connection = http.client.HTTPConnection(
            address.hostname, address.port, timeout=REQUEST_TIMEOUT_S
        )
        etag = None  # of the copy this browser holds
        while time.monotonic() < stop_at:
            started, measured = time.perf_counter(), time.monotonic() >= measure_from
            try:
                connection.request(
                    "GET", path, headers={**headers, **({"If-None-Match": etag} if etag else {})}
                )
                response = connection.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as error:
                errors.append(f"{path}: {type(error).__name__} {error}")
                connection.close()  # a browser opens a new one
            else:
                if response.status in (200, 304):
                    if measured:
                        samples[label].append((time.perf_counter() - started) * 1000)
                        not_modified[label] += response.status == 304
                    if response.status == 200:
                        etag = response.getheader("ETag")
                        named = NEXT_POLL.search(body)
                        delay_s = float(named.group(1)) if named else delay_s
                else:
                    errors.append(f"{path}: HTTP {response.status}")
            time.sleep(delay_s)
        connection.close()

    browsers = [
        threading.Thread(
            target=poll, args=(label, path, delay, ARRIVAL_S * user / users), daemon=True
        )
        for user in range(users)
        for label, (path, delay) in paths.items()
    ]
    for browser in browsers:
        browser.start()
    for browser in browsers:
        browser.join()
    return samples, not_modified, errors, time.monotonic() - measure_from


def _percentiles(ordered: list[float]) -> dict[str, float]:
    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99)}
