"""Charts drawn on the server as SVG: no JavaScript, and nothing the Content-Security-Policy
forbids (presentation attributes, no inline style)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

WIDTH = 760
LABEL_WIDTH = 150
BAR_AREA = 440
ROW_HEIGHT = 30
BAR_HEIGHT = 18
AXIS_HEIGHT = 30
TICKS = 4
STATUS_COLORS = {
    "done": "#2e7d32",
    "completed": "#2e7d32",
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "cancelled": "#757575",
    "skipped": "#9e9e9e",
}
OTHER_COLOR = "#1565c0"


@dataclass(frozen=True)
class StepTiming:
    """One step of an execution as the timeline draws it: seconds after the first step started."""

    name: str
    status: str
    start_s: float
    duration_s: float
    rows_out: int | None = None


def _short(name: str, limit: int = 22) -> str:
    """A label that fits the label column (the full name is in the bar's tooltip)."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _seconds(value: float) -> str:
    """ "1.5 s", "120 ms", and for steps of a few milliseconds "0.4 ms" (so the axis does not
    read "0 ms" at every tick)."""
    if value >= 1:
        return f"{value:.1f} s"
    return f"{value * 1000:.1f} ms" if value < 0.01 else f"{value * 1000:.0f} ms"


def step_timeline_svg(steps: list[StepTiming]) -> Markup:
    """A timeline of the steps: one bar per step from its start for its duration, coloured by
    status, labelled with its duration and output rows; a time axis below."""
    span = max((step.start_s + step.duration_s for step in steps), default=0.0) or 1.0
    height = len(steps) * ROW_HEIGHT + AXIS_HEIGHT
    scale = BAR_AREA / span
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
        f'aria-label="Step timeline" data-testid="runtime-chart" font-family="sans-serif" font-size="12">'
    ]
    for index, step in enumerate(steps):
        top = index * ROW_HEIGHT
        x = LABEL_WIDTH + step.start_s * scale
        width = max(2.0, step.duration_s * scale)
        color = STATUS_COLORS.get(step.status.lower(), OTHER_COLOR)
        rows = f" · {step.rows_out:,} rows" if step.rows_out is not None else ""
        label = f"{_seconds(step.duration_s)}{rows}"
        parts.append(
            f'<g data-step="{escape(step.name)}">'
            f"<title>{escape(step.name)}: {escape(step.status)}, {escape(label)}</title>"
            f'<text x="{LABEL_WIDTH - 8}" y="{top + ROW_HEIGHT / 2 + 4}" text-anchor="end" fill="currentColor">'
            f"{escape(_short(step.name))}</text>"
            f'<rect x="{x:.1f}" y="{top + (ROW_HEIGHT - BAR_HEIGHT) / 2}" width="{width:.1f}" height="{BAR_HEIGHT}" '
            f'rx="3" fill="{color}"/>'
            f'<text x="{x + width + 6:.1f}" y="{top + ROW_HEIGHT / 2 + 4}" fill="currentColor">{escape(label)}</text>'
            f"</g>"
        )
    axis_y = len(steps) * ROW_HEIGHT + 4
    parts.append(
        f'<line x1="{LABEL_WIDTH}" y1="{axis_y}" x2="{LABEL_WIDTH + BAR_AREA}" y2="{axis_y}" '
        f'stroke="currentColor" stroke-opacity="0.4"/>'
    )
    for tick in range(TICKS + 1):
        seconds = span * tick / TICKS
        x = LABEL_WIDTH + seconds * scale
        parts.append(
            f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="currentColor" '
            f'stroke-opacity="0.4"/>'
            f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="middle" fill="currentColor" '
            f'fill-opacity="0.7">{_seconds(seconds)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


CHART_HEIGHT = 180
AXIS_WIDTH = 80


def human_bytes(value: float) -> str:
    """1536 → "1.5 KiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def storage_history_svg(points: list[tuple[datetime, int]]) -> Markup:
    """A warehouse's live bytes over time: one point per sample, joined by a line over a shaded
    area; a byte axis on the left, the first and last sample's time below."""
    first, last = points[0][0], points[-1][0]
    span = (last - first).total_seconds() or 1.0
    top = max(value for _, value in points) or 1
    plot_width = WIDTH - AXIS_WIDTH - 10
    height = CHART_HEIGHT + AXIS_HEIGHT

    def xy(at: datetime, value: int) -> tuple[float, float]:
        return (
            AXIS_WIDTH + (at - first).total_seconds() / span * plot_width,
            10 + (1 - value / top) * (CHART_HEIGHT - 10),
        )

    coordinates = [xy(at, value) for at, value in points]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coordinates)
    area = f"{AXIS_WIDTH},{CHART_HEIGHT} {line} {coordinates[-1][0]:.1f},{CHART_HEIGHT}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
        f'aria-label="Live storage over time" data-testid="storage-chart" font-family="sans-serif" font-size="12">',
        f'<polygon points="{area}" fill="{OTHER_COLOR}" fill-opacity="0.15"/>',
        f'<polyline points="{line}" fill="none" stroke="{OTHER_COLOR}" stroke-width="2"/>',
    ]
    for tick in range(TICKS + 1):
        value = top * tick / TICKS
        _, y = xy(first, value)
        parts.append(
            f'<line x1="{AXIS_WIDTH}" y1="{y:.1f}" x2="{WIDTH - 10}" y2="{y:.1f}" stroke="currentColor" '
            f'stroke-opacity="0.1"/><text x="{AXIS_WIDTH - 6}" y="{y + 4:.1f}" text-anchor="end" '
            f'fill="currentColor" fill-opacity="0.7">{escape(human_bytes(value))}</text>'
        )
    for (at, value), (x, y) in zip(points, coordinates):
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{OTHER_COLOR}">'
            f"<title>{at:%Y-%m-%d %H:%M}: {escape(human_bytes(value))}</title></circle>"
        )
    for at, anchor, x in ((first, "start", AXIS_WIDTH), (last, "end", WIDTH - 10)):
        parts.append(
            f'<text x="{x}" y="{CHART_HEIGHT + 20}" text-anchor="{anchor}" fill="currentColor" '
            f'fill-opacity="0.7">{at:%Y-%m-%d %H:%M}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
