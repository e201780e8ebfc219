from __future__ import annotations

from flask import current_app, jsonify, redirect, render_template, url_for
from flask_login import current_user
from sqlalchemy import text

from app.auth.oidc import provider_reachable
from app.compute_units import pool
from app.db import get_db
from app.main import bp
from app.main.queries import overview_of


@bp.get("/")
def dashboard():
    return render_template(
        "main/dashboard.html", user=current_user, overview=overview_of(current_user)
    )


def _database_reachable() -> bool:
    try:
        get_db().exec(text("SELECT 1"))
    except Exception:  # any driver error means "not reachable" for a health check
        return False
    return True


@bp.get("/favicon.ico")
def favicon():
    """Browsers ask for /favicon.ico whatever the page's icon link says; send them to the icon."""
    return redirect(url_for("static", filename="favicon.svg"), 301)


@bp.get("/health")
def health():
    checks = {
        "database": "ok" if _database_reachable() else "unreachable",
        "identity_provider": "ok" if provider_reachable() else "unreachable",
    }
    healthy = all(value == "ok" for value in checks.values())
    extra = {}
    if healthy and current_app.config["CU_POOL_SIZE"]:  # the warm pool is the operators' to watch
        extra["unit_pool"] = pool.summary().to_json()
    return jsonify(
        status="ok" if healthy else "degraded", checks=checks, **extra
    ), 200 if healthy else 503
