"""Personal access tokens for the API: made, listed and revoked on the Tokens page.

Modules:
- `routes.py` — the Tokens page
- `service.py` — tokens shown once, stored as SHA-256; scope, expiry, last use, revocation
- `queries.py` — what the page reads: a user's tokens
"""

from flask import Blueprint

bp = Blueprint("tokens", __name__, url_prefix="/tokens")

from app.tokens import routes  # noqa: E402,F401
