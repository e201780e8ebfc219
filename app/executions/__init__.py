"""Executions: runs of a workflow version on a compute unit, writing into one warehouse."""

from flask import Blueprint

bp = Blueprint("executions", __name__, url_prefix="/executions")

from app.executions import routes, stopping  # noqa: E402,F401
from app.signals import shares_changed, warehouse_closing  # noqa: E402

# A warehouse that stops taking writes stops the executions writing into it.
warehouse_closing.connect(stopping.stop_in_warehouse)
# A share revoked or downgraded stops the sharee's executions it no longer allows.
shares_changed.connect(stopping.stop_unshared)
