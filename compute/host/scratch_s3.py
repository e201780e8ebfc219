"""A loopback S3 endpoint that holds objects in memory until it stops, for the Spark host's
warm-up (spark_session.warm_the_write_path): an execution's first write through S3A (the AWS
SDK's client, its signing and connection pool, S3A's output and input streams) is much of what
its first run costs, and before any execution the unit holds no keys to a real bucket.

It answers what S3A asks when it writes a new object and reads it back: HEAD, PutObject
(plain or in the SDK's signed chunks), GET whole or by range, and a listing, always empty,
since S3A lists only to find directories under a key it writes, and none exist. It serves the
warm-up only (a few small files), is stopped after it, and lives in the unit, whose loopback
only the unit's own processes share.
"""

from __future__ import annotations

import hashlib
import re
from email.utils import formatdate

from compute.host.loopback_server import LoopbackHandler, LoopbackServer

_EMPTY_LISTING = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
    b"</ListBucketResult>"
)
MAX_OBJECT_BYTES = 16 << 20
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class _ScratchS3Handler(LoopbackHandler):
    objects: dict[str, bytes]

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        body = self.objects.get(self._key())
        if body is None:
            self._answer(404)
        else:
            self._answer(200, headers=self._object_headers(body), length=len(body))

    def do_GET(self) -> None:  # noqa: N802
        key = self._key()
        if "/" not in key:  # the bucket itself: a listing
            self._answer(200, _EMPTY_LISTING, {"Content-Type": "application/xml"})
            return
        body = self.objects.get(key)
        if body is None:
            self._answer(404)
            return
        wanted = _RANGE.fullmatch(self.headers.get("Range") or "")
        if not wanted:
            self._answer(200, body, self._object_headers(body))
            return
        first, last = int(wanted[1]), min(int(wanted[2] or len(body) - 1), len(body) - 1)
        self._answer(
            206,
            body[first : last + 1],
            {**self._object_headers(body), "Content-Range": f"bytes {first}-{last}/{len(body)}"},
        )

    def do_PUT(self) -> None:  # noqa: N802
        if (
            int(self.headers.get("Content-Length") or 0) > MAX_OBJECT_BYTES
        ):  # the warm-up's are a few KB
            self.close_connection = True
            self._answer(413)
            return
        body = self._read_body()
        self.objects[self._key()] = body
        self._answer(
            200, headers={"ETag": f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"'}
        )

    def do_DELETE(self) -> None:  # noqa: N802
        self.objects.pop(self._key(), None)
        self._answer(204)

    def _key(self) -> str:
        return self.path.split("?", 1)[0].lstrip("/")  # path style: bucket/key

    def _read_body(self) -> bytes:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not (self.headers.get("x-amz-content-sha256") or "").startswith("STREAMING-"):
            return raw
        # The SDK's signed chunks: "<hex size>;chunk-signature=<sig>\r\n<data>\r\n", ending with size 0.
        body, position = bytearray(), 0
        while True:
            line_end = raw.index(b"\r\n", position)
            size = int(raw[position:line_end].split(b";", 1)[0], 16)
            if size == 0:
                return bytes(body)
            body += raw[line_end + 2 : line_end + 2 + size]
            position = line_end + 2 + size + 2

    @staticmethod
    def _object_headers(body: bytes) -> dict[str, str]:
        return {
            "ETag": f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"',
            "Last-Modified": formatdate(usegmt=True),
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }


class ScratchS3(LoopbackServer):
    """`with ScratchS3() as endpoint:` an http://127.0.0.1:<port> S3 endpoint whose objects
    last until the block ends."""

    def __init__(self) -> None:
        super().__init__(type("Handler", (_ScratchS3Handler,), {"objects": {}}), "scratch-s3")
