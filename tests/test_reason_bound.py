"""One bound for the text that explains a state (a reason, an error): every compare-and-set
change fits it to its column, cut with a mark, whichever feature wrote it."""

from __future__ import annotations

import pytest

from app.models import ComputeUnit, Execution, ExecutionState, UnitState
from app.transitions import compare_and_set
from tests.factories import equipped, execution_row, make_user, reload


@pytest.mark.parametrize("model", [Execution, ComputeUnit])
def test_a_reason_longer_than_its_column_is_cut_to_it_with_a_mark(app, db_engine, model):
    owner = make_user(db_engine)
    workflow, warehouse, unit = equipped(db_engine, owner)
    row = (
        unit if model is ComputeUnit else execution_row(db_engine, owner, workflow, warehouse, unit)
    )
    limit = model.__table__.c.reason.type.length
    failed = ExecutionState.FAILED if model is Execution else UnitState.FAILED
    with app.app_context():
        assert compare_and_set(model, row.id, [row.state], state=failed, reason="y\x00" * limit * 2)
    reason = reload(db_engine, model, row.id).reason
    assert len(reason) <= limit and reason.startswith("yyy")
    assert reason.endswith("more characters]")
