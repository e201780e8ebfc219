"""Schedules: a workflow run on a cron schedule, each due time fired once by the worker.

Modules:
- `routes.py` — a workflow's schedules: next times, past runs, create, pause, resume, delete
- `service.py` — every field checked; cron in a time zone; the schedules' clock
- `queries.py` — what the page reads: a workflow's schedules, a schedule's past runs, time zones
- `work.py` — the worker's scheduler pass: each due time once, catch-up, retries, timeouts
"""

from flask import Blueprint

bp = Blueprint("schedules", __name__, url_prefix="/schedules")

from app.schedules import routes  # noqa: E402,F401
