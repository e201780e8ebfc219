"""Warehouses: bring-your-own-S3 storage registered in Lakekeeper; Lakeport keeps no secret.

Modules:
- `routes.py` — the pages, thin
- `service.py` — register, rename, rotate, deactivate, archive, purge, browse
- `sharing.py` — shares with a user or a group, mirrored into Lakekeeper as grants
- `closing.py` — the worker's part of a deactivation, archive or purge
- `grants.py` — the worker's comparison of Lakekeeper's grants with the shares: repairs
- `forms.py` — validation, inline and on submit
- `diagnosis.py` — which form field a storage refusal is about
- `probe_limits.py` — how many connection tests one user may run
- `tables.py` — the table explorer: namespaces, schema, properties, snapshots, first rows
- `local_stack.py` — the local stack's storage hints on the register page
"""

from flask import Blueprint

bp = Blueprint("warehouses", __name__, url_prefix="/warehouses")

from app.warehouses import routes  # noqa: E402,F401
