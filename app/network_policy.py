"""Which hosts the portal may contact when a user names them (storage endpoints, ...).

A user who types an endpoint must not make the portal reach what only the portal can reach:
the cloud's metadata service, loopback services, the private network. So a user-supplied URL
goes through a `NetworkPolicy`: its host name is resolved ONCE (`NetworkPolicy.resolve`, the only
lookup), every address it resolves to is checked, and the connection is made to that checked
address. httpx never looks the name up again, so a DNS answer that changes between the check and
the connection (DNS rebinding) cannot redirect it. The request keeps the original Host header,
and for https the TLS SNI and the certificate check use the original host name (httpcore's
`sni_hostname` request extension).

What is refused:
- always: link-local addresses (169.254.0.0/16, fe80::/10) and the clouds' metadata services,
  and addresses no storage server can have (unspecified — Linux delivers 0.0.0.0 to this host —
  multicast, broadcast, 240.0.0.0/4);
- unless the operator allows it: loopback (`LAKEPORT_OUTBOUND_ALLOW_LOOPBACK`), and private or
  otherwise non-public addresses such as 10/8, 172.16/12, 192.168/16, fc00::/7 and CGNAT
  100.64/10 (`LAKEPORT_OUTBOUND_ALLOW_PRIVATE`).
IPv6 addresses that carry an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4) are judged
by that IPv4 address, where the connection ends up.
Numeric spellings such as 2130706433 or 0x7f.1 need no special case: the check is on what the
name resolves to, never on its spelling.

A refusal happens before any connection and says only that the policy refuses the host: no
address, status code or timing of whatever might have answered.

Every request to such a host may also run under a total deadline (`total_deadline(seconds)`):
httpx's timeouts bound each read, so a server that sends one byte every few seconds would hold
the request for as long as it likes; under a deadline every connect, read and write waits at
most what is left of it, and a watchdog shuts the socket at the deadline (a TLS handshake reads
many times under one timeout). `read_capped` reads a body up to a cap.

Webhooks have a policy of their own (`WebhookPolicy`): whatever the loopback and private
switches say, a webhook may not reach loopback, link-local or private addresses, nor the portal's
own services (its public URL, the catalog, the identity provider, the database, the SMTP
server), unless the operator names its host in `LAKEPORT_WEBHOOK_ALLOWED_HOSTS`. Its URL is
parsed strictly first (`parse_webhook_url`): only http and https, no user info, an IPv4 address
only in its four-decimal form (the OS reads 2130706433, 0x7f000001 and 127.1 as 127.0.0.1).

Use `portal_policy()` inside the app: `policy.client()` for an httpx client whose every request
is checked and pinned (or `PinnedTransport(policy)` for a client that takes a transport),
`policy.check_url(url)` before handing a URL to another service (such as Lakekeeper, which then
connects itself). Operator-configured addresses (Lakekeeper, the identity provider, Ray clusters
the operator lists) are trusted and do not go through it.
"""

from __future__ import annotations

import contextvars
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from app.errors import UserFacingError

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

REFUSED_MESSAGE = "{host} is not allowed by this portal's network policy."
# The longest a check's name lookups may take (a user's name server may answer slowly on purpose).
LOOKUP_SECONDS = 5.0
UNRESOLVABLE_MESSAGE = "Could not resolve the host name {host}."

_net = ipaddress.ip_network
# Instance metadata services: AWS (and its IPv6 form), ECS task metadata, AWS's DNS and time
# servers, Oracle Cloud, Alibaba Cloud (inside CGNAT space, so not covered by link-local).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "169.254.169.253",
        "169.254.169.123",
        "fd00:ec2::254",
        "fd00:ec2::23",
        "fd00:ec2::123",
        "192.0.0.192",
        "100.100.100.200",
    )
)
LINK_LOCAL = (_net("169.254.0.0/16"), _net("fe80::/10"))
LOOPBACK = (_net("127.0.0.0/8"), _net("::1/128"))
NEVER_A_SERVER = (
    _net("0.0.0.0/8"),
    _net("::/128"),
    _net("224.0.0.0/4"),
    _net("ff00::/8"),
    _net("240.0.0.0/4"),
)  # 240/4 includes the broadcast address
# Non-public ranges ipaddress (Python 3.11) counts as global.
ALSO_PRIVATE = (_net("100.64.0.0/10"), _net("fec0::/10"))
# IPv6 forms that carry an IPv4 address in their last 32 bits (besides IPv4-mapped and 6to4):
# NAT64, and the deprecated IPv4-compatible ::a.b.c.d.
NAT64 = (_net("64:ff9b::/96"), _net("64:ff9b:1::/48"))
IPV4_COMPATIBLE = _net("::/96")


