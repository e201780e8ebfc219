from __future__ import annotations

from urllib.parse import urlsplit

from flask import current_app, flash, redirect, render_template, request, session, url_for
from flask_login import current_user, login_user, logout_user

from app.audit import service as audit
from app.auth import bp, oidc
from app.auth.service import begin_session, upsert_user_from_claims
from app.warehouses import sharing

NEXT_KEY = "lakeport_next"


def _safe_next(target: str | None) -> str | None:
    """Only same-site paths are followed after sign-in (no open redirects)."""
    if not target:
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return None
    return target


@bp.get("/login")
def login():
    if current_user.is_authenticated:
        return redirect(url_for("main.dashboard"))
    return render_template("auth/login.html", next=_safe_next(request.args.get("next")))


@bp.get("/login/start")
def start():
    session[NEXT_KEY] = _safe_next(request.args.get("next")) or url_for("main.dashboard")
    return oidc.start_sign_in()


@bp.get("/callback")
def callback():
    claims, refresh_token = oidc.finish_sign_in(request.args)
    user = upsert_user_from_claims(current_app.config["OIDC_ISSUER"], claims, refresh_token)
    # The catalog's roles of shared groups follow the groups the provider sends now.
    sharing.sync_memberships(user)
    target = _safe_next(session.pop(NEXT_KEY, None)) or url_for("main.dashboard")
    # A fresh session on sign-in, so nothing from before it carries over.
    session.clear()
    begin_session(user)
    login_user(user)
    current_app.logger.info("user %s signed in", user.id)
    audit.record("user.sign_in", user, owner_id=user.id, groups=user.group_names)
    return redirect(target)


@bp.post("/logout")
def logout():
    if current_user.is_authenticated:
        audit.record("user.sign_out", current_user, owner_id=current_user.id)
    logout_user()
    session.clear()
    provider_logout = oidc.sign_out_url()
    return redirect(provider_logout) if provider_logout else logged_out()


@bp.get("/logged-out")
def logged_out():
    flash("You have signed out.", "info")
    return redirect(url_for("auth.login"))


@bp.app_errorhandler(oidc.SignInError)
def sign_in_error(error: oidc.SignInError):
    current_app.logger.warning("sign-in failed: %s", error.title)
    return render_template("auth/sign_in_error.html", error=error), error.status
