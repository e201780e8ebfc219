"""Warehouses: bring-your-own-S3 storage registered in Lakekeeper; Lakeport keeps no secret."""

from flask import Blueprint

bp = Blueprint("warehouses", __name__, url_prefix="/warehouses")

from app.warehouses import routes  # noqa: E402,F401
