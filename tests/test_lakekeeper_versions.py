"""The portal works with one Lakekeeper line, and refuses another with a clear message.

Lakekeeper's version is `lakekeeper-version` in `GET /management/v1/info` (lakekeeper/lakekeeper
crates/lakekeeper/src/api/management/v1/server.rs at v0.13.3). The scripted answers pass through
`ContractCheckingTransport`, so they are answers Lakekeeper 0.13.3 may give.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx
import pytest
import yaml

from app.lakekeeper import client as client_module
from app.lakekeeper.client import LakekeeperClient
from app.lakekeeper.tokens import ClientCredentialsTokenSource
from app.lakekeeper.versions import (
    TESTED_LAKEKEEPER,
    UnsupportedLakekeeper,
    is_supported,
    parse_version,
)
from tests.lakekeeper_contract import ContractCheckingTransport

ROOT = Path(__file__).resolve().parent.parent
BASE_URL = "http://lakekeeper.test"


def info(version: str) -> dict:
    return {
        "version": version,
        "lakekeeper-version": version,
        "bootstrapped": True,
        "server-id": "01968a3c-0000-7000-8000-000000000001",
        "authz-backend": "openfga",
        "aws-system-identities-enabled": False,
        "azure-system-identities-enabled": False,
        "gcp-system-identities-enabled": False,
        "queues": ["tabular_expiration", "tabular_purge"],
        "license-status": {"license-type": "Apache-2.0", "valid": True},
        "default-project-id": "00000000-0000-0000-0000-000000000000",
    }


class Lakekeeper:
    """Answers /info with `version` and lists no warehouse; records every request."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/management/v1/info":
            return httpx.Response(200, json=info(self.version))
        assert request.url.path == "/management/v1/warehouse", request.url
        return httpx.Response(200, json={"warehouses": []})

    @property
    def paths(self) -> list[str]:
        return [request.url.path for request in self.requests]


def identity_provider(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        200, json={"access_token": "service-token", "token_type": "Bearer", "expires_in": 3600}
    )


def checking_client(server: Lakekeeper, check_version: bool = True) -> LakekeeperClient:
    tokens = ClientCredentialsTokenSource(
        client_id="lakeport-service",
        client_secret="secret",
        token_url="http://idp.test/token",
        transport=httpx.MockTransport(identity_provider),
    )
    return LakekeeperClient(
        BASE_URL,
        tokens,
        transport=ContractCheckingTransport(httpx.MockTransport(server)),
        check_version=check_version,
    )


@pytest.mark.parametrize(
    ("version", "supported"),
    [
        ("0.13.0", True),
        ("0.13.3", True),
        ("0.13.6", True),
        ("v0.13.1", True),
        (
            "0.13.3+lakeport-dev-catalog",
            True,
        ),  # build metadata changes nothing (SemVer 2.0, item 10)
        ("0.12.4", False),
        ("0.14.0", False),
        ("1.0.0", False),
        ("0.14.0-rc.1", False),
        ("0.13.4-rc.1", False),  # pre-releases are not releases of the line
        ("", False),
        ("main", False),
        ("0.13", False),
        ("0.13.3; DROP", False),
    ],
)
def test_the_supported_range_is_the_013_line(version, supported):
    assert is_supported(version) is supported
    assert (parse_version(version) is not None) is (
        supported or version in ("0.12.4", "0.14.0", "1.0.0")
    )


def test_a_supported_lakekeeper_is_asked_its_version_once_then_trusted_for_a_while(monkeypatch):
    server = Lakekeeper("0.13.3")
    now = [1000.0]
    monkeypatch.setattr(client_module.time, "monotonic", lambda: now[0])
    with checking_client(server) as client:
        assert client.list_warehouses() == []
        assert client.list_warehouses() == []
        assert server.paths == [
            "/management/v1/info",
            "/management/v1/warehouse",
            "/management/v1/warehouse",
        ]
        now[0] += (
            client_module.VERSION_RECHECK_SECONDS + 1
        )  # Lakekeeper may have been upgraded meanwhile
        client.list_warehouses()
    assert server.paths.count("/management/v1/info") == 2


def test_an_unsupported_lakekeeper_is_refused_before_anything_is_sent_with_a_clear_message():
    server = Lakekeeper("0.14.0")
    with checking_client(server) as client:
        with pytest.raises(UnsupportedLakekeeper) as refused:
            client.list_warehouses()
        with pytest.raises(UnsupportedLakekeeper):
            client.lakekeeper_version()
    assert "/management/v1/warehouse" not in server.paths
    error = refused.value
    assert (error.version, error.operation, error.type) == (
        "0.14.0",
        "list_warehouses",
        "UnsupportedLakekeeperVersion",
    )
    assert "0.14.0" in error.user_message and "0.13.0" in error.user_message
    assert "Contact the operators" in error.user_message
    assert "tested against 0.13.3" in str(error)


