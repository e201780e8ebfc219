"""Executions: runs of a workflow version on a compute unit, writing into one warehouse.

Modules:
- `routes.py` — the pages: run, an execution's page, its results, logs, cancel, compare
- `runner.py` — the worker's part: prepare, submit through the door, watch, resume
- `stopping.py` — stopping the executions a closing warehouse or a revoked share no longer allows
- `run_spec.py` — what a run is given: its ExecutionSpec
- `unit_reports.py` — what a unit reports of a run, checked and bounded
- `history.py` — lists and filters of executions
- `results.py` — an execution's tables in its warehouse (outputs, runtime stats, logs)
- `logs.py` — the console-log viewer: filtered on the server, paged
- `forms.py` — the run form
- `seen_version.py` — a run runs the version its runner saw; whose code runs with whose rights
- `notifications.py` — telling a user a run ended: signed webhooks, emails; retried by the worker
- `comparison.py` — comparing two runs: metadata here, differing rows as a job on a unit
"""

from flask import Blueprint

bp = Blueprint("executions", __name__, url_prefix="/executions")

from app.executions import routes, stopping  # noqa: E402,F401
from app.signals import shares_changed, warehouse_closing  # noqa: E402

# A warehouse that stops taking writes stops the executions writing into it.
warehouse_closing.connect(stopping.stop_in_warehouse)
# A share revoked or downgraded stops the sharee's executions it no longer allows.
shares_changed.connect(stopping.stop_unshared)
