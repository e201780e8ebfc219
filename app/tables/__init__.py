"""Tables that stay healthy, and a table page that tells its story: a table's health (its files
from its manifests), the policy that keeps it healthy (compaction of small files, expiry of old
snapshots), its maintenance history, each publish and how to connect to it.

Modules:
- `routes.py` — the table page's sections: health, policy (seen by readers, set by writers),
  story (publishes, maintenance history, connect snippets)
- `service.py` — a policy saved, with its audit event
- `queries.py` — what the sections read: health, policy, history, publishes; the pins and live
  publishes the worker's pass respects
- `forms.py` — the policy form, read and checked
- `work.py` — the worker's side: the policy pass (run at the end of the usage pass,
  app/usage/work.py), which queues a table's maintenance job on the owner's idle unit, or on a
  unit it starts for the job (the policy's `start_unit`, stopped once the job has ended), or
  records why it did not
"""

from flask import Blueprint

bp = Blueprint("tables", __name__)

from app.tables import routes  # noqa: E402,F401
