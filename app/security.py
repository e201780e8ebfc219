"""The security baseline: CSRF on every state-changing request, security headers, sign-in required.

CSRF tokens travel in a form field for plain forms and in the `X-CSRFToken` header for
HTMX requests (set once on <body> with `hx-headers`). The Content-Security-Policy allows
no inline script; the only other origin is the identity provider, where sign-out posts
end up.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from flask import Flask, g, redirect, render_template, request, url_for
from flask_login import LoginManager, current_user
from flask_wtf.csrf import CSRFError, CSRFProtect

csrf = CSRFProtect()
login_manager = LoginManager()

# Endpoints that answer without a signed-in user.
PUBLIC_ENDPOINTS = {
    "static",
    "main.favicon",
    "main.health",
    "auth.login",
    "auth.start",
    "auth.callback",
    "auth.logged_out",
    "api.openapi_json",
}
# The API authenticates its callers itself, by token (app/api/auth.py); its reference page is a page.
API_BLUEPRINT, API_PAGES = "api", {"api.openapi_docs"}


def init_app(app: Flask) -> None:
    from app.auth.service import load_user

    login_manager.init_app(app)
    login_manager.user_loader(load_user)
    login_manager.session_protection = "basic"
    # Before the CSRF check: a request without a session (never signed in, or expired) is sent
    # to sign in, rather than told that its form expired.
    app.before_request(require_sign_in)
    csrf.init_app(app)
    app.after_request(lambda response: add_security_headers(app, response))
    app.register_error_handler(CSRFError, csrf_error)
    app.jinja_env.globals["csp_nonce"] = csp_nonce


def require_sign_in():
    if request.blueprint == API_BLUEPRINT and request.endpoint not in API_PAGES:
        return None
    if request.path.startswith("/api/") and request.endpoint is None:
        return None  # no such API route: a problem document says so, not the sign-in page
    if request.endpoint in PUBLIC_ENDPOINTS or current_user.is_authenticated:
        return None
    login_url = url_for(
        "auth.login", next=request.full_path.rstrip("?") if request.method == "GET" else None
    )
    if request.headers.get("HX-Request") == "true":
        # A partial must not receive the login page: tell htmx to navigate instead.
        return "", 401, {"HX-Redirect": login_url}
    return redirect(login_url)


def csp_nonce() -> str:
    """This response's style nonce, for a script that must add a <style> element (the code
    editor's). Only pages that ask for it allow nonced styles; others stay at 'self'."""
    if "csp_nonce" not in g:
        g.csp_nonce = secrets.token_urlsafe(16)
    return g.csp_nonce


def content_security_policy(app: Flask) -> str:
    issuer = urlsplit(app.config["OIDC_ISSUER"])
    provider_origin = f"{issuer.scheme}://{issuer.netloc}"
    nonce = g.get("csp_nonce")
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            f"style-src 'self' 'nonce-{nonce}'" if nonce else "style-src 'self'",
            "img-src 'self' data:",
            "object-src 'none'",
            "base-uri 'self'",
            "frame-ancestors 'none'",
            f"form-action 'self' {provider_origin}",
        ]
    )


def add_security_headers(app: Flask, response):
    headers = response.headers
    headers.setdefault("Content-Security-Policy", content_security_policy(app))
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("Referrer-Policy", "same-origin")
    headers.setdefault("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
    if app.config["SESSION_COOKIE_SECURE"]:
        headers.setdefault("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
    if request.endpoint != "static":
        headers.setdefault("Cache-Control", "no-store")
    return response


def error_page(title: str, message: str, status: int):
    """An error as a page, or as an inline message for an HTMX request (which swaps in a part)."""
    if request.headers.get("HX-Request") == "true":
        return render_template("_error_inline.html", message=message), status
    return render_template("error.html", title=title, message=message), status


def csrf_error(error: CSRFError):
    return error_page(
        "Request refused",
        "This form expired or did not come from Lakeport. Reload the page and try again.",
        400,
    )
