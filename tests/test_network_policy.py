"""The network policy for hosts users name (app/network_policy.py), attacked the way an SSRF would be:
loopback, IPv6 loopback, cloud metadata, private addresses, names that resolve inward, numeric
spellings, DNS answers that change. Real listening sockets record every connection they get, and a
spy on socket.create_connection (what httpx connects with) records every attempt, also to
addresses nothing here can listen on."""

from __future__ import annotations

import datetime
import html
import ipaddress
import ssl
from dataclasses import replace

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sqlmodel import Session, select

from app import create_app
from app.models import Warehouse
from app.network_policy import HostNotAllowed, HostUnresolvable, NetworkPolicy, PinnedTransport
from devstack.seaweedfs import TEST_USER_KEYS
from tests.stand_ins import ANSWER, stub_resolver

POLICY_MESSAGE = "not allowed by this portal's network policy"


STRICT = NetworkPolicy()
OPEN = NetworkPolicy(allow_loopback=True, allow_private=True)

# How a user could spell a loopback target; each maps to the listener it reaches when allowed.
LOOPBACK_SPELLINGS = [
    ("127.0.0.1", "127.0.0.1"),
    ("[::1]", "::1"),
    ("localhost", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("0x7f.0.0.1", "127.0.0.1"),
    ("017700000001", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("[::ffff:127.0.0.1]", "127.0.0.1"),
]


@pytest.mark.parametrize("spelling,listen_on", LOOPBACK_SPELLINGS)
def test_loopback_is_refused_before_connecting_unless_allowed(
    spelling, listen_on, listen, attempts
):
    server = listen(listen_on)
    url = f"http://{spelling}:{server.port}/bucket/key"

    with STRICT.client(timeout=2) as client, pytest.raises(HostNotAllowed) as refused:
        client.put(url, content=b"x")
    assert POLICY_MESSAGE in refused.value.message
    assert server.connections == [] and attempts == []

    with NetworkPolicy(allow_loopback=True).client(timeout=2) as client:
        response = client.put(url, content=b"x")
    assert response.status_code == 200 and response.content == ANSWER
    assert len(server.connections) == 1
    assert server.hosts == [f"{spelling}:{server.port}"]  # the Host header the user's URL implies


@pytest.mark.parametrize(
    "target", ["10.0.0.1", "172.16.5.4", "192.168.1.1", "100.64.0.1", "[fd12::1]"]
)
def test_private_addresses_are_refused_unless_allowed(target, attempts):
    url = f"http://{target}:9000/"
    with STRICT.client(timeout=0.5) as client, pytest.raises(HostNotAllowed):
        client.get(url)
    with (
        NetworkPolicy(allow_loopback=True).client(timeout=0.5) as client,
        pytest.raises(HostNotAllowed),
    ):
        client.get(url)
    assert attempts == []

    # Allowed, the request goes out; whether anything answers there is the network's business.
    with NetworkPolicy(allow_private=True).client(timeout=0.5) as client:
        try:
            client.get(url)
        except httpx.TransportError:
            pass
    assert attempts == [(target.strip("[]"), 9000)]


@pytest.mark.parametrize(
    "target",
    [
        "169.254.169.254",
        "169.254.170.2",
        "169.254.1.1",
        "[fe80::1]",
        "[fd00:ec2::254]",
        "100.100.100.200",
        "[::ffff:169.254.169.254]",
        "[::ffff:a9fe:a9fe]",
        "[64:ff9b::a9fe:a9fe]",
        "2852039166",
        "0xa9.0xfe.0xa9.0xfe",
    ],
)
def test_link_local_and_metadata_are_refused_even_when_everything_else_is_allowed(target, attempts):
    with OPEN.client(timeout=0.5) as client, pytest.raises(HostNotAllowed) as refused:
        client.get(f"http://{target}/latest/meta-data/")
    assert (
        refused.value.message
        == f"{target.strip('[]')} is not allowed by this portal's network policy."
    )
    assert attempts == []


def test_a_name_that_resolves_inward_is_refused(listen, attempts):
    server = listen()
    inward = NetworkPolicy(resolver=stub_resolver(["127.0.0.1"]))
    with inward.client(timeout=2) as client, pytest.raises(HostNotAllowed) as refused:
        client.get(f"http://storage.example.test:{server.port}/")
    assert (
        refused.value.message
        == "storage.example.test is not allowed by this portal's network policy."
    )
    metadata = NetworkPolicy(
        allow_loopback=True, allow_private=True, resolver=stub_resolver(["169.254.169.254"])
    )
    with metadata.client(timeout=2) as client, pytest.raises(HostNotAllowed):
        client.get("http://metadata.example.test/")
    assert server.connections == [] and attempts == []


def test_one_inward_address_among_public_ones_is_enough_to_refuse(attempts):
    mixed = NetworkPolicy(
        resolver=stub_resolver(["93.184.215.14", "2606:2800:21f:cb07::1", "10.1.2.3"])
    )
    with pytest.raises(HostNotAllowed):
        mixed.check_url("https://storage.example.test/")
    assert attempts == []


def test_unresolvable_names_get_a_plain_message(attempts):
    with STRICT.client(timeout=2) as client, pytest.raises(HostUnresolvable) as unresolvable:
        client.get("http://no-such-host.invalid/")
    assert unresolvable.value.message == "Could not resolve the host name no-such-host.invalid."
    assert attempts == []


def test_dns_rebinding_cannot_redirect_a_checked_connection(listen, attempts):
    server = listen()
    # First answer: an allowed address. Every later answer: a refused one (the rebinding).
    rebinding = stub_resolver(["127.0.0.1"], ["10.0.0.1"])
    policy = NetworkPolicy(allow_loopback=True, resolver=rebinding)
    url = f"http://rebind.example.test:{server.port}/bucket/key"

    # The name is resolved once per client: every request goes to the checked address. The name
    # exists only in the stub, so httpx cannot have looked it up itself.
    with policy.client(timeout=2) as client:
        for method in ("PUT", "GET", "GET", "DELETE"):
            assert client.request(method, url).status_code == 200
    assert rebinding.calls == ["rebind.example.test"]
    assert {address for address, _port in attempts} == {"127.0.0.1"}
    assert server.hosts == [f"rebind.example.test:{server.port}"] * 4

    # A new client looks again and gets the rebound answer: refused, nothing attempted.
    attempts.clear()
    with policy.client(timeout=2) as client, pytest.raises(HostNotAllowed):
        client.get(url)
    assert attempts == []


def test_a_check_then_a_request_each_judge_their_own_lookup(attempts):
    """check_url for a URL handed elsewhere, then a request of our own: the second lookup is
    checked again, so passing the first check buys the attacker nothing."""
    policy = NetworkPolicy(
        allow_loopback=True, resolver=stub_resolver(["127.0.0.1"], ["169.254.169.254"])
    )
    assert policy.check_url("http://rebind.example.test/") == ipaddress.ip_address("127.0.0.1")
    with policy.client(timeout=2) as client, pytest.raises(HostNotAllowed):
        client.get("http://rebind.example.test/")
    assert attempts == []


def test_a_redirect_is_checked_like_the_first_request(listen, attempts):
    server = listen(redirect_to="http://169.254.169.254/latest/meta-data/")
    url = f"http://127.0.0.1:{server.port}/bucket"
    with NetworkPolicy(allow_loopback=True).client(timeout=2) as client:
        assert client.get(url).status_code == 302  # not followed unless asked
        with pytest.raises(HostNotAllowed):
            client.get(url, follow_redirects=True)
    assert {address for address, _port in attempts} == {"127.0.0.1"}


def test_the_transport_alone_checks_too(listen, attempts, monkeypatch):
    """For clients built elsewhere that take a transport (RayDashboard does): proxy settings in
    the environment do not route around it."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    server = listen()
    with (
        httpx.Client(transport=PinnedTransport(STRICT), timeout=2) as client,
        pytest.raises(HostNotAllowed),
    ):
        client.get(f"http://127.0.0.1:{server.port}/")
    with httpx.Client(
        transport=PinnedTransport(NetworkPolicy(allow_loopback=True)), timeout=2
    ) as client:
        assert client.get(f"http://127.0.0.1:{server.port}/").content == ANSWER
    assert attempts == [("127.0.0.1", server.port)] and len(server.connections) == 1


def test_a_checked_client_takes_no_proxy_or_transport_of_its_own():
    for bypass in (
        {"proxy": "http://127.0.0.1:3128"},
        {"mounts": {}},
        {"transport": httpx.HTTPTransport()},
        {"trust_env": True},
    ):
        with pytest.raises(TypeError):
            NetworkPolicy().client(**bypass)


@pytest.fixture(scope="module")
def tls_identity(tmp_path_factory):
    """A CA, and a server certificate it signs for tls.example.test only."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, server_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tls.example.test")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(2)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("tls.example.test")]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory = tmp_path_factory.mktemp("tls")
    (directory / "server.pem").write_bytes(
        leaf.public_bytes(serialization.Encoding.PEM)
        + server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(directory / "server.pem")
    client_context = ssl.create_default_context(
        cadata=ca.public_bytes(serialization.Encoding.PEM).decode()
    )
    return server_context, client_context


def test_https_keeps_sni_and_certificate_checks_on_the_original_name(listen, tls_identity):
    server_context, client_context = tls_identity
    server_names: list[str | None] = []
    server_context.sni_callback = lambda _sock, name, _context: server_names.append(name)
    server = listen(tls=server_context)
    policy = NetworkPolicy(allow_loopback=True, resolver=stub_resolver(["127.0.0.1"]))

    with policy.client(verify=client_context, timeout=2) as client:
        response = client.get(f"https://tls.example.test:{server.port}/bucket")
    assert response.content == ANSWER
    assert server_names == ["tls.example.test"] and server.hosts == [
        f"tls.example.test:{server.port}"
    ]

    # Another name pinned to the same address: its certificate does not match, so no request.
    with (
        policy.client(verify=client_context, timeout=2) as client,
        pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY"),
    ):
        client.get(f"https://other.example.test:{server.port}/bucket")
    assert server.hosts == [f"tls.example.test:{server.port}"]


# Through the portal: the endpoint field of the register form.


@pytest.fixture
def app(portal_config, lakehouse):
    """The portal with the production policy: no loopback, no private addresses."""
    return create_app(
        replace(portal_config, LAKEKEEPER_URL=lakehouse.catalog_url, OUTBOUND_ALLOW_LOOPBACK=False)
    )


def warehouse_form(endpoint: str, name: str) -> dict:
    keys = TEST_USER_KEYS["alice"]
    return {
        "name": name,
        "bucket": keys.bucket,
        "key_prefix": f"ssrf/{name}",
        "endpoint": endpoint,
        "region": "us-east-1",
        "path_style_access": "on",
        "flavor": "s3-compat",
        "access_key_id": keys.access_key_id,
        "secret_access_key": keys.secret_access_key,
    }


def endpoint_error(page: str) -> str:
    start = page.index('id="error-endpoint"')
    return html.unescape(page[page.index(">", start) + 1 : page.index("</small>", start)])


@pytest.mark.parametrize(
    "target", ["127.0.0.1", "[::1]", "localhost", "169.254.169.254", "10.0.0.1"]
)
def test_test_connection_and_register_show_the_policy_on_the_endpoint_field(
    target, app, client, auth, listen, attempts, db_engine
):
    server = listen("::1" if target == "[::1]" else "127.0.0.1")
    port = server.port if target in ("127.0.0.1", "[::1]", "localhost") else 80
    endpoint = f"http://{target}:{port}"
    auth.login("alice")
    csrf = auth.csrf_token()
    token = {"X-CSRFToken": csrf, "HX-Request": "true"}
    attempts.clear()  # the sign-in talked to the identity provider

    probed = client.post(
        "/warehouses/test-connection", data=warehouse_form(endpoint, "ssrf"), headers=token
    )
    assert probed.status_code == 422
    page = probed.get_data(as_text=True)
    assert 'hx-swap-oob="true"' in page and POLICY_MESSAGE in endpoint_error(page)
    assert "Fix the highlighted fields first: endpoint." in page

    name = f"ssrf-{abs(hash(target)) % 10000}"
    registered = client.post(
        "/warehouses/", data={**warehouse_form(endpoint, name), "csrf_token": csrf}
    )
    assert registered.status_code == 422
    page = registered.get_data(as_text=True)
    assert POLICY_MESSAGE in endpoint_error(page)
    # Nothing about what might be there: no status, no storage answer, no check results.
    for revealing in (
        "HTTP",
        "answered",
        "unreachable",
        "Connection failed",
        "check-write",
        ANSWER.decode(),
    ):
        assert revealing not in page and revealing not in probed.get_data(as_text=True)

    assert server.connections == []
    assert attempts == []  # neither to the target nor to Lakekeeper
    with Session(db_engine) as db:
        assert db.exec(select(Warehouse).where(Warehouse.name == name)).first() is None
