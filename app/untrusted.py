"""Text and data that come from a compute unit, made safe to store, show and log.

Users' code runs in a unit, so whatever a unit reports (its Spark host's replies, the files in
its directory, its processes' logs) is an attacker's text. Before any of it reaches a reason,
a page, a log line or a database row it passes through here:

- `clean_text`: a `str`, without control characters (a NUL alone makes PostgreSQL refuse the
  row; escape sequences rewrite a terminal reading the log), bounded, and saying so when cut;
- `bounded`: a JSON value (the host's replies) with every string cleaned and bounded, every
  list and object bounded in length, a bounded depth, and a marker wherever something was cut;
- `fit_column`: text for a column (a reason, an error), cleaned and cut to the column's length,
  the one bound of such text.
"""

from __future__ import annotations

import logging
import re
from typing import Any

logger = logging.getLogger(__name__)

# Kept: tab and newline. Dropped: the other C0 controls, DEL, the C1 controls, and the
# bidirectional overrides that make shown text read differently from what it is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
CUT_MARK = "… [cut: {} more characters]"
DEFAULT_TEXT_LIMIT = 2000
# The most of a text `fit_column` logs whole.
WHOLE_TEXT_LIMIT = 16 * 1024


def clean_text(value: object, limit: int = DEFAULT_TEXT_LIMIT, *, one_line: bool = False) -> str:
    """`value` as text a page, a log or a database row can hold: control characters removed
    (newlines too, with `one_line`), at most `limit` characters, a cut marked as such."""
    text = value if isinstance(value, str) else str(value)
    text = text.replace("\r\n", "\n")
    if one_line:
        text = text.replace("\n", " ").replace("\t", " ")
    text = _CONTROL.sub("", text)
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(CUT_MARK.format(len(text))))  # the mark's longest form
    return text[:keep] + CUT_MARK.format(len(text) - keep)


def fit_column(text: object, column, what: str) -> str:
    """`text` cleaned and cut to fit `column` (a VARCHAR's length), the cut marked; the whole
    text goes to the log first, so a long reason (a start failure's log tail) is never lost, and
    the write never fails for its length. `what` names it in the log."""
    whole = clean_text(text, WHOLE_TEXT_LIMIT)
    limit = column.type.length
    if len(whole) > limit:
        logger.warning(
            "%s, in full (cut to %d characters in the database):\n%s", what, limit, whole
        )
    return clean_text(whole, limit)


def clean_lines(text: str, *, lines: int, limit: int) -> str:
    """The last `lines` lines of `text`, cleaned and bounded (a log's tail in a reason)."""
    tail = "\n".join(text.splitlines()[-lines:])
    return clean_text(tail[-limit:] if len(tail) > limit else tail, limit)


class Limits:
    """How much of a JSON value from a unit is kept."""

    def __init__(
        self, *, string: int = DEFAULT_TEXT_LIMIT, items: int = 500, depth: int = 8
    ) -> None:
        self.string, self.items, self.depth = string, items, depth


def bounded(value: Any, limits: Limits = Limits(), _depth: int = 0) -> Any:
    """`value` (parsed JSON) with every part bounded by `limits`. A cut string ends with
    CUT_MARK; a cut list ends with a string saying how many items were cut; a cut object gets
    the key "…" saying how many keys were; what lies deeper than `limits.depth` becomes a
    string saying so. Numbers, booleans and null pass unchanged."""
    if isinstance(value, str):
        return clean_text(value, limits.string)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if _depth >= limits.depth:
        return "… [cut: nested too deeply]"
    if isinstance(value, list):
        kept = [bounded(item, limits, _depth + 1) for item in value[: limits.items]]
        if len(value) > limits.items:
            kept.append(f"… [cut: {len(value) - limits.items} more items]")
        return kept
    if isinstance(value, dict):
        items = list(value.items())
        kept = {
            clean_text(key, 200, one_line=True): bounded(item, limits, _depth + 1)
            for key, item in items[: limits.items]
        }
        if len(items) > limits.items:
            kept["…"] = f"[cut: {len(items) - limits.items} more keys]"
        return kept
    return clean_text(repr(value), limits.string)