class OutboundRefused(UserFacingError):
    """The request was not made; `message` is for the user and says nothing about the target."""


class HostNotAllowed(OutboundRefused):
    def __init__(self, host: str) -> None:
        super().__init__(REFUSED_MESSAGE.format(host=host))


class HostUnresolvable(OutboundRefused):
    def __init__(self, host: str) -> None:
        super().__init__(UNRESOLVABLE_MESSAGE.format(host=host))


Resolver = Callable[[str, int], list[str]]


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses `host` has for a TCP connection (as getaddrinfo, hence httpx, would find them).

    Under a total deadline the lookup runs in a thread of its own and is given up when the
    deadline passes (getaddrinfo has no timeout of its own; a slow name server would hold the
    caller up to the resolver's attempts times its timeout)."""
    left = _time_left()
    if left is None:
        return _getaddrinfo(host, port)
    answer: list = []
    lookup = threading.Thread(
        target=lambda: answer.append(_lookup_or_error(host, port)),
        daemon=True,
        name="outbound-lookup",
    )
    lookup.start()
    lookup.join(max(left, 0.0))
    if not answer:
        raise HostUnresolvable(host)
    if isinstance(answer[0], Exception):
        raise answer[0]
    return answer[0]


def _getaddrinfo(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise HostUnresolvable(host) from None
    return list(dict.fromkeys(info[4][0] for info in infos))


def _lookup_or_error(host: str, port: int) -> list[str] | Exception:
    try:
        return _getaddrinfo(host, port)
    except HostUnresolvable as error:
        return error


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if address.version == 4:
        return None
    if any(address in network for network in NAT64) or (
        address in IPV4_COMPATIBLE and int(address) > 1
    ):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.ipv4_mapped or address.sixtofour


def refusal_reason(address: IPAddress, *, allow_loopback: bool, allow_private: bool) -> str | None:
    """Why the policy refuses `address` (for the portal's log), or None if it may be contacted."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:  # the IPv4 address is where the connection ends up
        reason = refusal_reason(
            embedded, allow_loopback=allow_loopback, allow_private=allow_private
        )
        return f"{reason} (embedded in {address})" if reason else None
    if address in METADATA_ADDRESSES:
        return "cloud metadata"
    if any(address in network for network in LINK_LOCAL):
        return "link-local"
    if any(address in network for network in NEVER_A_SERVER):
        return "unspecified, multicast or reserved"
    if any(address in network for network in LOOPBACK):
        return None if allow_loopback else "loopback"
    if not address.is_global or any(address in network for network in ALSO_PRIVATE):
        return None if allow_private else "private or not public"
    return None


@dataclass(frozen=True)
class NetworkPolicy:
    allow_loopback: bool = False
    allow_private: bool = False
    # The single place names are looked up; tests hand in their own to play DNS tricks.
    resolver: Resolver = field(default=system_resolver, compare=False, repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "NetworkPolicy":
        return cls(
            allow_loopback=bool(config.get("OUTBOUND_ALLOW_LOOPBACK")),
            allow_private=bool(config.get("OUTBOUND_ALLOW_PRIVATE")),
        )

    def resolve(self, host: str, port: int) -> IPAddress:
        """Resolve `host` once; the address to connect to if every address it has is allowed."""
        # An IPv6 link-local answer may carry a zone ("fe80::1%eth0").
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in self.resolver(host, port)]
        if not addresses:
            raise HostUnresolvable(host)
        for address in addresses:
            reason = refusal_reason(
                address, allow_loopback=self.allow_loopback, allow_private=self.allow_private
            )
            if reason:
                log.info("network policy refused %s:%s (%s: %s)", host, port, address, reason)
                raise HostNotAllowed(host)
        return addresses[0]

    def check_url(self, url: str | httpx.URL) -> IPAddress:
        """Refuse (OutboundRefused) a URL whose host the policy does not allow; else its address.
        The lookup ends within LOOKUP_SECONDS (or the deadline the caller set, if sooner)."""
        host, port = _host_and_port(httpx.URL(url))
        with total_deadline(LOOKUP_SECONDS):
            return self.resolve(host, port)

    def client(self, *, verify: Any = True, **client_options: Any) -> httpx.Client:
        """An httpx client whose every request is checked and sent to the checked address.

        Redirects are not followed by default (a redirect a request asks for goes through the same
        check). Proxies, from the environment or given, are not allowed: a proxy would do its own
        lookup, past the check.
        """
        bypassing = {"transport", "mounts", "proxy", "trust_env"} & set(client_options)
        if bypassing:
            raise TypeError(f"a policy-checked client takes no {', '.join(sorted(bypassing))}")
        return httpx.Client(
            transport=PinnedTransport(self, verify=verify),
            trust_env=False,
            **{"follow_redirects": False, **client_options},
        )


def _host_and_port(url: httpx.URL) -> tuple[str, int]:
    if url.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol("only http:// and https:// URLs")
    if not url.raw_host:
        raise OutboundRefused("The URL names no host.")
    return url.raw_host.decode("ascii"), url.port or (443 if url.scheme == "https" else 80)


# The deadline of the outbound work this thread (or context) does, as a time.monotonic() value.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "outbound_deadline", default=None
)


@contextmanager
def total_deadline(seconds: float) -> Iterator[None]:
    """Every request through a `PinnedTransport` inside this block ends by `seconds` from now,
    however its server paces its bytes (an earlier, shorter deadline stays in force)."""
    end = time.monotonic() + seconds
    outer = _deadline.get()
    token = _deadline.set(end if outer is None else min(outer, end))
    try:
        yield
    finally:
        _deadline.reset(token)


def _time_left() -> float | None:
    end = _deadline.get()
    return None if end is None else end - time.monotonic()


def deadline_passed() -> bool:
    """Whether this context's total deadline has passed (False without one)."""
    left = _time_left()
    return left is not None and left <= 0


def _clamped(timeout: float | None, timeout_error: type[Exception]) -> float | None:
    """`timeout`, shortened to what is left of the deadline; raises `timeout_error` once it passed."""
    left = _time_left()
    if left is None:
        return timeout
    if left <= 0:
        raise timeout_error("the total deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every operation waits at most what is left of the deadline; a watchdog
    shuts its socket at the deadline, for what one timeout cannot bound (a TLS handshake)."""

    def __init__(self, stream: httpcore.NetworkStream, watchdog: threading.Timer | None) -> None:
        self._stream, self._watchdog = stream, watchdog

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _clamped(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _clamped(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._stream.close()

    def start_tls(
        self, ssl_context, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = self._stream.start_tls(
            ssl_context, server_hostname, _clamped(timeout, httpcore.ConnectTimeout)
        )
        return _DeadlineStream(tls, self._watchdog)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own socket backend, under the deadline of the context that connects."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options=None,
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_tcp(
            host, port, _clamped(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        left = _time_left()
        watchdog = None
        sock = stream.get_extra_info("socket")
        if left is not None and sock is not None:
            watchdog = threading.Timer(max(left, 0.0), _shut, (sock,))
            watchdog.daemon = True
            watchdog.start()
        return _DeadlineStream(stream, watchdog)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options=None):
        raise httpcore.ConnectError("no unix sockets for user-named hosts")

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # a blocked recv in the request's thread returns at once
    except OSError:
        pass


def _deadline_transport(**transport_options: Any) -> httpx.HTTPTransport:
    transport = httpx.HTTPTransport(**transport_options)
    # httpx takes no network backend; its pool (httpcore.ConnectionPool) keeps the one it uses here.
    pool = transport._pool
    if not isinstance(getattr(pool, "_network_backend", None), httpcore.NetworkBackend):
        raise RuntimeError(
            "httpcore's connection pool changed: the outbound deadline cannot be applied"
        )
    pool._network_backend = _DeadlineBackend(pool._network_backend)
    return transport


class BodyTooLarge(Exception):
    """A response's body is longer than the caller takes."""


def read_capped(response: httpx.Response, cap: int) -> bytes:
    """The response's body as sent (not decompressed), refused (BodyTooLarge) past `cap` bytes."""
    body = bytearray()
    for chunk in response.iter_raw():
        body += chunk
        if len(body) > cap:
            raise BodyTooLarge(f"the answer is longer than {cap} bytes")
    return bytes(body)


class PinnedTransport(httpx.BaseTransport):
    """Resolves each host once through the policy, then always connects to that address.

    One connection pool per (scheme, host, port), so a TLS connection verified for one host
    name is never reused for another that shares its address. Any httpx client that takes a
    transport can use it (httpx then ignores proxy settings from the environment).
    """

    def __init__(self, policy: "NetworkPolicy | WebhookPolicy", **transport_options: Any) -> None:
        self._policy = policy
        self._transport_options = transport_options
        self._pinned: dict[tuple[str, str, int], tuple[IPAddress, httpx.HTTPTransport]] = {}
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        host, port = _host_and_port(request.url)
        key = (request.url.scheme, host, port)
        with self._lock:
            if key not in self._pinned:
                address = self._policy.resolve(host, port)
                self._pinned[key] = (address, _deadline_transport(**self._transport_options))
            address, transport = self._pinned[key]
        extensions = dict(request.extensions)
        if request.url.scheme == "https":
            extensions["sni_hostname"] = host
        # The Host header was set from the original URL when the request was built.
        pinned = httpx.Request(
            request.method,
            request.url.copy_with(host=str(address)),
            headers=request.headers,
            stream=request.stream,
            extensions=extensions,
        )
        return transport.handle_request(pinned)

    def close(self) -> None:
        with self._lock:
            for _address, transport in self._pinned.values():
                transport.close()
            self._pinned.clear()


WEBHOOK_URL_MESSAGE = "An http:// or https:// URL, e.g. https://hooks.example.com/lakeport."
# The settings that name the portal's own services: a webhook must not make the portal call them.
OWN_SERVICE_SETTINGS = (
    "PUBLIC_URL",
    "LAKEKEEPER_URL",
    "OIDC_ISSUER",
    "DATABASE_URL",
    "KUBERAY_API_URL",
    "SMTP_HOST",
    "CU_ALLOWED_ENDPOINTS",
)


def parse_webhook_url(url: str) -> httpx.URL:
    """The URL as httpx (the deliverer) reads it, if it is a plain http(s) URL; else OutboundRefused.

    No user info (`user@host`: a receiver has its own credentials in its path, and the `@` hides
    the real host from a reader), no IPv4 address in another spelling than a.b.c.d (the OS reads
    2130706433, 0x7f000001, 0177.1 and 127.1 as addresses), no IPv6 zone, nothing a parser could
    read another way (spaces, control characters, backslashes)."""
    if not url or len(url) > 1000 or any(c.isspace() or ord(c) < 32 or c == "\\" for c in url):
        raise OutboundRefused(WEBHOOK_URL_MESSAGE)
    try:
        parsed = httpx.URL(url)
        port = parsed.port
    except (httpx.InvalidURL, ValueError, TypeError):
        raise OutboundRefused(WEBHOOK_URL_MESSAGE) from None
    if (
        parsed.scheme not in ("http", "https")
        or not parsed.raw_host
        or not 0 < (port or 80) < 65536
    ):
        raise OutboundRefused(WEBHOOK_URL_MESSAGE)
    if parsed.userinfo or "@" in (urlsplit(url).netloc or ""):
        raise OutboundRefused("A webhook URL cannot carry a user name or password (user@host).")
    host = parsed.raw_host.decode("ascii")
    if "%" in host:
        raise OutboundRefused(WEBHOOK_URL_MESSAGE)
    if ":" not in host and _numeric_ipv4(host) and not _dotted_quad(host):
        raise OutboundRefused("Write an IPv4 address as four decimal numbers, e.g. 203.0.113.7.")
    return parsed


def _numeric_ipv4(host: str) -> bool:
    """Whether the OS (inet_aton, as getaddrinfo) reads `host` as an IPv4 address."""
    try:
        socket.inet_aton(host)
    except (OSError, ValueError):
        return False
    return True


def _dotted_quad(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def _host_key(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def _service_hosts(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The host names of the portal's own services, from its settings."""
    hosts = []
    for name in OWN_SERVICE_SETTINGS:
        for value in str(config.get(name) or "").split(","):
            value = value.strip()
            if not value:
                continue
            if "://" not in value:
                value = f"//{value}"  # a bare host, or host:port
            try:
                host = urlsplit(value).hostname
            except ValueError:
                host = None
            if host:
                hosts.append(_host_key(host))
    return tuple(dict.fromkeys(hosts))


@dataclass(frozen=True)
class WebhookPolicy:
    """Where a webhook may go: public addresses that are none of the portal's own services, or a
    host the operator lists (`allowed_hosts`, as the URL writes it). Metadata services and
    addresses no server has are refused even then."""

    allowed_hosts: frozenset[str] = frozenset()
    own_hosts: tuple[str, ...] = ()
    resolver: Resolver = field(default=system_resolver, compare=False, repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "WebhookPolicy":
        listed = str(config.get("WEBHOOK_ALLOWED_HOSTS") or "").split(",")
        return cls(
            allowed_hosts=frozenset(_host_key(host) for host in listed if host.strip()),
            own_hosts=_service_hosts(config),
        )

    def resolve(self, host: str, port: int) -> IPAddress:
        """Resolve `host` once; the address to connect to if the policy lets a webhook go there."""
        key = _host_key(host)
        listed = key in self.allowed_hosts
        if key in self.own_hosts and not listed:
            log.info("webhook policy refused %s: one of the portal's own services", host)
            raise HostNotAllowed(host)
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in self.resolver(host, port)]
        if not addresses:
            raise HostUnresolvable(host)
        own = set() if listed else self._own_addresses()
        for address in addresses:
            reason = refusal_reason(address, allow_loopback=False, allow_private=False)
            if listed and reason in ("loopback", "private or not public", "link-local"):
                reason = None  # the operator named this host
            if reason is None and address in own:
                reason = "one of the portal's own services"
            if reason:
                log.info("webhook policy refused %s:%s (%s: %s)", host, port, address, reason)
                raise HostNotAllowed(host)
        return addresses[0]

    def _own_addresses(self) -> set[IPAddress]:
        found: set[IPAddress] = set()
        for host in self.own_hosts:
            try:
                found.update(
                    ipaddress.ip_address(a.split("%", 1)[0]) for a in self.resolver(host, 0)
                )
            except (OutboundRefused, ValueError):
                continue  # a service whose name does not resolve here cannot be reached through it
        return found

    def check_url(self, url: str) -> IPAddress:
        """Refuse (OutboundRefused) a webhook URL that is not plain, or whose host is not allowed."""
        parsed = parse_webhook_url(url)
        host, port = _host_and_port(parsed)
        with total_deadline(LOOKUP_SECONDS):
            return self.resolve(host, port)

    def client(self, **client_options: Any) -> httpx.Client:
        """An httpx client that sends each request to the address this policy checked (no
        redirect followed, no proxy)."""
        return httpx.Client(
            transport=PinnedTransport(self),
            trust_env=False,
            **{"follow_redirects": False, **client_options},
        )


def webhook_policy() -> WebhookPolicy:
    """The webhook policy the running portal's settings ask for (needs an app context)."""
    from flask import current_app

    return WebhookPolicy.from_config(current_app.config)


def portal_policy() -> NetworkPolicy:
    """The policy the running portal's settings ask for (needs an app context)."""
    from flask import current_app

    return NetworkPolicy.from_config(current_app.config)
