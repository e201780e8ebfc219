"""No path trick takes a token outside its warehouse: alice's run token, scoped to her
warehouse, sends dot segments and encoded separators after her warehouse's prefix to reach
bob's table bucket upstream. Each is refused by the dev catalog's path check (400, "Refused
path"), and bob's warehouse is the same afterwards. Sent raw (http.client does not normalise
the path, as an attacker's client would not)."""

from __future__ import annotations

import http.client
import json
import uuid
from urllib.parse import urlsplit

import pytest

from devstack.devcatalog.errors import CatalogError
from devstack.devcatalog.paths import segments
from devstack.seaweedfs import warehouse_table_bucket
from tests.catalogs import ALICE


def raw_request(
    devcatalog, method: str, path: str, token: str, body: dict | None = None
) -> tuple[int, dict]:
    address = urlsplit(devcatalog.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {
            "Authorization": f"Bearer {token}",
            **({"Content-Type": "application/json"} if payload else {}),
        }
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        text = response.read()
        return response.status, (
            json.loads(text) if text.startswith(b"{") else {"raw": text.decode(errors="replace")}
        )
    finally:
        connection.close()


def namespaces_of(devcatalog, warehouse_id, token) -> list:
    status, body = raw_request(devcatalog, "GET", f"/catalog/v1/{warehouse_id}/namespaces", token)
    assert status == 200, body
    return body["namespaces"]


def tricks(bobs_bucket: str) -> list[str]:
    return [
        f"/%2e%2e/{bobs_bucket}/namespaces",
        f"/%2E%2e/{bobs_bucket}/namespaces",
        f"/.%2e/{bobs_bucket}/namespaces",
        f"/%2e./{bobs_bucket}/namespaces",
        f"/../{bobs_bucket}/namespaces",
        f"/./../{bobs_bucket}/namespaces",
        f"/%252e%252e/{bobs_bucket}/namespaces",
        f"/..%2f{bobs_bucket}%2fnamespaces",
        f"/%2e%2e%2F{bobs_bucket}/namespaces",
        f"/..%5c{bobs_bucket}/namespaces",
        f"/..\\{bobs_bucket}/namespaces",
        f"//../{bobs_bucket}/namespaces",
        f"/namespaces/%2e%2e/%2e%2e/%2e%2e/{bobs_bucket}/namespaces",
        f"/namespaces/x%00/../../{bobs_bucket}/namespaces",
    ]


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_no_path_trick_takes_a_run_token_into_another_warehouse(
    devcatalog, execution, portal_tokens, method
):
    bobs_bucket = warehouse_table_bucket(ALICE.bucket, uuid.UUID(str(execution.bobs.id)))
    bobs_before = namespaces_of(devcatalog, execution.bobs.id, execution.bob_token)
    for trick in tricks(bobs_bucket):
        path = f"/catalog/v1/{execution.own.id}{trick}"
        status, body = raw_request(
            devcatalog,
            method,
            path,
            execution.token,
            {"namespace": ["stolen"]} if method == "POST" else None,
        )
        assert status == 400, (path, status, body)
        assert body["error"]["message"].startswith("Refused path"), (path, body)
    assert namespaces_of(devcatalog, execution.bobs.id, execution.bob_token) == bobs_before
    assert ["stolen"] not in namespaces_of(devcatalog, execution.bobs.id, execution.bob_token)


def test_the_token_still_works_in_its_own_warehouse(devcatalog, execution):
    own = execution.own.id
    status, body = raw_request(
        devcatalog,
        "POST",
        f"/catalog/v1/{own}/namespaces",
        execution.token,
        {"namespace": ["paths_ok"]},
    )
    assert status == 200, body
    try:
        status, body = raw_request(
            devcatalog, "GET", f"/catalog/v1/{own}/namespaces/paths_ok", execution.token
        )
        assert status == 200 and body["namespace"] == ["paths_ok"], body
        assert ["paths_ok"] in namespaces_of(devcatalog, own, execution.token)
    finally:
        raw_request(devcatalog, "DELETE", f"/catalog/v1/{own}/namespaces/paths_ok", execution.token)


@pytest.mark.parametrize(
    "raw, refused",
    [
        ("/catalog/v1/w/namespaces/a%1Fb", False),
        ("/catalog/v1/w/namespaces/a%20b/tables/t.x", False),
        ("/catalog/v1/w/namespaces/", False),
        ("/catalog/v1/w/%2e%2e/x", True),
        ("/catalog/v1/w/.../x", True),
        ("/catalog/v1/w/a%2Fb", True),
        ("/catalog/v1/w/a%25b", True),
        ("/catalog/v1//x", True),
        ("/catalog/v1/w/a%0Ab", True),
    ],
)
def test_the_path_parser_alone(raw, refused):
    if refused:
        with pytest.raises(CatalogError):
            segments(raw)
    else:
        assert segments(raw)[:3] == ["catalog", "v1", "w"]
