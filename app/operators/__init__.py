"""The operators' view: every unit, execution and warehouse (metadata only), per-user usage,
stopping any unit or execution. For members of LAKEPORT_OPERATORS_GROUP; 404 for anyone else.

Modules:
- `queries.py` — what the page reads: every user's units, executions and warehouses (metadata
  only); per-user usage
- `routes.py` — the Operators page; terminate any unit, cancel any execution
"""

from flask import Blueprint

bp = Blueprint("operators", __name__, url_prefix="/operators")

from app.operators import routes  # noqa: E402,F401
