"""Warehouses: bring-your-own-S3 storage registered in Lakekeeper; Lakeport keeps no secret.

Modules:
- `routes.py` — the pages, thin
- `service.py` — register, rename, rotate, deactivate, archive, purge: Lakekeeper first, the row
  second
- `queries.py` — what the pages read: a user's warehouses, the table explorer's namespaces and a
  table's schema, properties, snapshots and first rows
- `work.py` — the worker's side: the catalog's part of a deactivation, archive or purge; the
  catalog's grants compared with the shares and repaired
- `sharing.py` — shares with a user or a group, mirrored into Lakekeeper as grants; who may do what
- `forms.py` — validation, inline and on submit
- `diagnosis.py` — which form field a storage refusal is about
- `probe_limits.py` — how many connection tests one user may run
- `local_stack.py` — the local stack's storage hints on the register page
"""

from flask import Blueprint

bp = Blueprint("warehouses", __name__, url_prefix="/warehouses")

from app.warehouses import routes  # noqa: E402,F401
