"""Executions: runs of a workflow version on a compute unit, writing into one warehouse."""
from flask import Blueprint

bp = Blueprint("executions", __name__, url_prefix="/executions")

from app.executions import routes  # noqa: E402,F401
