"""The SQL console: one statement at a time against a warehouse, on one of the user's units.

Modules:
- `routes.py` — the Query page: the form, a query's live result (paged, sorted), CSV, cancel,
  run again, the history, the editor's completion (JSON)
- `service.py` — the request side: the checks (warehouse, unit, read-only unless asked), the
  recorded query, its cancel, the audit of writes; the row's compare-and-set changes
- `queries.py` — what pages read: the warehouses and units to pick, the history, a result's
  pages and CSV
- `work.py` — the worker's side: each live query run through the unit's door, watched,
  cancelled, its result checked and bounded; joins the worker's registry
- `forms.py` — the console's form
- `completions.py` — what the editor completes: a warehouse's namespaces, tables and columns
  from the catalog, kept per warehouse until it is old or refreshed
"""

from flask import Blueprint

bp = Blueprint("console", __name__, url_prefix="/console")

from app.console import routes  # noqa: E402,F401
