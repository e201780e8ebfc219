"""Lakeport without a browser: a JSON API under /api/v1 for what a signed-in user can do.

Routes (`routes.py`) call the same service modules as the pages; only the wire is new. The
OpenAPI 3.1 document is generated from the routes and their pydantic models by spectree
(`openapi.py`): chosen because it validates requests and responses with the same models it
documents, supports Flask blueprints, and is kept up to date. A caller authenticates with a
personal access token (`auth.py`, app/tokens/); errors are problem documents (`problems.py`).

Modules:
- `auth.py` — bearer tokens only (personal access tokens or the provider's); bodies bounded
- `rate_limit.py` — per token and per user, in shared rows
- `problems.py` — errors as `application/problem+json`
- `paging.py` — cursor pages, the errors every route may answer, table cells as JSON
- `schemas.py` — pydantic models of what the API takes and returns; cursors
- `openapi.py` — the OpenAPI 3.1 document spectree generates, and its page
- `warehouses.py` — list, get, test a connection, register, archive, tables
- `compute_units.py` — list, create, get, terminate
- `workflows.py` — list, get, save a version
- `executions.py` — list, idempotent start, get, cancel, results, CSV, logs, lineage
- `console_queries.py` — the console's queries: run one statement, get it with a page of rows, cancel
- `tables.py` — a table's health, maintenance policy, maintenance jobs and publishes
- `tokens.py` — a script revokes the token it calls with
"""

from flask import Blueprint

bp = Blueprint("api", __name__, url_prefix="/api/v1")

from app.api import (  # noqa: E402,F401,E501
    auth,
    compute_units,
    console_queries,
    executions,
    openapi,
    problems,
    tables,
    tokens,
    warehouses,
    workflows,
)
