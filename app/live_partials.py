"""Live partials: how soon a self-polling partial asks again, and `304 Not Modified` for a poll
that finds nothing new.

Hundreds of open pages poll their partials, and most polls find nothing new. So:
- a partial asks again after 1 s while what it shows is changing, and after 3 s once it has
  been quiet for 15 s (`poll_delay`);
- its ETag is a digest of the row it shows (its version), taken before anything is rendered, so
  a poll that finds the same version costs the row's read and no template. Browsers revalidate
  by themselves (`Cache-Control: no-cache`) and hand htmx their copy on a 304; htmx swaps it in
  again, and the copy's own trigger keeps the poll going.
"""

from __future__ import annotations

import hashlib
import time
from functools import cache
from typing import Callable

from flask import Response, make_response, request

from app.config import PROJECT_ROOT

FAST_POLL_S = 1
QUIET_POLL_S = 3
QUIET_AFTER_S = 15.0


def poll_delay(last_change: float | None, now: float | None = None) -> int:
    """Seconds before the next poll: fast while the last change (epoch seconds) is recent or there
    has been none yet, slower once it is `QUIET_AFTER_S` old."""
    now = time.time() if now is None else now
    if last_change is None or now - last_change < QUIET_AFTER_S:
        return FAST_POLL_S
    return QUIET_POLL_S


def conditional(version: tuple, render: Callable[[], str]) -> Response:
    """`render()` as a response tagged with `version`'s ETag, or an empty 304 when the browser's
    copy (`If-None-Match`) has that ETag already. `version` must hold everything the partial
    shows (the row's values and the poll delay): the same version renders the same body."""
    etag = hashlib.blake2b(
        repr((_templates_release(), version)).encode(), digest_size=16
    ).hexdigest()
    if etag in request.if_none_match:
        response = Response(status=304)
    else:
        response = make_response(render())
    response.set_etag(etag)
    # Private to the signed-in user; the browser must ask again each time (it sends its ETag).
    response.headers["Cache-Control"] = "private, no-cache"
    # The same URL answers a full page without HX-Request: the browser keeps one copy of each.
    response.vary.add("HX-Request")
    response.vary.add("Cookie")
    return response


@cache
def _templates_release() -> str:
    """A digest of the templates' files, so that a new release's markup is never answered with a
    304 for a copy the previous release rendered. The same in every worker process and replica."""
    digest = hashlib.blake2b(digest_size=8)
    for path in sorted((PROJECT_ROOT / "templates").rglob("*.html")):
        digest.update(path.read_bytes())
    return digest.hexdigest()
