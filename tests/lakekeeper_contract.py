"""Lakekeeper's published OpenAPI documents as a test oracle.

Both sides of the portal's Lakekeeper conversation are checked against the same contract:
the portal's client (every request it sends) and the Lakekeeper-compatible dev catalog
(every answer it gives). The documents are Lakekeeper's own:

- `management-open-api.yaml` serves `/management/v1/...`;
- `rest-catalog-open-api.yaml` (Apache Iceberg REST) serves `/catalog/v1/...`: Lakekeeper
  mounts it under `/catalog`, which the document's `{basePath}` server variable allows.

Validation runs through openapi-core (OpenAPI 3.1, JSON Schema 2020-12). Each document is
parsed once per process and its `$ref`s resolved lazily and cached by openapi-core. Two
mechanical readings adapt the documents to it without changing what they allow; see
`_honour_nullable` and `_drop_null_from_parameter_types`.

Error answers whose status a document does not list (Lakekeeper answers e.g. 404 on
`getConfig` for an unknown warehouse although the Iceberg document omits it) are still
held to the common error envelope `IcebergErrorResponse`; undocumented success statuses fail.

Use:
    validate_request("POST", "/management/v1/warehouse", body={...}, headers={...})
    validate_response("POST", "/management/v1/warehouse", 201, body={...})
    validate_exchange(httpx_request, httpx_response)
    httpx.Client(transport=ContractCheckingTransport(httpx.HTTPTransport()))
Every failure raises `ContractViolation` (an AssertionError) naming the operation.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as JsonSchemaError
from openapi_core import Config, OpenAPI
from openapi_core.templating.paths.exceptions import PathError
from openapi_core.templating.paths.finders import APICallPathFinder
from openapi_core.templating.responses.exceptions import ResponseNotFound
from openapi_core.testing import MockRequest, MockResponse
from openapi_core.validation.exceptions import ValidationError as OpenAPIValidationError
from openapi_core.validation.request.exceptions import (
    ParameterValidationError,
    SecurityValidationError,
)
from openapi_core.validation.response.exceptions import HeaderValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from werkzeug.datastructures import ImmutableMultiDict

# Vendored in the repository (tests/specs/lakekeeper, with their licence); LAKEKEEPER_SPEC_DIR overrides.
SPEC_DIR = Path(
    os.environ.get("LAKEKEEPER_SPEC_DIR", Path(__file__).resolve().parent / "specs" / "lakekeeper")
)

# Where Lakekeeper serves each document, and the file that describes it.
_APIS = {
    "management": ("/management/", "management-open-api.yaml"),
    "catalog": ("/catalog/", "rest-catalog-open-api.yaml"),
}
# The document's `basePath` server variable as Lakekeeper fills it.
_BASE_PATHS = {"management": "", "catalog": "catalog"}
# Any host will do: both documents template scheme and host as server variables.
_HOST_URL = "http://lakekeeper.invalid"
_MAX_MESSAGE = 300


class ContractViolation(AssertionError):
    """A request or response that Lakekeeper's OpenAPI documents do not allow."""


@dataclass(frozen=True)
class Operation:
    """One documented operation, matched from a concrete method and path."""

    api: str  # "management" or "catalog"
    operation_id: str
    method: str
    path_template: str  # as served, e.g. /management/v1/warehouse/{warehouse_id}/rename
    path_params: dict[str, str]
    spec_path: str = ""  # the key of `paths` in the document

    def __str__(self) -> str:
        return f"{self.operation_id} ({self.method} {self.path_template})"


