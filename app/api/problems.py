"""Errors as problem documents (RFC 9457, `application/problem+json`): `title` says what, `detail`
why, and a validation error names its `field`."""

from __future__ import annotations

import json
from http import HTTPStatus

from flask import Response
from werkzeug.exceptions import HTTPException

from app.api import bp

PROBLEM_TYPE = "application/problem+json"


class ApiProblem(Exception):
    """End an API call with a problem document."""

    def __init__(
        self, status: int, detail: str, field: str | None = None, headers: dict | None = None
    ) -> None:
        super().__init__(detail)
        self.status, self.detail, self.field, self.headers = status, detail, field, headers or {}


def problem(
    status: int, detail: str, field: str | None = None, headers: dict | None = None
) -> Response:
    body = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    if field:
        body["field"] = field
    return Response(json.dumps(body), status, headers=headers or {}, content_type=PROBLEM_TYPE)


@bp.errorhandler(ApiProblem)
def _api_problem(error: ApiProblem):
    return problem(error.status, error.detail, error.field, error.headers)


@bp.errorhandler(HTTPException)
def _http_error(error: HTTPException):
    if error.code == 404:
        return problem(404, "No such resource of yours.")
    return problem(error.code or 500, error.description or "")


def invalid_request(_request, response, validation_error, _instance, _adapter) -> None:
    """spectree's hook: a body or query its model refuses becomes a 400 problem naming the field."""
    if validation_error is None:
        return
    errors = validation_error.errors() if hasattr(validation_error, "errors") else []
    first = errors[0] if errors else {}
    field = ".".join(str(part) for part in first.get("loc", ())) or None
    body = problem(
        400,
        f"{field or 'the request'}: {first.get('msg', 'invalid')}"
        if errors
        else "Invalid request.",
        field,
    )
    response.status_code = 400
    response.set_data(body.get_data())
    response.headers["Content-Type"] = PROBLEM_TYPE
