"""Usage and retention: what runs cost (storage written, compute used, live storage per
warehouse) and how long a warehouse keeps what executions write.

Modules:
- `accounting.py` — the worker's usage pass: per execution, per warehouse, per user
- `retention.py` — a warehouse's retention policy: preview, enforcement, log
- `maintenance.py` — dataset snapshot expiry, run on the owner's unit
- `routes.py` — `/usage`, and the warehouse page's storage and retention sections
"""

from flask import Blueprint

bp = Blueprint("usage", __name__)

from app.usage import routes  # noqa: E402,F401
