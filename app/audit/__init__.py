"""The audit trail: who did what to which object, when and from where (append-only).

Modules:
- `service.py` — `record`: one event appended after a state change succeeds, never a secret
- `queries.py` — the events a viewer may read, filtered and paged; their CSV export
- `routes.py` — the Audit trail page and its export
"""

from flask import Blueprint

bp = Blueprint("audit", __name__, url_prefix="/audit")

from app.audit import routes  # noqa: E402,F401
