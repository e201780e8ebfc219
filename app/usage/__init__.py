"""Usage and retention: what runs cost (storage written, compute used, live storage per
warehouse) and how long a warehouse keeps what executions write."""

from flask import Blueprint

bp = Blueprint("usage", __name__)

from app.usage import routes  # noqa: E402,F401
