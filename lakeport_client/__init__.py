"""Lakeport's Python client and its command line (`lakeport`), for scripts, CI and schedulers.

`Client` calls the portal's API (/api/v1, described by /api/v1/openapi.json) with a personal
access token; `lakeport_client.cli` is the `lakeport` command built on it.

Modules:
- `client.py` — `Client`: one method per API operation; problem documents as `ApiError`
- `cli.py` — the `lakeport` command: units, executions, run … --wait, results … --csv, sql
"""

from lakeport_client.client import ApiError, Client

__all__ = ["ApiError", "Client"]
