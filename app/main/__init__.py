"""The dashboard and the health endpoint."""

from flask import Blueprint

bp = Blueprint("main", __name__)

from app.main import display, routes  # noqa: E402,F401
