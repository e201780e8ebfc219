"""Workflows: named, versioned pipelines of Spark SQL and PySpark steps, and the data sources
(uploads, TPC-H sample data) users put into their warehouses for them.

Modules:
- `routes.py` — the pages
- `service.py` — versions: every save is a new one
- `steps.py` — the step model and per-step checks
- `forms.py` — the workflow form
- `sharing.py` — sharing a workflow: levels, access checks, shares
- `datasets.py` — CSV/Parquet uploads and TPC-H sample data, put in by the worker
"""

from flask import Blueprint

bp = Blueprint("workflows", __name__, url_prefix="/workflows")

from app.workflows import routes  # noqa: E402,F401
