"""Single sign-on: OpenID Connect sign-in, sign-out and the user session."""

from flask import Blueprint

bp = Blueprint("auth", __name__, url_prefix="/auth")

from app.auth import routes  # noqa: E402,F401  (registers the routes on bp)
