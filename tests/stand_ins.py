"""Stand-ins for what the portal talks to, run in the test's process: a webhook receiver, HTTP
servers that record or drip, a scripted Lakekeeper and identity provider (httpx transports), and
a Spark host's session side behind the real host HTTP API."""

from __future__ import annotations

import hashlib
import hmac
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import httpx

from app.ray_clusters.base import ClusterHandle
from app.spark_host.client import with_spark_host_secret


# --------------------------------------------------------------------------- webhook receivers
def signed_as_documented(secret: str, headers: dict, body: bytes) -> bool:
    """The check docs/features.md tells a receiver to make: HMAC-SHA256 of
    "<timestamp>.<body>", and a timestamp within five minutes of now."""
    timestamp = headers["X-Lakeport-Timestamp"]
    expected = (
        "sha256="
        + hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    )
    return (
        hmac.compare_digest(headers["X-Lakeport-Signature"], expected)
        and abs(time.time() - int(timestamp)) < 300
    )


class Receiver:
    """A webhook receiver on loopback: answers `status`, or never answers when `hang`."""

    def __init__(self, status: int = 200, hang: bool = False) -> None:
        self.calls: list[tuple[dict, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.calls.append((dict(self.headers), body))
                if hang:
                    time.sleep(30)
                    return
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------ servers the network policy is tried against
ANSWER = b"recording-server-was-here"


class RecordingServer(ThreadingHTTPServer):
    """Answers every request with 200 and ANSWER (or a redirect to `redirect_to`); remembers each
    connection and Host header."""

    daemon_threads = True

    def __init__(
        self, host: str, tls: ssl.SSLContext | None = None, redirect_to: str | None = None
    ):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.connections: list[tuple] = []
        self.hosts: list[str] = []
        self.tls = tls
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                server.hosts.append(self.headers["Host"])
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self.send_response(302 if redirect_to else 200)
                if redirect_to:
                    self.send_header("Location", redirect_to)
                self.send_header("Content-Length", str(len(ANSWER)))
                self.end_headers()
                self.wfile.write(ANSWER)

            do_GET = do_PUT = do_DELETE = do_HEAD = _answer

            def log_message(self, *args):
                pass

        super().__init__((host, 0), Handler)

    def get_request(self):
        sock, peer = super().get_request()
        self.connections.append(peer)
        if self.tls:
            sock = self.tls.wrap_socket(sock, server_side=True)
        return sock, peer

    @property
    def port(self) -> int:
        return self.server_address[1]


def stub_resolver(*answers: list[str]):
    """A resolver that gives `answers` in turn (the last one from then on) and counts its lookups."""
    calls: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        return answers[min(len(calls), len(answers)) - 1]

    resolve.calls = calls
    return resolve


class SlowDrip:
    """A server that accepts, reads the request, then sends one byte every `interval` seconds."""

    def __init__(self, interval: float = 2.0) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(32)
        self.port = self.sock.getsockname()[1]
        self.interval, self.accepted, self.closed = interval, 0, threading.Event()
        self.open_now = self.most_open = 0  # connections held at once, and the most ever
        self._count = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1_000_000
        with self._count:
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
        try:
            conn.settimeout(1)
            try:
                conn.recv(65536)
            except OSError:
                pass
            for byte in answer:
                if self.closed.wait(self.interval):
                    break
                conn.sendall(bytes([byte]))
        except OSError:
            pass
        finally:
            conn.close()
            with self._count:
                self.open_now -= 1

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


# --------------------------------------------------- Lakekeeper and its identity provider, scripted
PROJECT_ID = "01968a3c-0c6e-7f53-9f1b-2a3b4c5d6e7f"


WAREHOUSE_ID = "01968a3c-5d1a-7c42-8e6f-0a1b2c3d4e5f"


BASE_URL = "http://lakekeeper.test"


TOKEN_URL = "http://idp.test/token"


class ScriptedServer:
    """Answers each (method, decoded path) with its scripted replies in order, repeating the
    last one; a reply is (status, json-or-None), a function of the request returning one,
    or an exception to raise."""

    def __init__(self) -> None:
        self.replies: dict[tuple[str, str], list] = {}
        self.requests: list[httpx.Request] = []

    def on(self, method: str, path: str, *replies) -> None:
        self.replies[(method, path)] = list(replies)

    def calls(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path == path]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        queue = self.replies.get((request.method, request.url.path))
        assert queue, f"unscripted request {request.method} {request.url}"
        reply = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(reply, Exception):
            raise reply
        status, body = reply(request) if callable(reply) else reply
        return httpx.Response(status, json=body) if body is not None else httpx.Response(status)


class IdentityProvider:
    """A token endpoint issuing token-1, token-2, ... valid `lifetime` seconds, for the scope asked for."""

    def __init__(self, lifetime: int = 3600) -> None:
        self.lifetime = lifetime
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/.well-known/openid-configuration":
            return httpx.Response(
                200, json={"issuer": "http://idp.test", "token_endpoint": TOKEN_URL}
            )
        answer = {
            "access_token": f"token-{len(self.token_requests)}",
            "token_type": "Bearer",
            "expires_in": self.lifetime,
        }
        scope = parse_qs(request.content.decode()).get("scope")
        return httpx.Response(200, json={**answer, "scope": scope[0]} if scope else answer)

    @property
    def token_requests(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path == "/token"]


PERMISSIONS_PATH = f"/management/v1/permissions/warehouse/{WAREHOUSE_ID}/assignments"


# ---------------------------------------------------------------------- a Spark host's session side
def handle_on(port: int, key: str = "portal-key") -> ClusterHandle:
    return with_spark_host_secret(
        ClusterHandle(backend="existing", cu_id="7", spark_host_url=f"http://127.0.0.1:{port}"), key
    )


@dataclass
class HostSettings:
    secret_sha256: str


class StandInHost:
    """What compute/host/host_http.py calls on the real SparkSessionHost, recording the submits."""

    def __init__(self, key: str) -> None:
        self.settings = HostSettings(key)
        self.submitted: list[tuple[str, dict, str]] = []

    def info(self, run_waiting: bool = False) -> dict:
        return {"state": "ready", "app_id": "app-1"}

    def submit(self, code: str, args: dict, name: str) -> dict:
        self.submitted.append((code, args, name))
        return {"run_id": "r1", "state": "QUEUED"}

    def run_status(self, run_id: str, wait_s: float = 0.0) -> dict | None:
        return {"run_id": run_id, "state": "COMPLETED"} if run_id == "r1" else None

    def cancel(self, run_id: str) -> dict | None:
        return self.run_status(run_id)

    def stop(self) -> None:
        pass

    def may_rekey(self) -> bool:
        return not self.submitted
