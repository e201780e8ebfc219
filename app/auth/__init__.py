"""Single sign-on: OpenID Connect sign-in, sign-out and the user session.

Modules:
- `routes.py` — sign-in, the provider's callback, sign-out
- `oidc.py` — the authlib OpenID Connect client
- `service.py` — users as the identity provider describes them; the session's absolute lifetime
- `bearer.py` — the provider's access tokens checked for the API
- `provider_grant.py` — the sign-in's refresh token sealed at rest; asking the provider again
- `work.py` — the worker's identity pass: groups confirmed, lapsed or user suspended
"""

from flask import Blueprint

bp = Blueprint("auth", __name__, url_prefix="/auth")

from app.auth import routes  # noqa: E402,F401  (registers the routes on bp)
