"""The audit trail: who did what to which object, when and from where (append-only)."""

from flask import Blueprint

bp = Blueprint("audit", __name__, url_prefix="/audit")

from app.audit import routes  # noqa: E402,F401
