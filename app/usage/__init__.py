"""Usage and retention: what runs cost (storage written, compute used, live storage per
warehouse) and how long a warehouse keeps what executions write.

Modules:
- `routes.py` — `/usage`, and the warehouse page's storage and retention sections
- `service.py` — a retention policy saved and enforced; a maintenance asked of the worker
- `queries.py` — what the pages read: usage per execution, warehouse and user; retention's preview
  and log; the latest maintenance
- `forms.py` — the retention form, read and checked
- `work.py` — the worker's side: the usage pass (storage measured from table metadata, then the
  tables' policy pass, app/tables/work.py) and maintenance jobs (dataset snapshot expiry; a
  table's compaction and expiry), run on the owner's unit
"""

from flask import Blueprint

bp = Blueprint("usage", __name__)

from app.usage import routes  # noqa: E402,F401
