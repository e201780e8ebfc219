"""Compute units: Ray clusters (hosting Spark through RayDP) that users start, watch and stop.

Modules:
- `routes.py` — the pages: list, create, a unit's page, terminate
- `lifecycle.py` — one unit's life: compare-and-set states, the per-user limit, start and stop
- `supervision.py` — the worker's passes over all units: pending work, idle, dead, shutdown
- `pool.py` — the warm pool of ownerless standby units: the claim, the refill, its summary
- `door.py` — the one door to a unit's Spark host: ready, submit, watch, wait, cancel
- `phase.py` — the page's phase: the state, plus WARMING
- `forms.py` — the create form and its limits
- `backends.py` — a unit's kind → its cluster backend
"""

from flask import Blueprint

bp = Blueprint("compute_units", __name__, url_prefix="/compute-units")

from app.compute_units import routes  # noqa: E402,F401
