import json

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from app.models import (
    ComputeUnit,
    ExecutionState,
    UnitState,
    User,
    Warehouse,
    WarehouseStatus,
)
from compute.contract import RunState


def test_user_is_unique_per_issuer_and_subject(db_engine):
    with Session(db_engine) as db:
        db.add(User(issuer="https://idp", subject="alice"))
        db.add(User(issuer="https://other-idp", subject="alice"))
        db.commit()
        db.add(User(issuer="https://idp", subject="alice"))
        with pytest.raises(IntegrityError):
            db.commit()


def test_display_name_falls_back_to_email_then_subject():
    assert User(issuer="i", subject="s", name="Alice", email="a@x").display_name == "Alice"
    assert User(issuer="i", subject="s", email="a@x").display_name == "a@x"
    assert User(issuer="i", subject="s").display_name == "s"


def test_state_enums_are_their_stored_values():
    assert (
        [state.value for state in ExecutionState]
        == list(ExecutionState.ALL)
        == ["QUEUED", "INITIALIZING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]
    )
    assert ExecutionState.FINAL == ("COMPLETED", "FAILED", "CANCELLED")
    assert [state.value for state in UnitState] == [
        "PENDING",
        "STARTING",
        "RUNNING",
        "TERMINATING",
        "TERMINATED",
        "FAILED",
    ]
    assert set(UnitState.FINAL) | set(UnitState.LIVE) == set(UnitState)
    assert (
        list(WarehouseStatus.ALL)
        == [status.value for status in WarehouseStatus]
        == ["active", "inactive", "archived"]
    )
    # The unit's run states are the portal's execution states of the same name.
    assert set(RunState) <= set(ExecutionState) and RunState.FINAL == ExecutionState.FINAL
    assert (f"{WarehouseStatus.ARCHIVED}", json.dumps(ExecutionState.QUEUED)) == (
        "archived",
        '"QUEUED"',
    )


def test_a_state_enum_is_stored_as_its_value(db_engine):
    with Session(db_engine) as db:
        user = User(issuer="https://idp", subject="enum-check")
        db.add(user)
        db.commit()
        db.add(ComputeUnit(owner_id=user.id, name="cu", kind="local", state=UnitState.STARTING))
        db.add(
            Warehouse(
                owner_id=user.id,
                name="w",
                lakekeeper_name="u-enum-w",
                lakekeeper_id="enum-w",
                bucket="b",
                region="r",
                status=WarehouseStatus.ARCHIVED,
            )
        )
        db.commit()
        stored = db.execute(
            text(
                "SELECT c.state, w.status FROM compute_units c JOIN warehouses w "
                "ON w.owner_id = c.owner_id WHERE c.owner_id = :owner"
            ),
            {"owner": user.id},
        ).one()
    assert tuple(stored) == ("STARTING", "archived")
