"""A throwaway HTTP server on the unit's loopback, on a thread of its own, for as long as a
`with` block lasts: the Spark host's warm-up serves its scratch S3 endpoint and Iceberg REST
catalog this way (compute/host/scratch_s3.py, compute/host/warm_up_catalog.py)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackHandler(BaseHTTPRequestHandler):
    """A request to one of these servers. HTTP/1.1: clients keep their connections, as they do
    with the real service; nothing is logged."""

    protocol_version = "HTTP/1.1"

    def _answer(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        length: int | None = None,
    ) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


class LoopbackServer:
    """`with LoopbackServer(handler, name) as url:` serves `handler` at http://127.0.0.1:<port>."""

    def __init__(self, handler: type[LoopbackHandler], name: str) -> None:
        self._handler = handler
        self._name = name

    def __enter__(self) -> str:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name=self._name, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, *_exc) -> None:
        self._server.shutdown()
        self._server.server_close()
