"""Workflows: named, versioned pipelines of Spark SQL and PySpark steps, and the data sources
(uploads, TPC-H sample data) users put into their warehouses for them.

Modules:
- `routes.py` — the pages
- `service.py` — create, save a version (every save is a new one), delete; which version is which
- `queries.py` — what the pages read: a user's workflows, a workflow's versions, the latest
  sample-data job
- `work.py` — the worker's side: sample-data jobs (TPC-H generated and written into `tpch`)
- `steps.py` — the step model and per-step checks
- `forms.py` — the workflow and data-source forms
- `sharing.py` — sharing a workflow: levels, access checks, shares
- `datasets.py` — data sources written into a warehouse: CSV/Parquet uploads, sample data asked
  for, and the table writing both use
"""

from flask import Blueprint

bp = Blueprint("workflows", __name__, url_prefix="/workflows")

from app.workflows import routes  # noqa: E402,F401
