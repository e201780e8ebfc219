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

Use `portal_policy()` inside the app: `policy.client()` for an httpx client whose every request
is checked and pinned (or `PinnedTransport(policy)` for a client that takes a transport),
`policy.check_url(url)` before handing a URL to another service (such as Lakekeeper, which then
connects itself). Operator-configured addresses (Lakekeeper, the identity provider, Ray clusters
the operator lists) are trusted and do not go through it.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.errors import UserFacingError

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

REFUSED_MESSAGE = "{host} is not allowed by this portal's network policy."
UNRESOLVABLE_MESSAGE = "Could not resolve the host name {host}."

_net = ipaddress.ip_network
# Instance metadata services: AWS (and its IPv6 form), ECS task metadata, AWS's DNS and time
# servers, Oracle Cloud, Alibaba Cloud (inside CGNAT space, so not covered by link-local).
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "169.254.169.253", "169.254.169.123", "fd00:ec2::254",
    "fd00:ec2::23", "fd00:ec2::123", "192.0.0.192", "100.100.100.200",
))
LINK_LOCAL = (_net("169.254.0.0/16"), _net("fe80::/10"))
LOOPBACK = (_net("127.0.0.0/8"), _net("::1/128"))
NEVER_A_SERVER = (_net("0.0.0.0/8"), _net("::/128"), _net("224.0.0.0/4"), _net("ff00::/8"),
                  _net("240.0.0.0/4"))  # 240/4 includes the broadcast address
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
    """The addresses `host` has for a TCP connection (as getaddrinfo, hence httpx, would find them)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise HostUnresolvable(host) from None
    return list(dict.fromkeys(info[4][0] for info in infos))


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if address.version == 4:
        return None
    if any(address in network for network in NAT64) or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.ipv4_mapped or address.sixtofour


def refusal_reason(address: IPAddress, *, allow_loopback: bool, allow_private: bool) -> str | None:
    """Why the policy refuses `address` (for the portal's log), or None if it may be contacted."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:  # the IPv4 address is where the connection ends up
        reason = refusal_reason(embedded, allow_loopback=allow_loopback, allow_private=allow_private)
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
        return cls(allow_loopback=bool(config.get("OUTBOUND_ALLOW_LOOPBACK")),
                   allow_private=bool(config.get("OUTBOUND_ALLOW_PRIVATE")))

    def resolve(self, host: str, port: int) -> IPAddress:
        """Resolve `host` once; the address to connect to if every address it has is allowed."""
        # An IPv6 link-local answer may carry a zone ("fe80::1%eth0").
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in self.resolver(host, port)]
        if not addresses:
            raise HostUnresolvable(host)
        for address in addresses:
            reason = refusal_reason(address, allow_loopback=self.allow_loopback, allow_private=self.allow_private)
            if reason:
                log.info("network policy refused %s:%s (%s: %s)", host, port, address, reason)
                raise HostNotAllowed(host)
        return addresses[0]

    def check_url(self, url: str | httpx.URL) -> IPAddress:
        """Refuse (OutboundRefused) a URL whose host the policy does not allow; else its address."""
        host, port = _host_and_port(httpx.URL(url))
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
        return httpx.Client(transport=PinnedTransport(self, verify=verify), trust_env=False,
                            **{"follow_redirects": False, **client_options})


def _host_and_port(url: httpx.URL) -> tuple[str, int]:
    if url.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol("only http:// and https:// URLs")
    if not url.raw_host:
        raise OutboundRefused("The URL names no host.")
    return url.raw_host.decode("ascii"), url.port or (443 if url.scheme == "https" else 80)


class PinnedTransport(httpx.BaseTransport):
    """Resolves each host once through the policy, then always connects to that address.

    One connection pool per (scheme, host, port), so a TLS connection verified for one host
    name is never reused for another that shares its address. Any httpx client that takes a
    transport can use it (httpx then ignores proxy settings from the environment).
    """

    def __init__(self, policy: NetworkPolicy, **transport_options: Any) -> None:
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
                self._pinned[key] = (address, httpx.HTTPTransport(**self._transport_options))
            address, transport = self._pinned[key]
        extensions = dict(request.extensions)
        if request.url.scheme == "https":
            extensions["sni_hostname"] = host
        # The Host header was set from the original URL when the request was built.
        pinned = httpx.Request(request.method, request.url.copy_with(host=str(address)),
                               headers=request.headers, stream=request.stream, extensions=extensions)
        return transport.handle_request(pinned)

    def close(self) -> None:
        with self._lock:
            for _address, transport in self._pinned.values():
                transport.close()
            self._pinned.clear()


def portal_policy() -> NetworkPolicy:
    """The policy the running portal's settings ask for (needs an app context)."""
    from flask import current_app

    return NetworkPolicy.from_config(current_app.config)
