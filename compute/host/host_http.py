"""The Spark host's HTTP API (`API` paths below), which only the portal may use.

Every request must be signed with the host's key and every answer carries the host's proof
(compute/host/host_auth.py); a run's arguments arrive sealed. The handler calls the host object
directly, in this process: Ray callers never reach it.
"""

from __future__ import annotations

import json
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from compute.contract import HOST_API as API
from compute.contract import JobKind
from compute.host.host_auth import (
    PROOF_HEADER,
    AuthRefused,
    SeenNonces,
    response_proof,
    unseal,
    verify_request,
)

# The largest request body the host reads (a job's kind and sealed arguments).
MAX_BODY_BYTES = 16 * 2**20
KEY_RE = re.compile(r"[0-9a-f]{64}")


class HostRequestHandler(BaseHTTPRequestHandler):
    """One connection to the host; `serve` makes a subclass bound to its host, key and nonces."""

    # Connections are kept for the next request (every request is signed on its own): the
    # portal reaches the host through the sandbox's socat bridges, which fork twice for every
    # new connection, about 10 ms before a request is even read.
    protocol_version = "HTTP/1.1"
    # An idle kept connection is closed after this many seconds (a status request waits less).
    timeout = 60
    # An answer's headers and body go out without waiting for the client's ACK of one another.
    disable_nagle_algorithm = True

    host: Any = None
    key: str = ""
    seen: SeenNonces
    nonce: str | None = None

    def _dispatch(self) -> None:
        method, length = self.command, int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = (
                True  # the body stays unread: nothing after it on this connection is a request
            )
            return self._reply(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "request body too large"}
            )
        body = self.rfile.read(length) if length else b""
        try:
            self.nonce = verify_request(
                self.key, self.headers.get("Authorization", ""), method, self.path, body, self.seen
            )
        except AuthRefused as refused:
            return self._reply(
                HTTPStatus.UNAUTHORIZED, {"error": f"not the portal's request: {refused}"}
            )
        try:
            return self._route(method, body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": "body is not JSON"})
        except AuthRefused as refused:
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": str(refused)})

    do_GET = do_POST = _dispatch

    def _route(self, method: str, body: bytes) -> None:
        path, _, query = self.path.partition("?")
        parts = path.removeprefix(API).strip("/").split("/")
        if method == "POST" and parts == ["host", "challenge"]:
            return self._reply(HTTPStatus.OK, {"host": "spark-host"})  # the proof is the answer
        if method == "GET" and parts == ["host"]:
            return self._reply(
                HTTPStatus.OK,
                self.host.info(run_waiting=parse_qs(query).get("run_waiting") == ["1"]),
            )
        if method == "POST" and parts == ["host", "rekey"]:
            return self._rekey(json.loads(body or b"{}"))
        if method == "POST" and parts == ["host", "stop"]:
            threading.Thread(target=self.host.stop, name="spark-host-stop", daemon=True).start()
            return self._reply(HTTPStatus.ACCEPTED, {"state": "stopping"})
        if method == "POST" and parts == ["runs"]:
            return self._submit(json.loads(body or b"{}"))
        if len(parts) == 2 and parts[0] == "runs" and method == "GET":
            try:
                wait_s = float(parse_qs(query).get("wait_s", ["0"])[0])
            except ValueError:
                return self._reply(HTTPStatus.BAD_REQUEST, {"error": "`wait_s` must be a number"})
            return self._found(self.host.run_status(parts[1], wait_s))
        if len(parts) == 3 and parts[0] == "runs" and parts[2] == "cancel" and method == "POST":
            return self._found(self.host.cancel(parts[1]))
        return self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {method} {path}"})

    def _submit(self, body: dict) -> None:
        kinds = [kind.value for kind in JobKind]
        if not isinstance(body, dict) or body.get("kind") not in kinds:
            return self._reply(
                HTTPStatus.BAD_REQUEST,
                {"error": f"`kind` must be one of the job kinds: {', '.join(kinds)}"},
            )
        args = (
            json.loads(unseal(self.key, self.nonce, body["sealed_args"]))
            if body.get("sealed_args")
            else {}
        )
        if not isinstance(args, dict):
            return self._reply(
                HTTPStatus.BAD_REQUEST, {"error": "the arguments must be a JSON object"}
            )
        return self._reply(
            HTTPStatus.ACCEPTED,
            self.host.submit(JobKind(body["kind"]), args, str(body.get("name", ""))),
        )

    def _rekey(self, body: dict) -> None:
        """The portal's new key for this host (a pooled unit claimed by its user), sealed under
        the present key. Refused once the host has run anything: a key changes only before any
        user's code ran here. The answer is proven under the present key; then the new one
        holds for every request."""
        if not isinstance(body, dict) or not isinstance(body.get("sealed_args"), str):
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": "`sealed_args` is required"})
        new_key = json.loads(unseal(self.key, self.nonce, body["sealed_args"])).get("secret_sha256")
        if not (isinstance(new_key, str) and KEY_RE.fullmatch(new_key)):
            return self._reply(
                HTTPStatus.BAD_REQUEST, {"error": "`secret_sha256` must be 64 hex digits"}
            )
        if not self.host.may_rekey():
            return self._reply(
                HTTPStatus.CONFLICT, {"error": "this host has run code: its key stays"}
            )
        self._reply(HTTPStatus.OK, {"rekeyed": True})
        type(self).key = new_key

    def _found(self, run: dict | None) -> None:
        if run is None:
            return self._reply(HTTPStatus.NOT_FOUND, {"error": "no such run"})
        return self._reply(HTTPStatus.OK, run)

    def _reply(self, status: HTTPStatus, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.nonce is not None:  # a request proved to come from the portal gets the proof
            self.send_header(PROOF_HEADER, response_proof(self.key, self.nonce, status, body))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        """Requests are not logged: the portal polls often."""


def serve(host: Any, bind_host: str, port: int) -> ThreadingHTTPServer:
    """Serve `host` (compute/host/spark_host.py SparkSessionHost) on `bind_host:port`, in threads."""
    handler = type(
        "SparkHostHandler",
        (HostRequestHandler,),
        {"host": host, "key": host.settings.secret_sha256, "seen": SeenNonces()},
    )
    server = ThreadingHTTPServer((bind_host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="spark-host-http", daemon=True).start()
    return server
