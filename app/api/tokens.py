"""The API's own token: a script revokes the personal access token it called with when done."""

from __future__ import annotations

from flask import g
from spectree import Response

from app.api import bp, schemas
from app.api.openapi import spec
from app.api.paging import ERRORS
from app.api.problems import ApiProblem
from app.tokens import service as tokens


@bp.post("/tokens/current/revoke")
@spec.validate(resp=Response("HTTP_204", HTTP_409=schemas.Problem, **ERRORS), tags=["tokens"])
def revoke_current_token():
    """Revoke the personal access token this call carries (it opens nothing afterwards)."""
    if g.api_token is None:
        raise ApiProblem(
            409,
            "This call carries no personal access token (an identity provider's token expires by itself).",
        )
    tokens.revoke(g.api_token)
    return "", 204
