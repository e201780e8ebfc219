"""Compute units: Ray clusters (hosting Spark through RayDP) that users start, watch and stop."""

from flask import Blueprint

bp = Blueprint("compute_units", __name__, url_prefix="/compute-units")

from app.compute_units import routes  # noqa: E402,F401
