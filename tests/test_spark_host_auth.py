"""The portal authenticates a unit's Spark host before it sends anything (compute/host/host_auth.py):
a listener squatting on the host's port learns nothing, and the host's real API refuses every
request not signed with its key, an old-style bearer, a replay, a tampered one. No Ray: the
host's HTTP API (compute/host/host_http.py) is served here around a stand-in for the session host."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from app.spark_host.client import SparkHostClient, SparkHostError, with_spark_host_secret
from compute.contract import JobKind, secret_digest
from compute.host import host_auth
from compute.host.host_http import serve
from tests.stand_ins import StandInHost, handle_on

CATALOG_TOKEN = "eyJ-the-runs-catalog-token-" + "x" * 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Squatter:
    """Whatever binds the port first: records every byte, answers 200 with plausible JSON."""

    def __init__(self) -> None:
        self.received = bytearray()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                recorder.received += (
                    self.requestline.encode() + bytes(self.headers) + self.rfile.read(length)
                )
                body = json.dumps(
                    {"state": "ready", "run_id": "r1", "app_id": "a", "executors": []}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_squatter_on_the_host_port_learns_nothing_and_is_not_believed():
    squatter = Squatter()
    handle = handle_on(squatter.port)
    client = SparkHostClient(handle, timeout=5)
    calls = [
        lambda: client.info(),
        lambda: client.submit(JobKind.EXECUTION, {"catalog": {"token": CATALOG_TOKEN}}),
        lambda: client.run("r1"),
        lambda: client.cancel("r1"),
        lambda: client.prove(),
    ]
    for call in calls:
        with pytest.raises(SparkHostError, match="is not this unit's Spark host"):
            call()
    client.close()
    received = bytes(squatter.received)
    assert received  # it was asked, and answered
    for secret in (
        handle.spark_host_secret,
        secret_digest(handle.spark_host_secret),
        CATALOG_TOKEN,
    ):
        for form in (
            secret.encode(),
            base64.b64encode(secret.encode()),
            secret.encode().hex().encode(),
        ):
            assert form not in received
    assert (
        b"sealed_args" not in received
    )  # nothing was submitted to a host that did not prove itself
    squatter.server.shutdown()


@pytest.fixture
def real_host():
    handle = handle_on(free_port())
    host = StandInHost(secret_digest(handle.spark_host_secret))
    server = serve(host, "127.0.0.1", int(handle.spark_host_url.rsplit(":", 1)[1]))
    yield handle, host
    server.shutdown()


def test_the_portals_client_and_the_host_prove_themselves_and_seal_the_arguments(real_host):
    handle, host = real_host
    with SparkHostClient(handle, timeout=5) as client:
        assert client.info()["app_id"] == "app-1"
        assert (
            client.submit(JobKind.EXECUTION, {"catalog": {"token": CATALOG_TOKEN}}, name="e-1")[
                "run_id"
            ]
            == "r1"
        )
        assert client.run("r1", wait_s=0.5)["state"] == "COMPLETED"
        with pytest.raises(SparkHostError, match="404"):
            client.run("nope")
    assert host.submitted == [(JobKind.EXECUTION, {"catalog": {"token": CATALOG_TOKEN}}, "e-1")]


def _signed(key: str, method: str, target: str, body: bytes = b"", **overrides) -> dict:
    nonce = overrides.pop("nonce", host_auth.new_nonce())
    return {"Authorization": host_auth.sign_request(key, method, target, body, nonce, **overrides)}


def test_the_host_refuses_every_request_not_signed_with_its_key(real_host):
    handle, _ = real_host
    url, key = handle.spark_host_url, secret_digest(handle.spark_host_secret)
    refused = [
        {},
        {
            "Authorization": f"Bearer {handle.spark_host_secret}"
        },  # the old scheme, even with the secret
        {"Authorization": f"Bearer {key}"},
        _signed("not-the-key", "GET", "/v1/host"),
        _signed(key, "GET", "/v1/host", now=time.time() - 3600),  # stale
        _signed(key, "GET", "/v1/runs/r1"),  # signed for another path
        _signed(key, "POST", "/v1/host"),  # for another method
        {"Authorization": host_auth.SCHEME + " ts=1,nonce=x,sig=y"},
    ]
    for headers in refused:
        response = httpx.get(f"{url}/v1/host", headers=headers)
        assert response.status_code == 401 and host_auth.PROOF_HEADER not in response.headers, (
            headers
        )
    once = _signed(key, "GET", "/v1/host")
    assert httpx.get(f"{url}/v1/host", headers=once).status_code == 200
    assert httpx.get(f"{url}/v1/host", headers=once).status_code == 401  # replayed


def test_a_tampered_body_or_unsealed_arguments_are_refused(real_host):
    handle, host = real_host
    url, key = handle.spark_host_url, secret_digest(handle.spark_host_secret)
    body = json.dumps({"kind": "comparison", "sealed_args": "", "name": ""}).encode()
    headers = {**_signed(key, "POST", "/v1/runs", body), "Content-Type": "application/json"}
    tampered = body.replace(b"comparison", b"maintenance")
    assert httpx.post(f"{url}/v1/runs", headers=headers, content=tampered).status_code == 401
    nonce = host_auth.new_nonce()
    wrong_seal = host_auth.seal("not-the-key", nonce, b'{"a": 1}')
    body = json.dumps({"kind": "execution", "sealed_args": wrong_seal}).encode()
    response = httpx.post(
        f"{url}/v1/runs", content=body, headers=_signed(key, "POST", "/v1/runs", body, nonce=nonce)
    )
    assert response.status_code == 400 and "do not open" in response.text
    assert host.submitted == []


def test_an_answer_proven_for_another_request_is_not_believed(real_host):
    handle, _ = real_host
    key = secret_digest(handle.spark_host_secret)
    nonce = host_auth.new_nonce()
    old = httpx.get(
        f"{handle.spark_host_url}/v1/host", headers=_signed(key, "GET", "/v1/host", nonce=nonce)
    )
    host_auth.verify_response(key, nonce, 200, old.content, old.headers[host_auth.PROOF_HEADER])
    with pytest.raises(host_auth.AuthRefused):  # replayed to a later request
        host_auth.verify_response(
            key, host_auth.new_nonce(), 200, old.content, old.headers[host_auth.PROOF_HEADER]
        )
    with pytest.raises(host_auth.AuthRefused):  # its body changed
        host_auth.verify_response(
            key, nonce, 200, old.content + b" ", old.headers[host_auth.PROOF_HEADER]
        )


def test_a_pooled_units_host_takes_a_new_key_once_before_any_run_and_the_old_opens_nothing(
    real_host,
):
    """At a claim from the warm pool (app/compute_units/pool.py) the portal gives the host a key
    of its own, sealed under the one it started with. Whoever knew the first learns nothing."""
    handle, host = real_host
    claimed = with_spark_host_secret(replace(handle, spark_host_claim_nonce="c" * 32), "portal-key")
    new_key = secret_digest(claimed.spark_host_secret)
    assert new_key != secret_digest(handle.spark_host_secret)
    url, old_key = handle.spark_host_url, secret_digest(handle.spark_host_secret)

    # Not in the clear, not malformed, not signed by another key.
    body = json.dumps({"secret_sha256": new_key}).encode()
    assert (
        httpx.post(
            f"{url}/v1/host/rekey",
            content=body,
            headers=_signed(old_key, "POST", "/v1/host/rekey", body),
        ).status_code
        == 400
    )
    nonce = host_auth.new_nonce()
    body = json.dumps(
        {"sealed_args": host_auth.seal(old_key, nonce, b'{"secret_sha256": "short"}')}
    ).encode()
    assert (
        httpx.post(
            f"{url}/v1/host/rekey",
            content=body,
            headers=_signed(old_key, "POST", "/v1/host/rekey", body, nonce=nonce),
        ).status_code
        == 400
    )
    nonce = host_auth.new_nonce()
    body = json.dumps(
        {
            "sealed_args": host_auth.seal(
                "not-the-key", nonce, json.dumps({"secret_sha256": new_key}).encode()
            )
        }
    ).encode()
    assert (
        httpx.post(
            f"{url}/v1/host/rekey",
            content=body,
            headers=_signed("not-the-key", "POST", "/v1/host/rekey", body, nonce=nonce),
        ).status_code
        == 401
    )

    with SparkHostClient(handle, timeout=5) as client:
        client.rekey(new_key)
        assert client.info()["app_id"] == "app-1"  # the client goes on with the new key
    with pytest.raises(SparkHostError, match="not this unit's Spark host"):
        with SparkHostClient(handle, timeout=5) as client:
            client.info()
    with SparkHostClient(claimed, timeout=5) as client:
        assert (
            client.submit(JobKind.EXECUTION, {"catalog": {"token": CATALOG_TOKEN}})["run_id"]
            == "r1"
        )
        with pytest.raises(SparkHostError, match="409"):  # once code ran, the key stays
            client.rekey("0" * 64)
        assert client.info()["app_id"] == "app-1"


def test_one_connection_carries_the_portals_calls_each_signed_on_its_own(real_host):
    """The host keeps a connection for the next request (through a unit's socat bridges a new
    connection costs two forks), and every request on it is checked as on a new one."""
    handle, host = real_host
    url, key = handle.spark_host_url, secret_digest(handle.spark_host_secret)
    connections: list[int] = []
    with httpx.Client(base_url=url) as client:

        def peer_port(response: httpx.Response) -> int:
            return response.extensions["network_stream"].get_extra_info("socket").getsockname()[1]

        for path, headers, status in [
            ("/v1/host", _signed(key, "GET", "/v1/host"), 200),
            ("/v1/host", {}, 401),  # refused on a connection a signed call opened
            ("/v1/runs/r1", _signed(key, "GET", "/v1/runs/r1"), 200),
        ]:
            response = client.get(path, headers=headers)
            assert response.status_code == status, path
            connections.append(peer_port(response))
    assert len(set(connections)) == 1, connections


def test_an_oversized_body_ends_its_connection(real_host):
    """A body the host does not read must not be taken for the next request on the connection."""
    handle, _ = real_host
    port = int(handle.spark_host_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n"
            b"GET /v1/host HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413") and answer.count(b"HTTP/1.1") == 1, answer


def test_the_portals_clients_send_without_nagle_and_share_one_tls_context(real_host):
    """A request's headers and body leave together on a kept connection (no 40 ms wait for the
    bridge's delayed ACK), and a new client does not load the CA bundle again."""
    handle, _ = real_host
    with SparkHostClient(handle, timeout=5) as first, SparkHostClient(handle, timeout=5) as second:
        first.info()
        [connection] = first._http._transport._pool.connections
        sock = connection._connection._network_stream.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert (
            first._http._transport._pool._ssl_context is second._http._transport._pool._ssl_context
        )


def test_the_host_runs_only_named_job_kinds(real_host):
    """A run is a job kind the host knows, never a code string: a body with Python source, or a
    kind the host does not know, is refused before anything is queued."""
    handle, host = real_host
    url, key = handle.spark_host_url, secret_digest(handle.spark_host_secret)
    for body in ({"code": "result = 1"}, {"kind": "shell"}, {"kind": ["execution"]}):
        content = json.dumps({**body, "name": ""}).encode()
        response = httpx.post(
            f"{url}/v1/runs",
            content=content,
            headers={
                **_signed(key, "POST", "/v1/runs", content),
                "Content-Type": "application/json",
            },
        )
        assert response.status_code == 400, (body, response.text)
        assert f"job kinds: {', '.join(kind.value for kind in JobKind)}" in response.text
    assert host.submitted == []
    with SparkHostClient(handle, timeout=5) as client:
        with pytest.raises(ValueError):
            client.submit("result = 1", {})
    assert host.submitted == []
