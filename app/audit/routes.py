"""The audit trail's page: an owner reads the events on their objects and their own actions, an
operator everything; filtered, paged (newest first) and exported as CSV."""

from __future__ import annotations

from flask import Response, render_template, request
from flask_login import current_user

from app.audit import bp, trail
from app.roles import is_operator


@bp.get("/")
def index():
    filters = trail.Filters.from_args(request.args)
    before = request.args.get("before", type=int)
    events = trail.visible_events(
        current_user, is_operator(current_user), filters, before_id=before
    )
    context = {
        "events": events,
        "filters": filters,
        "everything": is_operator(current_user),
        "older": events[-1].id if len(events) == trail.PAGE_SIZE else None,
    }
    return render_template("audit/_events.html" if request.htmx else "audit/index.html", **context)


@bp.get("/export.csv")
def export():
    filters = trail.Filters.from_args(request.args)
    events = trail.visible_events(
        current_user, is_operator(current_user), filters, limit=trail.EXPORT_LIMIT
    )
    return Response(
        trail.as_csv(events),
        mimetype="text/csv",
        headers={"Content-Disposition": 'attachment; filename="lakeport-audit.csv"'},
    )
