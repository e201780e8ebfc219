"""Executions: runs of a workflow version on a compute unit, writing into one warehouse.

Modules:
- `routes.py` — the pages: run, an execution's page, its results, logs, cancel, compare
- `service.py` — the request side: start (the checks), re-run pinned, cancel; the row's
  compare-and-set state changes, which the worker records through too
- `queries.py` — what pages read: lists and filters of executions, the run dialog's choices,
  what a run recorded
- `work.py` — the worker's side: pending work, drive (prepare, submit through the unit's door,
  watch, resume), cancels passed on, comparison jobs; joins the worker's registry
- `stopping.py` — stopping the executions a closing warehouse or a revoked share no longer allows
- `run_spec.py` — what a run is given: its ExecutionSpec, typed
- `unit_reports.py` — what a unit reports of a run, checked and bounded
- `results.py` — an execution's tables in its warehouse (outputs, runtime stats, logs)
- `logs.py` — the console-log viewer: filtered on the server, paged
- `forms.py` — the run form
- `seen_version.py` — a run runs the version its runner saw; whose code runs with whose rights
- `notifications.py` — what a user may ask to be told when a run ends: checks, signed webhooks
- `delivery.py` — the worker's delivery of those notifications: webhooks, emails, retries
- `comparison.py` — comparing two runs: metadata, and the differing rows asked for as a job
"""

from flask import Blueprint

bp = Blueprint("executions", __name__, url_prefix="/executions")

from app.executions import routes, stopping  # noqa: E402,F401
from app.signals import shares_changed, warehouse_closing  # noqa: E402

# A warehouse that stops taking writes stops the executions writing into it.
warehouse_closing.connect(stopping.stop_in_warehouse)
# A share revoked or downgraded stops the sharee's executions it no longer allows.
shares_changed.connect(stopping.stop_unshared)
