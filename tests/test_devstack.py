"""Two local stacks side by side: each has a database of its own, its worker beside its web
workers, and stopping one touches only its own compute units."""
from __future__ import annotations

from sqlmodel import Session, select

from app.db import make_engine
from app.models import ComputeUnit, ComputeUnitEvent, User
from devstack.database import drop_postgres_database, stack_database_name
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
            events = list(db.exec(select(ComputeUnitEvent.message).where(ComputeUnitEvent.compute_unit_id == cu_id)))
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
        assert first.database_url.endswith(f"/{names[0]}") and second.database_url.endswith(f"/{names[1]}")
        for stack in (first, second):
            assert stack.process("worker").running and stack.process("portal").running
        first_unit = add_running_unit(first.database_url, "first-owner")
        second_unit = add_running_unit(second.database_url, "second-owner")

        first.stop()
        stopped, _ = unit_and_events(first.database_url, first_unit)
        assert (stopped.state, stopped.reason) == ("TERMINATED", "the local stack stopped")
        untouched, events = unit_and_events(second.database_url, second_unit)
        assert untouched.state == "RUNNING" and not any("local stack stopped" in event for event in events)
        assert second.process("worker").running and second.process("portal").running
    finally:
        for stack in (first, second):
            if stack is not None:
                stack.stop()
        for name in names:
            drop_postgres_database(name)
