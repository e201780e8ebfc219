"""Small formatting helpers the templates share (durations, times for the viewer's clock)."""

from __future__ import annotations

from datetime import datetime, timezone

from app.main import bp


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


@bp.app_template_filter("duration")
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


@bp.app_template_filter("iso_utc")
def iso_utc(moment: datetime | None) -> str:
    """For <time datetime=… data-local>: the page's script shows it in the viewer's time zone."""
    return _utc(moment).isoformat() if moment else ""


@bp.app_template_filter("epoch_ms_iso")
def epoch_ms_iso(milliseconds: int) -> str:
    """Iceberg's commit times (epoch milliseconds) as ISO 8601 in UTC."""
    return datetime.fromtimestamp(milliseconds / 1000, timezone.utc).isoformat(timespec="seconds")


@bp.app_template_test("aware_datetime")
def aware_datetime(value) -> bool:
    """A moment with a time zone (an Iceberg timestamptz): shown in the viewer's time zone."""
    return isinstance(value, datetime) and value.tzinfo is not None
