"""The portal's side of a compute unit's Spark host (design: compute/host/spark_host.py).

`bootstrap` starts the host through Ray's Jobs API (with the cluster's Ray token) once the
cluster is RUNNING; the other calls go to the host's own HTTP API, with the host's own secret.

That secret is one per compute unit: an HMAC of the portal's secret key, the unit's id and a
random nonce kept in the unit's handle (`with_spark_host_secret`), so nothing secret is stored
and a unit's secret opens no other unit's host. The host is given only its SHA-256, the key
both sides sign with (compute/host/host_auth.py): no request carries the key, no answer is believed
without the host's proof, and a run's arguments (its catalog token) go sealed, and only to a
host that has just answered a fresh challenge. A process squatting on the host's port learns
nothing it could use.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import secrets
import shlex
import socket
import time
import uuid
from urllib.parse import urlsplit

import httpx

from app.ray_clusters.base import ClusterHandle, ClusterStatus, ProgressCallback, no_progress
from app.untrusted import clean_text
from compute.contract import HOST_API, JobKind, RunState, SparkHostSettings, secret_digest
from compute.host import host_auth

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
BOOTSTRAP_POLL_SECONDS = 0.2


# The largest answer the portal reads from a unit's Spark host: users' code runs in the host.
MAX_REPLY_BYTES = 16 * 2**20
# A request's headers and body leave at once (h11 writes them apart): on a kept connection, Nagle
# would hold the body until the bridge's delayed ACK of the headers, about 40 ms.
NO_DELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


@functools.cache
def _tls_context():
    """One TLS context (default verification) for every client of a host: httpx makes a new
    one per client otherwise, loading the CA bundle each time (about 20 ms of CPU for every
    submit, cancel and watch)."""
    return httpx.create_ssl_context()


def _read_bounded(response: httpx.Response) -> bytes:
    """The answer's body, refused past MAX_REPLY_BYTES."""
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise SparkHostError(
                f"the Spark host's answer is over {MAX_REPLY_BYTES >> 20} MiB: refused"
            )
        chunks.append(chunk)
    return b"".join(chunks)


