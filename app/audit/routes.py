"""The audit trail's page: an owner reads the events on their objects and their own actions, an
operator everything; filtered, paged (newest first) and exported as CSV."""

from __future__ import annotations

from flask import Response, render_template, request
from flask_login import current_user

from app.audit import bp, queries
from app.roles import is_operator


@bp.get("/")
def index():
    filters = queries.Filters.from_args(request.args)
    before = request.args.get("before", type=int)
    events = queries.visible_events(
        current_user, is_operator(current_user), filters, before_id=before
    )
    context = {
        "events": events,
        "filters": filters,
        "everything": is_operator(current_user),
        "older": events[-1].id if len(events) == queries.PAGE_SIZE else None,
    }
    return render_template("audit/_events.html" if request.htmx else "audit/index.html", **context)


@bp.get("/export.csv")
def export():
    filters = queries.Filters.from_args(request.args)
    events = queries.visible_events(
        current_user, is_operator(current_user), filters, limit=queries.EXPORT_LIMIT
    )
    return Response(
        queries.as_csv(events),
        mimetype="text/csv",
        headers={"Content-Disposition": 'attachment; filename="lakeport-audit.csv"'},
    )
