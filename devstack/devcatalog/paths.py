"""Request paths taken as Lakekeeper takes them: parsed into segments, and refused when a
segment could mean something other than what it says.

The dev catalog checks a caller's grant on the warehouse its path names, then forwards the rest
of the path to SeaweedFS under that warehouse's table bucket. A dot segment (`..`, `%2e%2e`, in
any spelling) or an encoded separator (`%2f`, `%5c`) in the rest would let the forwarded path
climb out of the bucket into another warehouse's, past the grant that was checked. So every
path is parsed from the raw request line before routing, and such a path is refused (400): no
path trick reaches another warehouse. The one encoding Iceberg REST needs inside a segment, the
namespace separator `%1F`, is kept.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from flask import Request

from devstack.devcatalog.errors import CatalogError

# Encoded separators and an encoded percent sign (a double encoding decodes to a trick later).
_ENCODED_SEPARATOR = re.compile(r"%(2f|5c|25)", re.IGNORECASE)
# Control characters other than the namespace separator (0x1F) that Iceberg REST uses.
_CONTROL = re.compile(r"[\x00-\x1e\x7f]")


def path_trick(message: str) -> CatalogError:
    return CatalogError(400, "BadRequest", f"Refused path: {message}")


def raw_path(request: Request) -> str:
    """The path as the client sent it, still encoded (gunicorn's RAW_URI, Werkzeug's REQUEST_URI)."""
    raw = (
        request.environ.get("RAW_URI")
        or request.environ.get("REQUEST_URI")
        or request.environ.get("PATH_INFO", "")
    )
    return raw.split("?", 1)[0].split("#", 1)[0]


def segments(raw: str) -> list[str]:
    """The decoded segments of a raw path; raises CatalogError for any segment that is a dot
    segment, holds an encoded separator or a control character, or for an empty segment."""
    if not raw.startswith("/"):
        raise path_trick("not an absolute path")
    parts = raw[1:].split("/")
    if parts and parts[-1] == "":
        parts = parts[:-1]  # one trailing slash is harmless
    decoded = []
    for part in parts:
        if part == "":
            raise path_trick("empty segment")
        if _ENCODED_SEPARATOR.search(part) or "\\" in part:
            raise path_trick("encoded separator in a segment")
        text = unquote(part)
        if text in (".", "..") or text.strip(".") == "" or _CONTROL.search(text):
            raise path_trick("dot segment or control character")
        decoded.append(text)
    return decoded
