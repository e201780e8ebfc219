"""Personal access tokens for the API: made, listed and revoked on the Tokens page."""

from flask import Blueprint

bp = Blueprint("tokens", __name__, url_prefix="/tokens")

from app.tokens import routes  # noqa: E402,F401
