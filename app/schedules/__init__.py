"""Schedules: a workflow run on a cron schedule, each due time fired once by the worker."""

from flask import Blueprint

bp = Blueprint("schedules", __name__, url_prefix="/schedules")

from app.schedules import routes  # noqa: E402,F401