def _string_keys(node: Any) -> Any:
    # YAML reads the Iceberg document's bare status codes (`200:`) as ints; OpenAPI keys are strings.
    if isinstance(node, dict):
        return {str(key): _string_keys(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_string_keys(value) for value in node]
    return node


def _drop_null_from_parameter_types(document: dict) -> None:
    # openapi-core 0.23 cannot deserialize parameters typed `[X, "null"]`, which the
    # management document uses for optional parameters. A query, path or header value is
    # never JSON null, so `X` alone accepts exactly the same requests.
    schemas = document.get("components", {}).get("schemas", {})

    def fix(parameters: list | None) -> None:
        for parameter in parameters or []:
            schema = parameter.get("schema", {})
            reference = schema.get("$ref", "")
            if reference.startswith("#/components/schemas/"):
                # e.g. the Iceberg `pageToken`, whose PageToken schema also types bodies:
                # give the parameter its own copy.
                schema = parameter["schema"] = dict(schemas[reference.rsplit("/", 1)[1]])
            if isinstance(schema.get("type"), list):
                non_null = [kind for kind in schema["type"] if kind != "null"]
                schema["type"] = non_null[0] if len(non_null) == 1 else non_null

    for path_item in document["paths"].values():
        fix(path_item.get("parameters"))
        for operation in path_item.values():
            if isinstance(operation, dict):
                fix(operation.get("parameters"))
    fix(list(document.get("components", {}).get("parameters", {}).values()))


def _honour_nullable(node: Any) -> None:
    # The Iceberg document declares OpenAPI 3.1 yet marks optional values with 3.0's
    # `nullable: true` (e.g. `next-page-token`, which its prose says servers set to null on
    # the last page). 3.1 ignores `nullable`; spell the authors' intent in 3.1 terms.
    if isinstance(node, dict):
        if node.get("nullable") is True and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        for value in node.values():
            _honour_nullable(value)
    elif isinstance(node, list):
        for value in node:
            _honour_nullable(value)


@functools.cache
def _document(api: str) -> dict:
    _, filename = _APIS[api]
    with open(SPEC_DIR / filename, encoding="utf-8") as handle:
        document = _string_keys(
            yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        )
    _honour_nullable(document)
    _drop_null_from_parameter_types(document)
    return document


@functools.cache
def _openapi(api: str) -> OpenAPI:
    # The documents are Lakekeeper's published ones; validating the documents themselves
    # on every test run would cost seconds and check nothing of ours.
    return OpenAPI.from_dict(_document(api), config=Config(spec_validator_cls=None))


@functools.cache
def _error_envelope_validator(api: str) -> Draft202012Validator:
    uri = f"urn:lakekeeper:{api}"
    registry = Registry().with_resource(uri, Resource.from_contents(_document(api), DRAFT202012))
    return Draft202012Validator(
        {"$ref": f"{uri}#/components/schemas/IcebergErrorResponse"}, registry=registry
    )


def _api_for(path: str) -> str:
    for api, (prefix, _) in _APIS.items():
        if path.startswith(prefix):
            return api
    raise ContractViolation(
        f"{path} is not a Lakekeeper API path (expected /management/... or /catalog/...)"
    )


def find_operation(method: str, path: str) -> Operation:
    """The documented operation for a concrete request path (query string ignored)."""
    path = urlsplit(path).path
    api = _api_for(path)
    try:
        found = APICallPathFinder(_openapi(api).spec).find(method.lower(), _HOST_URL + path)
    except PathError as error:
        raise ContractViolation(
            f"{method.upper()} {path}: no such operation in {_APIS[api][1]} ({error})"
        ) from None
    base_path = found.server_result.variables.get("basePath", "").strip("/")
    spec_path = found.path.parts[-1]
    if base_path != _BASE_PATHS[api]:
        raise ContractViolation(
            f"{method.upper()} {path}: Lakekeeper serves {spec_path} under /{_BASE_PATHS[api]}"
        )
    return Operation(
        api=api,
        operation_id=(found.operation / "operationId").read_str(),
        method=method.upper(),
        path_template=(f"/{base_path}" if base_path else "") + spec_path,
        path_params=dict(found.path_result.variables),
        spec_path=spec_path,
    )


def _body_bytes(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


_SECRET_WORDS = ("secret", "password", "token", "key")


def _safe_message(error: JsonSchemaError) -> str:
    # jsonschema messages start with repr(instance): never echo objects (they may hold
    # credentials) nor scalars stored under secret-looking names.
    message = error.message
    last = str(error.absolute_path[-1]) if error.absolute_path else ""
    if isinstance(error.instance, (dict, list)) or any(
        word in last.lower() for word in _SECRET_WORDS
    ):
        message = message.replace(repr(error.instance), f"<{type(error.instance).__name__}>")
    return message if len(message) <= _MAX_MESSAGE else message[:_MAX_MESSAGE] + "…"


def _schema_error_lines(errors: Any) -> list[str]:
    lines = []
    for error in errors:
        if error.validator in ("oneOf", "anyOf") and error.context:
            lines.extend(_schema_error_lines(_plausible_alternative_errors(error)))
        else:
            lines.append(f"  at {error.json_path}: {_safe_message(error)}")
    return lines


def _plausible_alternative_errors(error: JsonSchemaError) -> list[JsonSchemaError]:
    """The errors of the alternatives the value was meant for.

    An alternative that rejects the value's JSON type or its tag (`type`, `credential-type`,
    ... through `enum`/`const`) was not meant; the others' errors say what is wrong.
    """

    def rejects_kind(sub_error: JsonSchemaError) -> bool:
        return sub_error.validator in ("enum", "const") or (
            sub_error.validator == "type" and not sub_error.relative_path
        )

    by_alternative: dict[Any, list[JsonSchemaError]] = {}
    for sub_error in error.context:
        by_alternative.setdefault(sub_error.relative_schema_path[0], []).append(sub_error)
    meant = [
        sub_errors
        for sub_errors in by_alternative.values()
        if not any(map(rejects_kind, sub_errors))
    ]
    return [
        sub_error for sub_errors in (meant or by_alternative.values()) for sub_error in sub_errors
    ]


def _describe(error: Exception) -> str:
    if isinstance(error, SecurityValidationError):
        return "no accepted credentials: the document requires an `Authorization: Bearer <token>` header"
    cause = error.__cause__
    schema_errors = getattr(cause, "schema_errors", None)
    if schema_errors:
        # str() of a body error would print the whole body, secrets included.
        located = isinstance(error, (ParameterValidationError, HeaderValidationError))
        headline = str(error) if located else "body does not match its schema"
        return "\n".join([headline, *_schema_error_lines(schema_errors)])
    if cause is not None and str(cause) and str(cause) not in str(error):
        return f"{error}: {cause}"
    return str(error)


def _split_query(path: str, query: Any) -> tuple[str, list[tuple[str, str]]]:
    parts = urlsplit(path)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if isinstance(query, dict):
        for key, value in query.items():
            values = value if isinstance(value, (list, tuple)) else [value]
            pairs.extend((key, _query_text(item)) for item in values)
    elif query:
        pairs.extend((key, _query_text(value)) for key, value in query)
    return parts.path, pairs


def _query_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _mock_request(method: str, path: str, query: Any, headers: Any, body: Any) -> MockRequest:
    plain_path, pairs = _split_query(path, query)
    header_items = list(httpx.Headers(headers or {}).multi_items())
    content_type = httpx.Headers(headers or {}).get("content-type", "application/json")
    return MockRequest(
        _HOST_URL,
        method.lower(),
        plain_path,
        args=ImmutableMultiDict(pairs),
        headers=header_items,
        data=_body_bytes(body),
        content_type=content_type,
    )


def validate_request(
    method: str,
    path: str,
    *,
    body: Any = None,
    headers: Any = None,
    query: Any = None,
) -> Operation:
    """Check a request against the document that serves `path`.

    `path` is the served path (`/management/v1/...`, `/catalog/v1/...`) and may carry a query
    string; `query` adds parameters (dict or pairs). `body` is bytes, text or a JSON value.
    Returns the matched operation; raises ContractViolation.
    """
    operation = find_operation(method, path)
    _refuse_array_query_parameters(operation, _split_query(path, query)[1])
    request = _mock_request(method, path, query, headers, body)
    with warnings.catch_warnings():
        # openapi-core warns that it cannot check the Iceberg document's OAuth2 scheme;
        # its alternative, BearerAuth, is checked.
        warnings.simplefilter("ignore", UserWarning)
        try:
            _openapi(operation.api).validate_request(request)
        except OpenAPIValidationError as error:
            raise ContractViolation(f"{operation} request: {_describe(error)}") from None
    return operation


def array_query_parameters(operation: Operation) -> set[str]:
    """The operation's query parameters whose documented schema is an array."""
    document = _document(operation.api)
    path_item = document["paths"][operation.spec_path]
    declared = [
        *path_item.get("parameters", []),
        *path_item[operation.method.lower()].get("parameters", []),
    ]
    names = set()
    for parameter in declared:
        if "$ref" in parameter:
            parameter = document["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[1]]
        kind = parameter.get("schema", {}).get("type")
        if parameter.get("in") == "query" and (
            kind == "array" or (isinstance(kind, list) and "array" in kind)
        ):
            names.add(parameter["name"])
    return names


def _refuse_array_query_parameters(operation: Operation, pairs: list[tuple[str, str]]) -> None:
    # The 0.13 documents declare e.g. `relations` and `warehouseStatus` as arrays, but Lakekeeper
    # 0.13.x reads query strings with axum's `Query` (serde_urlencoded), which cannot fill a
    # `Vec<T>` field from any query-string form: every value answers 400 (lakekeeper/lakekeeper
    # crates/authz-openfga/src/api.rs and crates/lakekeeper/src/api/management/mod.rs at v0.13.3;
    # fixed on `main` only, by axum_extra's Query: crates/lakekeeper-integration-tests/tests/
    # management_query_arrays.rs, commit "Improve OpenAPI for generators"). The server Lakeport
    # runs against would refuse what the document allows, so the contract refuses it too.
    sent = {name for name, _ in pairs} & array_query_parameters(operation)
    if sent:
        raise ContractViolation(
            f"{operation} request: array query parameter(s) {sorted(sent)} answer 400 on Lakekeeper 0.13.x; "
            "leave them out (the default applies) and filter the answer instead"
        )


def validate_response(
    method: str,
    path: str,
    status: int,
    *,
    body: Any = None,
    headers: Any = None,
) -> Operation:
    """Check a response (status, JSON body, headers) to `method path` against its document."""
    operation = find_operation(method, path)
    request = _mock_request(method, path, None, None, None)
    response_headers = httpx.Headers(headers or {})
    data = _body_bytes(body)
    response = MockResponse(
        data,
        status_code=status,
        headers=dict(response_headers),
        content_type=response_headers.get("content-type", "application/json"),
    )
    try:
        _openapi(operation.api).validate_response(request, response)
    except ResponseNotFound:
        if status < 400:
            raise ContractViolation(
                f"{operation}: status {status} is not a documented response"
            ) from None
        _check_error_envelope(operation, status, data)
    except OpenAPIValidationError as error:
        raise ContractViolation(f"{operation} response {status}: {_describe(error)}") from None
    return operation


def _check_error_envelope(operation: Operation, status: int, data: bytes) -> None:
    try:
        payload = json.loads(data)
    except ValueError:
        raise ContractViolation(
            f"{operation} response {status}: error body is not JSON (expected IcebergErrorResponse)"
        ) from None
    errors = list(_error_envelope_validator(operation.api).iter_errors(payload))
    if errors:
        raise ContractViolation(
            "\n".join(
                [
                    f"{operation} response {status}: not an IcebergErrorResponse",
                    *_schema_error_lines(errors),
                ]
            )
        )


def validate_exchange(request: httpx.Request, response: httpx.Response | None = None) -> Operation:
    """Check an httpx request and, when given, the response to it."""
    path = request.url.raw_path.decode("ascii")
    operation = validate_request(request.method, path, body=request.read(), headers=request.headers)
    if response is not None:
        validate_response(
            request.method,
            path,
            response.status_code,
            body=response.read(),
            headers=response.headers,
        )
    return operation


class ContractCheckingTransport(httpx.BaseTransport):
    """An httpx transport that checks every exchange against the documents.

    Wraps a real transport (`httpx.HTTPTransport()`) or a `httpx.MockTransport`. Requests are
    checked before they are sent, so a client bug fails the test even if the server would
    have been lenient; responses are checked as they arrive.
    """

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.operations: list[Operation] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.operations.append(validate_exchange(request))
        response = self.inner.handle_request(request)
        response.read()
        path = request.url.raw_path.decode("ascii")
        validate_response(
            request.method,
            path,
            response.status_code,
            body=response.content,
            headers=response.headers,
        )
        return response

    def close(self) -> None:
        self.inner.close()
