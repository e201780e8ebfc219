"""The dashboard and the health endpoint.

Modules:
- `routes.py` — the dashboard and `/health`
- `overview.py` — what the dashboard shows: what runs, what ran, where data goes, first steps
- `display.py` — formatting helpers the templates share
"""

from flask import Blueprint

bp = Blueprint("main", __name__)

from app.main import display, routes  # noqa: E402,F401
