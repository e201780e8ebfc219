"""Loopback ports of local compute units, reserved within this portal process.

Every port Ray would otherwise default is chosen explicitly and free, and reserved here, so
two units never collide; a restarted portal reserves an adopted unit's ports again.
"""

from __future__ import annotations

import random
import socket
import threading

from app.ports import free_port
from app.ray_clusters.base import ClusterHandle, ClusterStartError

# Worker port ranges are taken below Linux's ephemeral range (32768+), so outgoing
# connections never occupy them (single ports come from app.ports, below it too).
WORKER_PORT_AREA = (20000, 32000)
# Ports `ray start` checks every other port against even where it starts nothing on them (its
# Ray Client server's 10001 above all, which units never run): a unit's port must not be one.
RAY_DEFAULT_PORTS = frozenset({6379, 8265, 10001, 52365})
_lock = threading.Lock()
_reserved_ports: set[int] = set()


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserve_port() -> int:
    with _lock:
        while (port := free_port()) in _reserved_ports or port in RAY_DEFAULT_PORTS:
            pass
        _reserved_ports.add(port)
        return port


def reserve_port_block(size: int) -> list[int]:
    low, high = WORKER_PORT_AREA
    with _lock:
        for _ in range(200):
            first = random.randrange(low, high - size)
            block = list(range(first, first + size))
            if not _reserved_ports.union(RAY_DEFAULT_PORTS).intersection(block) and all(
                port_is_free(port) for port in block
            ):
                _reserved_ports.update(block)
                return block
    raise ClusterStartError(f"no {size} consecutive free ports between {low} and {high}")


def handle_ports(handle: ClusterHandle) -> set[int]:
    ports = set(handle.details.get("ports", {}).values())
    for node in handle.details.get("nodes", []):
        ports.update(node["ports"].values())
        if "worker_ports" in node:
            first, last = node["worker_ports"]
            ports.update(range(first, last + 1))
    return ports


def reserve(ports: set[int]) -> None:
    with _lock:
        _reserved_ports.update(ports)


def release(ports: set[int]) -> None:
    with _lock:
        _reserved_ports.difference_update(ports)
