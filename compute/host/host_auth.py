"""How the portal and a unit's Spark host prove themselves to each other, neither ever sending
its key, so that a process squatting on the host's port learns nothing.

The key is the host's `secret_sha256` (compute/host/spark_host.py SparkHostSettings): the portal
derives it from the unit's secret, the host is given it at start. Then:

- every request is signed: `Authorization: Lakeport-HMAC ts=<unix>,nonce=<hex>,sig=<hex>`,
  an HMAC of the method, the path with its query, the time, a fresh nonce and the body's
  SHA-256. The host refuses a wrong signature, a time more than MAX_SKEW_S away, and a nonce
  it has seen (a replay);
- every answer of the host carries `X-Lakeport-Host-Proof`, an HMAC of the request's nonce,
  the status and the body: the portal believes nothing a host says without it, and sends a
  run's arguments only after a host has answered a fresh challenge with its proof;
- a run's arguments (they hold the run's catalog token) travel sealed (AES-GCM under a key
  derived from the host's, bound to the request's nonce), so even a listener that takes the
  port between that challenge and the submit reads nothing.

Importable without Ray: both sides use it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import threading
import time

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SCHEME = "Lakeport-HMAC"
PROOF_HEADER = "X-Lakeport-Host-Proof"
MAX_SKEW_S = 60.0


class AuthRefused(Exception):
    """A request or an answer that does not prove its sender; the message says what failed."""


def _mac(key: str, *parts: str) -> str:
    return hmac.new(key.encode(), "\n".join(parts).encode(), hashlib.sha256).hexdigest()


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def new_nonce() -> str:
    return secrets.token_hex(16)


def sign_request(
    key: str, method: str, target: str, body: bytes, nonce: str, now: float | None = None
) -> str:
    """The Authorization header of a request (`target`: its path and query, as sent)."""
    ts = str(int(now if now is not None else time.time()))
    return f"{SCHEME} ts={ts},nonce={nonce},sig={_mac(key, 'request', method, target, ts, nonce, body_digest(body))}"


class SeenNonces:
    """The nonces of recent requests, to refuse a replay within the time window (thread-safe)."""

    def __init__(self, window_s: float = 2 * MAX_SKEW_S) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}
        self._window_s = window_s

    def first_time(self, nonce: str, now: float) -> bool:
        with self._lock:
            if len(self._seen) > 10_000:
                self._seen = {n: at for n, at in self._seen.items() if now - at < self._window_s}
            if nonce in self._seen:
                return False
            self._seen[nonce] = now
            return True


def verify_request(
    key: str,
    header: str,
    method: str,
    target: str,
    body: bytes,
    seen: SeenNonces,
    now: float | None = None,
) -> str:
    """The request's nonce if `header` signs this request under `key`; raises AuthRefused."""
    scheme, _, fields = header.partition(" ")
    if scheme != SCHEME:
        raise AuthRefused("the request is not signed")
    values = dict(item.partition("=")[::2] for item in fields.split(","))
    ts, nonce, sig = values.get("ts", ""), values.get("nonce", ""), values.get("sig", "")
    if not (ts.isdigit() and len(nonce) == 32 and len(sig) == 64):
        raise AuthRefused("the signature is malformed")
    now = now if now is not None else time.time()
    if not hmac.compare_digest(
        sig, _mac(key, "request", method, target, ts, nonce, body_digest(body))
    ):
        raise AuthRefused("the signature is wrong")
    if abs(now - int(ts)) > MAX_SKEW_S:
        raise AuthRefused("the signature is too old or too new")
    if not seen.first_time(nonce, now):
        raise AuthRefused("the request was replayed")
    return nonce


def response_proof(key: str, nonce: str, status: int, body: bytes) -> str:
    return _mac(key, "response", nonce, str(status), body_digest(body))


def verify_response(key: str, nonce: str, status: int, body: bytes, proof: str | None) -> None:
    """Raises AuthRefused unless `proof` shows the host that holds `key` gave this answer to
    the request with `nonce`."""
    if not proof or not hmac.compare_digest(proof, response_proof(key, nonce, status, body)):
        raise AuthRefused("the answer carries no proof that it comes from this unit's Spark host")


def _sealing_key(key: str) -> bytes:
    return hmac.new(key.encode(), b"lakeport-spark-host-sealed-args", hashlib.sha256).digest()


def seal(key: str, nonce: str, data: bytes) -> str:
    """`data` encrypted and authenticated for the host holding `key`, bound to the request."""
    iv = os.urandom(12)
    return base64.b64encode(
        iv + AESGCM(_sealing_key(key)).encrypt(iv, data, nonce.encode())
    ).decode()


def unseal(key: str, nonce: str, sealed: str) -> bytes:
    try:
        raw = base64.b64decode(sealed, validate=True)
        return AESGCM(_sealing_key(key)).decrypt(raw[:12], raw[12:], nonce.encode())
    except (ValueError, InvalidTag):
        raise AuthRefused("the sealed arguments do not open with this host's key") from None
