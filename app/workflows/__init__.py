"""Workflows: named, versioned pipelines of Spark SQL and PySpark steps, and the data sources
(uploads, TPC-H sample data) users put into their warehouses for them.

Modules:
- `routes.py` — the pages
- `service.py` — create, save a version (every save is a new one), delete; which version is
  which; an upload imported, sample data asked for
- `queries.py` — what the pages read: a user's workflows, a workflow's versions, the latest
  sample-data job
- `work.py` — the worker's side: sample-data jobs (TPC-H generated and written into `tpch`)
- `steps.py` — the step model and per-step checks
- `forms.py` — the workflow and data-source forms
- `sharing.py` — sharing a workflow: levels, access checks, shares
- `dataset_tables.py` — data sources written as Iceberg tables of a warehouse: a CSV or Parquet
  file read, a table replaced in place or swapped
"""

from flask import Blueprint

bp = Blueprint("workflows", __name__, url_prefix="/workflows")

from app.workflows import routes  # noqa: E402,F401
