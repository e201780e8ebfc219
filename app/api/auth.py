"""Who calls the API: a bearer token in `Authorization`, and nothing else: a personal access
token (app/tokens/), or a token of the identity provider for the portal's audience
(app/auth/bearer.py), which may do what its user may.

A session cookie opens nothing here (so no cross-site request can act through the API, and
no CSRF token is needed), and a token opens no page. The token's owner is the call's
`current_user`, for this request only: the services and `get_owned_or_404` work as on the
pages, and another user's id answers 404. A `read` token only reads. Every call counts against
its token's and its user's rate limits (`rate_limit.py`).
"""

from __future__ import annotations

from flask import g, request
from werkzeug.exceptions import RequestEntityTooLarge

from app import roles
from app.api import bp, rate_limit
from app.api.problems import ApiProblem
from app.auth import bearer
from app.tokens import service as tokens

READ_METHODS = {"GET", "HEAD", "OPTIONS"}
# The largest body a call may send (the API takes small JSON documents only).
MAX_BODY_BYTES = 64 * 1024
# The API's own description is public: it holds no data.
PUBLIC_ENDPOINTS = {"api.openapi_json", "api.openapi_docs"}


@bp.before_request
def authenticate():
    request.max_content_length = MAX_BODY_BYTES  # a longer body answers 413, however it is sent
    too_large = ApiProblem(413, f"A call's body is at most {MAX_BODY_BYTES // 1024} KiB.")
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise too_large
    if request.content_length is None and request.method not in READ_METHODS:
        # A chunked body has no length to judge beforehand. Werkzeug stops reading it at the limit
        # without a word (the cut JSON then answers 400): read it here, one byte past the limit,
        # and keep it for the route.
        request.max_content_length = MAX_BODY_BYTES + 1
        try:
            body = request.get_data(cache=True)
        except RequestEntityTooLarge:
            raise too_large from None
        if len(body) > MAX_BODY_BYTES:
            raise too_large
    if request.endpoint in PUBLIC_ENDPOINTS:
        return
    scheme, _, text = request.headers.get("Authorization", "").partition(" ")
    text = text.strip() if scheme.lower() == "bearer" else ""
    g.api_token = None
    if text.startswith(tokens.PREFIX):
        g.api_token, user = tokens.holder_of(text) or (None, None)
        scope, key = (g.api_token.scope, f"token:{g.api_token.id}") if g.api_token else (None, None)
    else:
        user = bearer.user_for(text) if text else None
        scope, key = "run", f"oidc:{user.id}" if user else None
    if user is None:
        raise ApiProblem(
            401,
            "A valid token is needed: Authorization: Bearer <personal access token>.",
            headers={"WWW-Authenticate": 'Bearer realm="lakeport"'},
        )
    if roles.suspended(user):  # the provider refused the user since their last sign-in
        raise ApiProblem(
            401,
            "This token's owner must sign in to Lakeport again: the identity provider "
            "no longer confirms their sign-in.",
            headers={"WWW-Authenticate": 'Bearer realm="lakeport"'},
        )
    g._login_user = user  # flask-login's current_user, for this request only
    rate_limit.count([key, f"user:{user.id}"])
    if request.method not in READ_METHODS and scope != "run":
        raise ApiProblem(403, "This token's scope is read: it cannot change anything.")
