"""The socat bridges between the portal or the services and a sandboxed unit
(app/ray_clusters/sandbox.py): every TCP leg sends without Nagle's wait, and every relay moves
large blocks. A bridge relays a reply in the pieces it reads; with Nagle, a second piece waits
for the peer's ACK of the first, which a kept connection's peer delays by about 40 ms. With
socat's default 8 KiB blocks, the data a unit reads from storage cost its relays two system
calls per 8 KiB each, on the cores the unit computes on."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

from app.ports import free_port, port_is_open
from app.ray_clusters.sandbox import (
    BRIDGE_BLOCK_BYTES,
    EgressRoute,
    Endpoint,
    egress_forwarders,
    egress_routes,
    ingress_forwarders,
)


def _tcp_legs(command: list[str]) -> list[str]:
    return [address for address in command[1:] if address.startswith(("TCP:", "TCP-LISTEN:"))]


def _every_bridge_command(tmp_path: Path) -> list[list[str]]:
    routes = egress_routes(
        [Endpoint("127.0.0.1", 9000), Endpoint("catalog.example", 443)], tmp_path
    )
    commands = [command for route in routes for command in egress_forwarders(route)]
    return commands + list(ingress_forwarders(8123, tmp_path / "ingress"))


def test_every_tcp_leg_of_a_bridge_sends_without_nagle(tmp_path: Path):
    commands = _every_bridge_command(tmp_path)
    legs = [leg for command in commands for leg in _tcp_legs(command)]
    assert len(legs) == len(commands)  # one TCP leg each: the other is the Unix socket
    assert all("nodelay" in leg.split(",")[1:] for leg in legs), legs


def test_every_relay_of_a_bridge_moves_large_blocks(tmp_path: Path):
    assert BRIDGE_BLOCK_BYTES >= 64 * 1024
    for command in _every_bridge_command(tmp_path):
        assert command[:3] == ["socat", "-b", str(BRIDGE_BLOCK_BYTES)], command


def _serve(listener: socket.socket, payload: bytes, received: list) -> None:
    """Each connection: read what it sends until it shuts down its side, note its digest, then
    send `payload` (a connection that is gone by then is let go)."""
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            return  # the test closed the listener
        with connection:
            digest, size = hashlib.sha256(), 0
            while chunk := connection.recv(1 << 16):
                digest.update(chunk)
                size += len(chunk)
            received.append({"sha256": digest.hexdigest(), "size": size})
            try:
                connection.sendall(payload)
            except OSError:
                pass


def _wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while not port_is_open(port):
        assert time.monotonic() < deadline, f"nothing listens on 127.0.0.1:{port}"
        time.sleep(0.05)


def test_a_bridge_relays_large_streams_both_ways_byte_for_byte(tmp_path: Path):
    """The two halves of an egress bridge as a unit runs them (the inside one listening where the
    unit connects, the outside one dialling the service), chained through their Unix socket:
    24 MiB up and 24 MiB down arrive whole and in order."""
    service = socket.create_server(("127.0.0.1", 0))
    service_port, front_port = service.getsockname()[1], free_port()
    relay_socket = tmp_path / "egress-0"
    outside, _ = egress_forwarders(
        EgressRoute(Endpoint("127.0.0.1", service_port), "127.0.0.1", relay_socket)
    )
    _, inside = egress_forwarders(
        EgressRoute(Endpoint("127.0.0.1", front_port), "127.0.0.1", relay_socket)
    )
    up, down, received = os.urandom(24 << 20), os.urandom(24 << 20), []
    threading.Thread(target=_serve, args=(service, down, received), daemon=True).start()
    relays = [subprocess.Popen(outside), subprocess.Popen(inside)]
    try:
        _wait_for_port(front_port)  # an empty connection, relayed to the service like any other
        with socket.create_connection(("127.0.0.1", front_port), timeout=30) as client:
            client.sendall(up)
            client.shutdown(socket.SHUT_WR)
            got = bytearray()
            while chunk := client.recv(1 << 20):
                got += chunk
    finally:
        for relay in relays:
            relay.kill()
            relay.wait()
        service.close()
    assert {"sha256": hashlib.sha256(up).hexdigest(), "size": len(up)} in received
    assert len(got) == len(down) and bytes(got) == down