class SparkHostError(RuntimeError):
    """The Spark host could not be started or did not answer as expected. `status_code` is the
    host's HTTP answer when it gave one (None: not reached, or the connection broke)."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


def with_spark_host_secret(handle: ClusterHandle, key: str) -> ClusterHandle:
    """Put the unit's Spark host secret into the handle, making the handle's nonce on first use."""
    if not key:  # before the handle is changed
        raise ValueError("a key is needed to derive the Spark host's secret")
    if handle.spark_host_nonce is None:
        handle.spark_host_nonce = new_spark_host_nonce()
    nonce = handle.spark_host_nonce
    if (
        handle.spark_host_claim_nonce
    ):  # the key its host took when the unit was claimed from the pool
        nonce = f"{nonce}:{handle.spark_host_claim_nonce}"
    handle.spark_host_secret = spark_host_secret(key, handle.cu_id, nonce)
    return handle


def new_spark_host_nonce() -> str:
    return secrets.token_hex(16)


def spark_host_secret(key: str, cu_id: str, nonce: str) -> str:
    """The secret of unit `cu_id`'s Spark host: an HMAC of the unit and its nonce under the
    portal's key, so it can be derived again and is never stored."""
    if not key:
        raise ValueError("a key is needed to derive the Spark host's secret")
    message = f"lakeport-spark-host:{cu_id}:{nonce}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


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
        if not handle.spark_host_secret:
            raise ValueError(f"compute unit {handle.cu_id}'s handle has no Spark host secret")
        self.handle = handle
        self._key = secret_digest(handle.spark_host_secret)
        self._proven = False
        self._http = httpx.Client(
            base_url=handle.spark_host_url.rstrip("/") + HOST_API,
            timeout=timeout,
            transport=transport
            or httpx.HTTPTransport(verify=_tls_context(), socket_options=NO_DELAY),
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
            raise SparkHostError(
                "the Spark host is started through Ray's Jobs API, which needs the dashboard"
            )
        address = urlsplit(self.handle.spark_host_url)
        settings = SparkHostSettings(
            port=address.port or 80,
            namespace=self.handle.spark_host_namespace,
            secret_sha256=secret_digest(self.handle.spark_host_secret),
            # On loopback clusters the host stays on loopback; elsewhere (a pod, a shared cluster's
            # head) it listens on the head's address, which the portal reaches.
            bind_loopback=address.hostname in _LOOPBACK,
            executors=executors,
            executor_cores=executor_cores,
            executor_memory=executor_memory,
            placement_strategy=placement_strategy,
            warm_timeout_s=timeout_s,
        )
        jobs = JobSubmissionClient(self.handle.dashboard_url, headers=self.handle.auth_headers())
        progress("starting the Spark host")
        job_id = jobs.submit_job(
            entrypoint=f"python -m compute.host.start_spark_host {shlex.quote(settings.to_json())}",
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

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict | None = None,
        body: dict | None = None,
        nonce: str | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> dict:
        """One signed request; the answer, once the host has proven that it gave it."""
        nonce = nonce or host_auth.new_nonce()
        content = json.dumps(body).encode() if body is not None else b""
        request = self._http.build_request(
            method,
            path,
            params=params,
            content=content,
            headers={"Content-Type": "application/json"} if body is not None else {},
            timeout=timeout or self._http.timeout,
        )
        request.headers["Authorization"] = host_auth.sign_request(
            self._key, method, request.url.raw_path.decode("ascii"), content, nonce
        )
        try:
            response = self._http.send(request, stream=True)
            try:
                content = _read_bounded(response)
            finally:
                response.close()
        except httpx.HTTPError as error:
            raise SparkHostError(
                f"Spark host at {self.handle.spark_host_url} not reachable: {error}"
            ) from error
        try:
            host_auth.verify_response(
                self._key,
                nonce,
                response.status_code,
                content,
                response.headers.get(host_auth.PROOF_HEADER),
            )
        except host_auth.AuthRefused as refused:
            # Not this unit's host (or it refused the signature): nothing it said is repeated.
            raise SparkHostError(
                f"the process on the Spark host port {self.handle.spark_host_url} is not "
                f"this unit's Spark host ({refused}; it answered {response.status_code})"
            ) from None
        self._proven = True
        if not response.is_success:
            raise SparkHostError(
                f"Spark host answered {response.status_code}: "
                f"{clean_text(content.decode(errors='replace'), 300)}",
                response.status_code,
            )
        try:
            return json.loads(content)
        except ValueError:
            raise SparkHostError("the Spark host's answer is not JSON") from None

    def prove(self) -> None:
        """A fresh challenge: the host answers it with its proof, or SparkHostError."""
        self._call("POST", "/host/challenge")

    def info(self, *, run_waiting: bool = False) -> dict:
        """The host's state and facts; `run_waiting` tells a host still starting that a run waits
        for it (it then starts without warming the write path: the run does that itself)."""
        return self._call("GET", "/host", params={"run_waiting": "1"} if run_waiting else None)

    def _sealed_call(self, path: str, sealed: dict, **body) -> dict:
        """A POST whose `sealed` part is sealed under the key, sent only once the host has proven
        itself on this client."""
        if not self._proven:
            self.prove()
        nonce = host_auth.new_nonce()
        body["sealed_args"] = host_auth.seal(self._key, nonce, json.dumps(sealed).encode())
        return self._call("POST", path, body=body, nonce=nonce)

    def rekey(self, new_key: str) -> None:
        """Give the host a new key (a pooled unit's, at its claim): sent sealed under the present
        one, which opens nothing afterwards. A host that has run anything refuses."""
        self._sealed_call("/host/rekey", {"secret_sha256": new_key})
        self._key = new_key

    def stop(self) -> None:
        """End the host and its Spark session (a unit detaching from a cluster it does not own)."""
        self._call("POST", "/host/stop")

    def submit(self, kind: JobKind, args: dict | None = None, name: str = "") -> dict:
        """Queue a job of `kind` (compute/contract.py JobKind); returns its run's record (with
        `run_id`) right away. Its arguments go sealed, and only once the host has proven itself
        on this client."""
        return self._sealed_call("/runs", args or {}, kind=JobKind(kind).value, name=name)

    def probe(self, code: str, args: dict | None = None, name: str = "") -> dict:
        """Queue a probe (JobKind.PROBE): the project's tests' and benchmarks' own `code`, run in
        the warm host with `spark`, `args` and `progress` in scope; its `result` is the run's."""
        return self.submit(JobKind.PROBE, {"code": code, "args": args or {}}, name=name)

    def run(self, run_id: str, wait_s: float = 0.0) -> dict:
        """The run's record; with `wait_s`, the host answers as soon as the run ends, or after
        `wait_s` seconds if it has not."""
        if wait_s <= 0:
            return self._call("GET", f"/runs/{run_id}")
        return self._call(
            "GET",
            f"/runs/{run_id}",
            params={"wait_s": f"{wait_s:g}"},
            timeout=httpx.Timeout(
                self._http.timeout.connect, read=(self._http.timeout.read or 0.0) + wait_s
            ),
        )

    def cancel(self, run_id: str) -> dict:
        return self._call("POST", f"/runs/{run_id}/cancel")

    def wait(self, run_id: str, timeout_s: float = 600.0) -> dict:
        """Wait until the execution finishes (status requests that the host answers when it
        does); returns its final record."""
        deadline = time.monotonic() + timeout_s
        while (run := self.run(run_id, wait_s=min(5.0, max(0.1, deadline - time.monotonic()))))[
            "state"
        ] not in RunState.FINAL:
            if time.monotonic() > deadline:
                raise SparkHostError(
                    f"execution {run_id} still {run['state']} after {timeout_s:.0f} s"
                )
        return run


# How long a status check waits for the host's figures (a page shows them; no figures is fine).
USE_TIMEOUT_SECONDS = 2.0


def reported_use(handle: ClusterHandle, status: ClusterStatus) -> ClusterStatus:
    """`status` with the CPUs and memory in use as the unit's Spark host reports them. Users'
    code runs in the host, so its figures are numbers or nothing; no host answering, nothing is
    in use (only the host's session takes Ray resources on a unit)."""
    try:
        with SparkHostClient(handle, timeout=USE_TIMEOUT_SECONDS) as host:
            used = host.info().get("resources_used")
    except SparkHostError as error:  # no host (yet), or one that does not answer
        status.reason = f"resources in use as the Spark host reports them: {error}"
        return status
    try:
        status.cpus_used, status.memory_used_bytes = float(used["CPU"]), int(used["memory"])
    except (KeyError, TypeError, ValueError):
        status.reason = "the Spark host reported no resource figures"
    return status


def stop_host(handle: ClusterHandle) -> None:
    """Stop the unit's Spark host if it is there (before detaching from a cluster it outlives)."""
    if not handle.spark_host_secret:
        return
    try:
        with SparkHostClient(handle, timeout=5.0) as host:
            host.stop()
    except SparkHostError:
        pass
