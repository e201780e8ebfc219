"""A loopback S3 endpoint that accepts object writes and keeps nothing, for the Spark host's
warm-up (spark_session.warm_the_write_path): the executors' first write through S3A (the AWS
SDK's client, its signing and connection pool, S3A's output stream) is most of what an
execution's first write costs, and before any execution the unit holds no keys to a real
bucket. It answers what S3A asks when it writes a new object: no object or directory there
(HEAD 404, an empty listing), then PutObject. It serves the warm-up only, is stopped after it,
and lives in the unit, whose loopback only the unit's own processes share.
"""
from __future__ import annotations

import base64
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_EMPTY_LISTING = (b'<?xml version="1.0" encoding="UTF-8"?>'
                  b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                  b"<KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
                  b"</ListBucketResult>")


class _DiscardingS3Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # S3A keeps its connections, as it does with a real store

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(404)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(200, _EMPTY_LISTING, "application/xml")

    def do_PUT(self) -> None:  # noqa: N802
        # The SDK checks the ETag against the MD5 of the object, which it sends along (the body
        # itself comes in signed chunks).
        self._discard_body()
        etag = base64.b64decode(self.headers.get("Content-MD5") or "1B2M2Y8AsgTpgAmY7PhCfg==").hex()
        self._answer(200, headers={"ETag": f'"{etag}"'})

    def do_DELETE(self) -> None:  # noqa: N802
        self._answer(204)

    def _discard_body(self) -> None:
        remaining = int(self.headers.get("Content-Length") or 0)
        while remaining > 0 and (chunk := self.rfile.read(min(remaining, 1 << 16))):
            remaining -= len(chunk)

    def _answer(self, status: int, body: bytes = b"", content_type: str | None = None,
                headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


class DiscardingS3:
    """`with DiscardingS3() as endpoint:` an http://127.0.0.1:<port> S3 endpoint, until the block ends."""

    def __enter__(self) -> str:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _DiscardingS3Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="discarding-s3", daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, *_exc) -> None:
        self._server.shutdown()
        self._server.server_close()
