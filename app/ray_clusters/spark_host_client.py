"""The portal's side of a compute unit's Spark host (design: compute/spark_host.py).

`bootstrap` starts the host through Ray's Jobs API once the cluster is RUNNING; the other
calls go to the host's own HTTP API. Both use the cluster's token from the handle.
"""
from __future__ import annotations

import shlex
import time
import uuid
from urllib.parse import urlsplit

import httpx

from app.ray_clusters.base import ClusterHandle, ProgressCallback, no_progress
from compute.spark_host import API, RunState, SparkHostSettings

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
BOOTSTRAP_POLL_SECONDS = 0.2


class SparkHostError(RuntimeError):
    """The Spark host could not be started or did not answer as expected."""


class SparkHostClient:
    def __init__(
        self,
        handle: ClusterHandle,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not handle.spark_host_url:
            raise ValueError(f"compute unit {handle.cu_id} has no Spark host address")
        self.handle = handle
        self._http = httpx.Client(
            base_url=handle.spark_host_url.rstrip("/") + API,
            headers=handle.auth_headers(),
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SparkHostClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def bootstrap(
        self,
        *,
        executors: int,
        executor_cores: int = 1,
        executor_memory: str = "1g",
        placement_strategy: str | None = "SPREAD",
        timeout_s: float = 300.0,
        progress: ProgressCallback = no_progress,
    ) -> dict:
        """Start the host (a Ray Job creates it on the head node) and return its info once warm."""
        from ray.job_submission import JobStatus, JobSubmissionClient

        if not self.handle.dashboard_url:
            raise SparkHostError("the Spark host is started through Ray's Jobs API, which needs the dashboard")
        address = urlsplit(self.handle.spark_host_url)
        settings = SparkHostSettings(
            port=address.port or 80,
            # On loopback clusters the host stays on loopback; elsewhere (a pod) the portal
            # reaches it from outside the head, through its Service.
            bind_host="127.0.0.1" if address.hostname in _LOOPBACK else "0.0.0.0",
            executors=executors,
            executor_cores=executor_cores,
            executor_memory=executor_memory,
            placement_strategy=placement_strategy,
            warm_timeout_s=timeout_s,
        )
        jobs = JobSubmissionClient(self.handle.dashboard_url, headers=self.handle.auth_headers())
        progress("starting the Spark host")
        job_id = jobs.submit_job(
            entrypoint=f"python -m compute.start_spark_host {shlex.quote(settings.to_json())}",
            submission_id=f"lakeport-spark-host-{uuid.uuid4().hex[:12]}",
        )
        deadline = time.monotonic() + timeout_s + 30
        next_job_check = 0.0
        while True:
            # The host itself says first when it is ready: the job ends a while later.
            try:
                if (info := self.info())["state"] == "ready":
                    break
            except SparkHostError:
                pass  # not listening yet
            if time.monotonic() >= next_job_check:
                status = jobs.get_job_status(job_id)
                if status == JobStatus.SUCCEEDED:
                    info = self.info()
                    break
                if status in (JobStatus.FAILED, JobStatus.STOPPED):
                    tail = "\n".join(jobs.get_job_logs(job_id).strip().splitlines()[-5:])
                    raise SparkHostError(f"the Spark host did not start ({status.value}): {tail}")
                next_job_check = time.monotonic() + 1.0
            if time.monotonic() > deadline:
                jobs.stop_job(job_id)
                raise SparkHostError(f"the Spark host was not warm within {timeout_s:.0f} s")
            time.sleep(BOOTSTRAP_POLL_SECONDS)
        progress("Spark host ready")
        return info

    def _call(self, method: str, path: str, **kwargs) -> dict:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise SparkHostError(f"Spark host at {self.handle.spark_host_url} not reachable: {error}") from error
        if not response.is_success:
            raise SparkHostError(f"Spark host answered {response.status_code}: {response.text[:300]}")
        return response.json()

    def info(self) -> dict:
        return self._call("GET", "/host")

    def submit(self, code: str, args: dict | None = None, name: str = "") -> dict:
        """Queue an execution; returns its record (with `run_id`) right away."""
        return self._call("POST", "/runs", json={"code": code, "args": args or {}, "name": name})

    def run(self, run_id: str, wait_s: float = 0.0) -> dict:
        """The run's record; with `wait_s`, the host answers as soon as the run ends, or after
        `wait_s` seconds if it has not."""
        if wait_s <= 0:
            return self._call("GET", f"/runs/{run_id}")
        timeout = self._http.timeout.read or 0.0
        return self._call("GET", f"/runs/{run_id}", params={"wait_s": f"{wait_s:g}"},
                          timeout=httpx.Timeout(self._http.timeout.connect, read=timeout + wait_s))

    def cancel(self, run_id: str) -> dict:
        return self._call("POST", f"/runs/{run_id}/cancel")

    def wait(self, run_id: str, timeout_s: float = 600.0) -> dict:
        """Wait until the execution finishes (status requests that the host answers when it
        does); returns its final record."""
        deadline = time.monotonic() + timeout_s
        while (run := self.run(run_id, wait_s=min(5.0, max(0.1, deadline - time.monotonic()))))["state"] \
                not in RunState.FINAL:
            if time.monotonic() > deadline:
                raise SparkHostError(f"execution {run_id} still {run['state']} after {timeout_s:.0f} s")
        return run
