"""What the features' pages share: the redirect after an action, the shares panel's context,
every template filter and test, and the states templates compare with (`init_app` registers the
last two on the app)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

from flask import Flask, redirect, request, url_for
from htmx_flask import make_response
from markupsafe import Markup, escape

from app.charts import human_bytes
from app.db import get_db
from app.models import User
from app.states import ExecutionState, JobState, UnitState


def redirect_to(url: str):
    """After an action: a redirect, as HTMX or as a plain browser expects it (HTMX would follow
    a 302 inside its request and swap the next page into the target; HX-Redirect loads it)."""
    return make_response("", redirect=url) if request.htmx else redirect(url)


# --- The shares panel (templates/_shares.html) of a warehouse or a workflow ---


@dataclass(frozen=True)
class SharesPanel:
    """What differs between the shares panels of two kinds of shared things."""

    thing: (
        str  # "warehouse" or "workflow": its routes are `<thing>s.share`, `<thing>s.revoke_share`
    )
    levels: dict[str, str]  # level → what it allows, as the form offers them
    default_level: str
    revoke_effect: str  # what revoking does, asked before it is done
    stays_yours: str  # what sharing never hands over


def shares_context(
    panel: SharesPanel,
    thing,
    *,
    access: str,
    shares: list,
    can_share: bool = True,
    errors: dict | None = None,
    values=None,
) -> dict:
    """The context templates/_shares.html reads, for `thing` (a Warehouse or a Workflow) as the
    signed-in user sees it: `access` is theirs to it, `shares` its (share, user) pairs; `errors`
    and `values` are a refused share form's."""
    id_arg = {f"{panel.thing}_id": thing.id}
    return {
        "access": access,
        "owner": get_db().get(User, thing.owner_id),
        "shares": shares,
        "share_levels": panel.levels,
        "share_errors": errors or {},
        "share_values": values or {"kind": "group", "level": panel.default_level},
        "shared_thing": panel.thing,
        "can_share": can_share,
        "share_url": url_for(f"{panel.thing}s.share", **id_arg),
        "revoke_endpoint": f"{panel.thing}s.revoke_share",
        "revoke_args": id_arg,
        "revoke_effect": panel.revoke_effect,
        "stays_yours": panel.stays_yours,
    }


# --- Template filters and tests ---


_BREAK_AFTER = re.compile(r"([_.])")


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _moment(value: datetime | float | None) -> datetime | None:
    """A log line's moment: epoch seconds in the live progress, a datetime in console_logs."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(value, timezone.utc)


def duration(start: datetime | None, end: datetime | None = None) -> str:
    """ "1 h 02 min", "3 min 07 s", "12 s"; up to now when `end` is None; "—" without a start."""
    if start is None:
        return "—"
    seconds = max(0, int((_utc(end or datetime.now(timezone.utc)) - _utc(start)).total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {seconds:02d} s"
    return f"{seconds} s"


def iso_utc(moment: datetime | None) -> str:
    """For <time datetime=… data-local>: the page's script shows it in the viewer's time zone."""
    return _utc(moment).isoformat() if moment else ""


def epoch_ms_iso(milliseconds: int) -> str:
    """Iceberg's commit times (epoch milliseconds) as ISO 8601 in UTC."""
    return datetime.fromtimestamp(milliseconds / 1000, timezone.utc).isoformat(timespec="seconds")


def log_time(value) -> str:
    """A log line's time (epoch seconds from the compute unit, or a datetime) as HH:MM:SS."""
    return moment.strftime("%H:%M:%S") if (moment := _moment(value)) else ""


def log_iso(value) -> str:
    """A log line's time in ISO 8601 (for <time datetime=… data-local>)."""
    return moment.isoformat() if (moment := _moment(value)) else ""


def ms_time(value) -> str:
    """A snapshot's time (epoch milliseconds) as YYYY-MM-DD HH:MM:SS UTC."""
    if value is None:
        return ""
    return datetime.fromtimestamp(value / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def breakable(name: str) -> Markup:
    """`name`, escaped, with a line-break opportunity after each `_` and `.` (browsers break after
    a `-` already), so a long identifier in a narrow cell wraps between its parts."""
    return Markup(_BREAK_AFTER.sub(r"\1<wbr>", str(escape(name))))


def aware_datetime(value) -> bool:
    """A moment with a time zone (an Iceberg timestamptz): shown in the viewer's time zone."""
    return isinstance(value, datetime) and value.tzinfo is not None


FILTERS = {
    "duration": duration,
    "iso_utc": iso_utc,
    "epoch_ms_iso": epoch_ms_iso,
    "log_time": log_time,
    "log_iso": log_iso,
    "ms_time": ms_time,
    "human_bytes": human_bytes,
    "breakable": breakable,
}
TESTS = {"aware_datetime": aware_datetime}
# What templates compare states with (`cu.state in UnitState.FINAL`), never a quoted name.
STATES = {"ExecutionState": ExecutionState, "UnitState": UnitState, "JobState": JobState}


def init_app(app: Flask) -> None:
    app.jinja_env.filters.update(FILTERS)
    app.jinja_env.tests.update(TESTS)
    app.jinja_env.globals.update(STATES)
