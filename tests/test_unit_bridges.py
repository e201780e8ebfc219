"""The socat bridges between the portal or the services and a sandboxed unit
(app/ray_clusters/sandbox.py): every TCP leg sends without Nagle's wait. A bridge relays a
reply in the pieces it reads; with Nagle, a second piece waits for the peer's ACK of the first,
which a kept connection's peer delays by about 40 ms."""
from __future__ import annotations

from pathlib import Path

from app.ray_clusters.sandbox import Endpoint, egress_forwarders, egress_routes, ingress_forwarders


def _tcp_legs(command: list[str]) -> list[str]:
    return [address for address in command[1:] if address.startswith(("TCP:", "TCP-LISTEN:"))]


def test_every_tcp_leg_of_a_bridge_sends_without_nagle(tmp_path: Path):
    routes = egress_routes([Endpoint("127.0.0.1", 9000), Endpoint("catalog.example", 443)], tmp_path)
    commands = [command for route in routes for command in egress_forwarders(route)]
    commands += list(ingress_forwarders(8123, tmp_path / "ingress"))
    legs = [leg for command in commands for leg in _tcp_legs(command)]
    assert len(legs) == len(commands)  # one TCP leg each: the other is the Unix socket
    assert all("nodelay" in leg.split(",")[1:] for leg in legs), legs
