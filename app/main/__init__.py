"""The dashboard and the health endpoint.

Modules:
- `routes.py` — the dashboard and `/health`
- `queries.py` — what the dashboard shows: what runs, what ran, where data goes, first steps
"""

from flask import Blueprint

bp = Blueprint("main", __name__)

from app.main import routes  # noqa: E402,F401
