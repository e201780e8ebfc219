"""Workflows: named, versioned pipelines of Spark SQL and PySpark steps, and the data sources
(uploads, TPC-H sample data) users put into their warehouses for them."""

from flask import Blueprint

bp = Blueprint("workflows", __name__, url_prefix="/workflows")

from app.workflows import routes  # noqa: E402,F401
