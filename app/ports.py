"""Loopback TCP ports: find a free one, check that one answers. Shared by the portal's local
compute units and the local stack (devstack), which builds on the portal, never the reverse."""

from __future__ import annotations

import random
import socket

# Ports are picked below Linux's ephemeral range (32768+), where outgoing connections take their
# local ports, so a port picked now is still free when its service starts a little later; and
# below the area local compute units take their workers' port blocks from (20000+).
PICK_AREA = (10000, 20000)
# Ports browsers refuse to open ("unsafe ports"; Chromium's list holds 10080 in this area): a
# local stack whose identity provider got one could not be signed in to.
BROWSER_REFUSED_PORTS = frozenset({10080})


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    for _ in range(1000):
        port = random.randrange(*PICK_AREA)
        if port in BROWSER_REFUSED_PORTS:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port between {PICK_AREA[0]} and {PICK_AREA[1]}")


def port_is_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0
