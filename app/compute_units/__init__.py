"""Compute units: Ray clusters (hosting Spark through RayDP) that users start, watch and stop.

Modules:
- `routes.py` — the pages: list, create, a unit's page, terminate, clear
- `service.py` — the request side: create (the per-user limit), terminate, clear; the row's
  compare-and-set state changes and events, which the worker records through too
- `queries.py` — what pages read: a user's units, a unit's events and live executions, the
  worker's last check of its cluster
- `work.py` — the worker's side: pending work (start, stop, clean up, refill the pool) and doing
  it; joins the worker's registry (with the supervisor pass); the local stack's shutdown
- `supervision.py` — the worker's supervisor pass: idle units stopped, every RUNNING one checked
  against its cluster
- `pool.py` — the warm pool of ownerless standby units: its size, the claim, its summary
- `door.py` — the one door to a unit's Spark host (`UnitDoor`, one per unit): ready, submit,
  watch, cancel, touch, usage; the run's catalog token and binding
- `handles.py` — a unit's cluster: its backend and its handle (secrets restored for the worker)
- `phase.py` — the page's phase: the state, plus WARMING
- `forms.py` — the create form and its limits
- `backends.py` — a unit's kind → its cluster backend
"""

from flask import Blueprint

bp = Blueprint("compute_units", __name__, url_prefix="/compute-units")

from app.compute_units import routes  # noqa: E402,F401
