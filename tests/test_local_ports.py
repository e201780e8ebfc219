"""A local unit's ports are never the ones `ray start` holds every other port against (its Ray
Client server's 10001), even when the machine would hand one out as free."""

from __future__ import annotations

from app.ray_clusters import local_ports


def test_a_unit_port_is_never_one_of_rays_defaults(monkeypatch):
    offered = iter([10001, 6379, 23456])
    monkeypatch.setattr(local_ports, "free_port", lambda: next(offered))
    port = local_ports.reserve_port()
    try:
        assert port == 23456
    finally:
        local_ports.release({port})


def test_a_worker_port_block_never_covers_rays_defaults(monkeypatch):
    monkeypatch.setattr(local_ports, "WORKER_PORT_AREA", (9990, 10013))
    block = local_ports.reserve_port_block(10)
    try:
        assert 10001 not in block and len(block) == 10
    finally:
        local_ports.release(set(block))