def test_an_upgrade_to_an_unsupported_release_is_noticed_at_the_next_check(monkeypatch):
    server = Lakekeeper("0.13.3")
    now = [0.0]
    monkeypatch.setattr(client_module.time, "monotonic", lambda: now[0])
    with checking_client(server) as client:
        client.list_warehouses()
        server.version = "0.14.1"
        now[0] += client_module.VERSION_RECHECK_SECONDS + 1
        with pytest.raises(UnsupportedLakekeeper, match="0.14.1"):
            client.list_warehouses()


def test_without_the_check_no_version_is_asked():
    server = Lakekeeper("0.14.0")
    with checking_client(server, check_version=False) as client:
        assert client.list_warehouses() == []
    assert server.paths == ["/management/v1/warehouse"]


def test_the_portals_client_checks_the_version(portal_config):
    from app import create_app
    from app.extensions import lakekeeper

    app = create_app(portal_config)
    with app.app_context():
        assert lakekeeper().check_version is True


def test_pin_specs_dev_catalog_and_supported_range_name_one_release():
    from devstack.devcatalog.management import DEV_CATALOG_VERSION

    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    image = compose["services"]["lakekeeper"]["image"]
    pinned = re.fullmatch(r"quay\.io/lakekeeper/catalog:v(\d+\.\d+\.\d+)", image)
    assert pinned, image
    assert pinned.group(1) == TESTED_LAKEKEEPER and is_supported(pinned.group(1))
    specs_readme = (ROOT / "tests" / "specs" / "lakekeeper" / "README.md").read_text()
    assert f"tag `v{TESTED_LAKEKEEPER}`" in specs_readme
    assert parse_version(DEV_CATALOG_VERSION) == parse_version(TESTED_LAKEKEEPER)


def git_blob_id(path: Path) -> str:
    """What `git hash-object` prints for the file: SHA-1 of "blob <size>\\0" and the content."""
    content = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def test_the_vendored_specs_are_those_of_the_pinned_tag_byte_for_byte():
    # The ids are `git rev-parse v0.13.3:docs/docs/api/<file>` in lakekeeper/lakekeeper, listed in
    # tests/specs/lakekeeper/README.md under the tag the image pin names; the files of `main`
    # (vendored before, while the image was a 0.13 release) have other ids.
    specs = ROOT / "tests" / "specs" / "lakekeeper"
    listed = dict(
        re.findall(
            r"^\| `([\w-]+\.yaml)` \|.*\| `([0-9a-f]{40})` \|$",
            (specs / "README.md").read_text(),
            re.MULTILINE,
        )
    )
    assert f"git blob at `v{TESTED_LAKEKEEPER}`" in (specs / "README.md").read_text()
    assert (
        set(listed)
        == {path.name for path in specs.glob("*.yaml")}
        == {
            "management-open-api.yaml",
            "rest-catalog-open-api.yaml",
        }
    )
    for name, blob in listed.items():
        assert git_blob_id(specs / name) == blob, f"{name} is not the file of v{TESTED_LAKEKEEPER}"


@pytest.fixture
def lakekeeper_014():
    """A Lakekeeper that reports 0.14.0, on loopback; it answers only /info (anything else 500)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.answer()

        def do_POST(self):  # noqa: N802
            self.answer()

        def answer(self):
            paths.append(self.path)
            ok = self.path == "/management/v1/info"
            body = json.dumps(
                info("0.14.0")
                if ok
                else {"error": {"code": 500, "type": "Unexpected", "message": "not scripted"}}
            ).encode()
            self.send_response(200 if ok else 500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", paths
    server.shutdown()
    server.server_close()


def test_registering_a_warehouse_on_an_unsupported_lakekeeper_says_why_and_makes_nothing(
    portal_config, lakehouse, db_engine, lakekeeper_014
):
    from dataclasses import replace

    from app import create_app
    from devstack.oidc_provider import TEST_USERS
    from tests.factories import AuthActions, register, warehouse_named

    url, paths = lakekeeper_014
    client = create_app(replace(portal_config, LAKEKEEPER_URL=url)).test_client()
    auth = AuthActions(client, {name: user.password for name, user in TEST_USERS.items()})
    auth.login("alice")
    response = register(client, auth, lakehouse, "on-014")
    page = response.get_data(as_text=True)
    assert response.status_code == 422
    assert "does not support" in page and "0.14.0" in page and "0.13.0" in page
    assert warehouse_named(db_engine, "on-014") is None
    assert set(paths) == {"/management/v1/info"}  # nothing else was asked of it
