"""Two local stacks side by side: each has a database of its own, its worker beside its web
workers, and stopping one touches only its own compute units."""

from __future__ import annotations

import socket

from sqlmodel import Session, select

from app.db import make_engine
from app.models import ComputeUnit, ComputeUnitEvent, User
from app.ports import port_is_open
from devstack.database import drop_postgres_database, stack_database_name
from devstack.seaweedfs import SeaweedConfig, start_seaweedfs_on_free_ports
from devstack.stack import LocalStack, StackPorts


def add_running_unit(database_url: str, name: str) -> int:
    """A RUNNING local unit row (no cluster: stopping it only has to record it)."""
    engine = make_engine(database_url)
    try:
        with Session(engine) as db:
            user = User(issuer="https://tests.invalid", subject=name, email=f"{name}@example.test")
            db.add(user)
            db.flush()
            cu = ComputeUnit(owner_id=user.id, name=name, kind="local", state="RUNNING")
            db.add(cu)
            db.commit()
            return cu.id
    finally:
        engine.dispose()


def unit_and_events(database_url: str, cu_id: int) -> tuple[ComputeUnit, list[str]]:
    engine = make_engine(database_url)
    try:
        with Session(engine) as db:
            events = list(
                db.exec(
                    select(ComputeUnitEvent.message).where(
                        ComputeUnitEvent.compute_unit_id == cu_id
                    )
                )
            )
            return db.get(ComputeUnit, cu_id), events
    finally:
        engine.dispose()


def test_two_local_stacks_have_their_own_databases_and_stop_independently(tmp_path):
    # The units here have no cluster: no supervisor pass should call them lost meanwhile.
    quiet = {"LAKEPORT_WORKER_SUPERVISOR_SECONDS": "3600"}
    names = [stack_database_name(tmp_path / name) for name in ("first", "second")]
    assert names[0] != names[1] and all(name.startswith("lakeport_dev_") for name in names)
    first = second = None
    try:
        # Each stack's ports are picked just before it starts: ports picked earlier may be taken
        # meanwhile (the first stack's own connections use the same ephemeral range).
        first = LocalStack(tmp_path / "first", StackPorts.free(), portal_settings=quiet)
        first.start(say=lambda _message: None)
        second = LocalStack(tmp_path / "second", StackPorts.free(), portal_settings=quiet)
        second.start(say=lambda _message: None)
        assert first.database_url != second.database_url
        assert first.database_url.endswith(f"/{names[0]}") and second.database_url.endswith(
            f"/{names[1]}"
        )
        for stack in (first, second):
            assert stack.process("worker").running and stack.process("portal").running
        first_unit = add_running_unit(first.database_url, "first-owner")
        second_unit = add_running_unit(second.database_url, "second-owner")

        first.stop()
        stopped, _ = unit_and_events(first.database_url, first_unit)
        assert (stopped.state, stopped.reason) == ("TERMINATED", "the local stack stopped")
        untouched, events = unit_and_events(second.database_url, second_unit)
        assert untouched.state == "RUNNING" and not any(
            "local stack stopped" in event for event in events
        )
        assert second.process("worker").running and second.process("portal").running

        # The worker alone starts again with a changed setting (the benchmarks' pool does so).
        old_worker = second.process("worker")
        second.restart_worker(LAKEPORT_WORKER_SUPERVISOR_SECONDS="7200")
        new_worker = second.process("worker")
        assert [process.name for process in second.processes].count("worker") == 1
        assert new_worker is not old_worker and new_worker.running and not old_worker.running
        assert new_worker.env["LAKEPORT_WORKER_SUPERVISOR_SECONDS"] == "7200"
        assert second.process("portal").running
    finally:
        for stack in (first, second):
            if stack is not None:
                stack.stop()
        for name in names:
            drop_postgres_database(name)


def test_seaweedfs_starts_again_on_new_ports_when_a_picked_port_is_taken_first(
    tmp_path, monkeypatch
):
    """A port picked free can be bound by another program before SeaweedFS binds it."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    first_config = SeaweedConfig.on_free_ports(tmp_path / "seaweedfs")
    first_config.iceberg_port = taken.getsockname()[1]
    configs = iter([first_config])
    real_pick = SeaweedConfig.on_free_ports.__func__
    monkeypatch.setattr(
        SeaweedConfig,
        "on_free_ports",
        classmethod(lambda cls, data_dir: next(configs, None) or real_pick(cls, data_dir)),
    )
    try:
        config, process = start_seaweedfs_on_free_ports(tmp_path / "seaweedfs", tmp_path / "logs")
        try:
            assert config is not first_config
            assert config.iceberg_port != taken.getsockname()[1]
            assert (
                f"port {taken.getsockname()[1]}"
                in (tmp_path / "logs" / "seaweedfs.log").read_text()
            )
            assert port_is_open(config.iceberg_port)  # started returns once it answers
        finally:
            process.stop()
    finally:
        taken.close()


def test_a_picked_port_is_never_one_browsers_refuse(monkeypatch):
    """A stack whose identity provider listened on 10080 could not be signed in to (Chromium
    refuses that port): the picker passes over it."""
    from app import ports

    picks = iter([10080, 10080, 12345])
    monkeypatch.setattr(ports.random, "randrange", lambda low, high: next(picks))
    assert ports.free_port() == 12345
