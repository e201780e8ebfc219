"""One bound for the text that explains a state (a reason, an error): every compare-and-set
change fits it to its column, cut with a mark, whichever feature wrote it; no feature cuts it
first, without the mark, by a length of its own."""

from __future__ import annotations

import pytest

from app.models import ComputeUnit, Execution, ExecutionState, JobState, SampleDataJob, UnitState
from app.transitions import compare_and_set
from app.workflows.work import _end_sample_data_job
from tests.factories import add, equipped, execution_row, make_user, reload, warehouse_row


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


def test_a_jobs_error_is_cut_by_the_same_bound_with_its_mark(app, db_engine):
    """The worker's end of a sample-data job hands its whole error to the compare-and-set."""
    owner = make_user(db_engine)
    warehouse = warehouse_row(db_engine, owner)
    job = add(
        db_engine, SampleDataJob(owner_id=owner.id, warehouse_id=warehouse.id, scale_factor=0.01)
    )
    limit = SampleDataJob.__table__.c.error.type.length
    with app.app_context():
        _end_sample_data_job(job.id, JobState.FAILED, "z" * limit * 3)
    error = reload(db_engine, SampleDataJob, job.id).error
    assert len(error) <= limit and error.startswith("zzz")
    assert error.endswith("more characters]")
