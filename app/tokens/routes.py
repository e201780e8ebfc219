from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from flask_login import current_user

from app.db import get_owned_or_404
from app.models import ApiToken, utcnow
from app.tokens import bp, queries, service


@bp.get("/")
def index():
    return _page()


@bp.post("/")
def create():
    try:
        made = service.create(
            current_user,
            request.form.get("name", ""),
            request.form.get("scope", ""),
            request.form.get("days", ""),
        )
    except service.TokenRefused as refusal:
        return _page(errors={refusal.field or "form": refusal.message}, values=request.form), 422
    return _page(made=made)


@bp.post("/<int:token_id>/revoke")
def revoke(token_id: int):
    token = get_owned_or_404(ApiToken, token_id)
    service.revoke(token)
    flash(f"Token {token.name} is revoked: it opens nothing from now on.", "info")
    return redirect(url_for("tokens.index"))


def _page(made: service.NewToken | None = None, errors: dict | None = None, values=None):
    return render_template(
        "tokens/index.html",
        tokens=queries.user_tokens(current_user),
        made=made,
        errors=errors or {},
        values=values or {},
        scopes=service.SCOPES,
        max_days=service.MAX_DAYS,
        now=utcnow(),
    )
