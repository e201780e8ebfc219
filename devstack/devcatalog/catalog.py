"""The Iceberg REST catalog (`/catalog/v1`): Lakekeeper's config answer, then a thin proxy.

`GET /catalog/v1/config?warehouse=NAME` answers as Lakekeeper does: `defaults.prefix` is the
warehouse id and `overrides.uri` this catalog. Every call under `/catalog/v1/<warehouse id>/`
goes to SeaweedFS's Iceberg REST catalog under the warehouse's table bucket, unchanged but for
the prefix and the credentials (SeaweedFS accepts only its own tokens).

Access delegation: a client's `X-Iceberg-Access-Delegation: vended-credentials` is passed on,
and SeaweedFS's STS vends credentials scoped to the one table (`s3.access-key-id`,
`s3.secret-access-key`, `s3.session-token`, `s3.endpoint`, `s3.path-style-access`, `s3.region`;
this proxy adds `client.region`). That holds whatever the warehouse's `sts-enabled` says:
Lakekeeper would remote-sign for a warehouse without STS, which this stand-in cannot, and
vending keeps such clients working as they would with Lakekeeper.
"""
from __future__ import annotations

import json
import uuid
from urllib.parse import quote

from flask import Blueprint, Response, current_app, request

from devstack.devcatalog.errors import bad_request, warehouse_not_found
from devstack.devcatalog.management import DEFAULT_PROJECT_ID

catalog = Blueprint("catalog", __name__, url_prefix="/catalog/v1")

# Lakekeeper's default page size for list calls.
REST_PAGE_SIZE = "100"
_ACCESS_DELEGATION = "X-Iceberg-Access-Delegation"


def _project_and_name(argument: str) -> tuple[str, str]:
    """Lakekeeper's `warehouse` argument: `NAME` or `<project uuid>/NAME`."""
    project, _, name = argument.partition("/")
    try:
        return str(uuid.UUID(project)), name
    except ValueError:
        return request.headers.get("x-project-id") or DEFAULT_PROJECT_ID, argument


@catalog.get("/config")
def get_config():
    argument = request.args.get("warehouse")
    if not argument:
        raise bad_request(
            "No warehouse specified. Please specify the 'warehouse' parameter in the GET /config request.",
            "GetConfigNoWarehouseProvided",
        )
    project_id, name = _project_and_name(argument)
    warehouse = current_app.extensions["devcatalog"].store.find_by_name(project_id, name)
    if warehouse is None or warehouse.status != "active":
        raise warehouse_not_found(name)
    return {
        "defaults": {"prefix": str(warehouse.id), "rest-page-size": REST_PAGE_SIZE},
        "overrides": {"uri": f"{request.host_url.rstrip('/')}/catalog"},
    }


def _with_client_region(answer: dict) -> dict:
    """Vended credentials carry `s3.region`; Iceberg clients also read `client.region`."""
    configs = [answer.get("config")] + [entry.get("config") for entry in answer.get("storage-credentials") or []]
    for config in configs:
        if isinstance(config, dict) and "s3.access-key-id" in config and "s3.region" in config:
            config.setdefault("client.region", config["s3.region"])
    return answer


@catalog.route("/<uuid:warehouse_id>/<path:rest>", methods=["GET", "HEAD", "POST", "DELETE"])
def forward(warehouse_id: uuid.UUID, rest: str):
    services = current_app.extensions["devcatalog"]
    warehouse = services.store.get(warehouse_id)
    if warehouse is None or warehouse.status != "active":
        raise warehouse_not_found(warehouse_id)

    headers = {"content-type": request.content_type} if request.content_type else {}
    if _ACCESS_DELEGATION in request.headers:
        headers[_ACCESS_DELEGATION] = request.headers[_ACCESS_DELEGATION]
    # Flask decoded the path; the namespace separator (0x1F) and spaces must be encoded again.
    answer = services.seaweed.iceberg_call(
        request.method, warehouse.table_bucket, quote(rest, safe="/"),
        query=request.query_string, content=request.get_data(), headers=headers,
    )
    body = answer.content
    if answer.headers.get("content-type", "").startswith("application/json") and body:
        decoded = json.loads(body)
        if isinstance(decoded, dict):
            body = json.dumps(_with_client_region(decoded)).encode()
    return Response(body, status=answer.status_code, content_type=answer.headers.get("content-type"))
