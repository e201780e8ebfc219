"""What a unit reports is an attacker's text: a reason with a NUL byte or escape sequences,
output tables that point elsewhere, and replies of any size. Each ends its execution with a
final state on PostgreSQL, stores only what was checked and bounded, and marks what was cut."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.exc import DataError

from app.compute_units import door
from app.executions import service as execution_service
from app.executions import unit_reports
from app.executions import work as execution_work
from app.models import Execution
from tests.factories import equipped, execution_row, make_user, reload


class StubDoor:
    """A unit's door that reaches no unit: its host was seen ready as `ready_app` (None: it would
    have to be started, and `make_ready` notes the unit in `started`)."""

    def __init__(self, cu, ready_app: str | None, started: list | None = None) -> None:
        self.cu, self._ready_app, self._started = cu, ready_app, started

    def ready_app(self) -> str | None:
        return self._ready_app

    def make_ready(self, progress=None) -> None:
        if self._started is not None:
            self._started.append(self.cu.id)

    def close(self) -> None:
        pass


@pytest.fixture
def running(app, db_engine) -> int:
    """A RUNNING execution of a new user's, on PostgreSQL."""
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    return execution_row(
        db_engine, owner, workflow, warehouse, cu, state="RUNNING", run_id="run-1"
    ).id


def no_limit_hit() -> None:
    return None


def test_a_reason_with_a_nul_byte_ends_its_execution(app, db_engine, running):
    with app.app_context():
        execution_work._record_end(
            running,
            {"state": "FAILED", "error": "boom\x00\x1b[2J; 9\u202ecolor"},
            "{}",
            no_limit_hit,
            {},
        )
    execution = reload(db_engine, Execution, running)
    assert execution.state == "FAILED" and execution.reason == "boom[2J; 9color"


def test_a_failure_raised_with_a_nul_byte_ends_its_execution(app, db_engine, running, monkeypatch):
    def fails(execution_id):
        raise execution_work.ExecutionFailed("the unit said \x00" + "x" * 10_000)

    monkeypatch.setattr(execution_work, "_watch", fails)
    with app.app_context():
        execution_work.drive(running)
    execution = reload(db_engine, Execution, running)
    assert execution.state == "FAILED" and execution.reason.startswith("the unit said x")
    assert len(execution.reason) <= Execution.__table__.c.reason.type.length
    assert execution.reason.endswith("more characters]")


def test_a_reason_the_database_refuses_still_ends_its_execution(
    app, db_engine, running, monkeypatch
):
    finish = execution_service.finish

    def refuses_the_first_reason(execution_id, state, **changes):
        if changes.get("reason", "").startswith("weird"):
            raise DataError("INSERT", {}, Exception("invalid byte sequence"))
        return finish(execution_id, state, **changes)

    monkeypatch.setattr(execution_service, "finish", refuses_the_first_reason)
    with app.app_context():
        execution_work._finish_failed(running, "weird reason")
    execution = reload(db_engine, Execution, running)
    assert (execution.state, execution.reason) == (
        "FAILED",
        "the run failed, and its reason could not be stored",
    )


def test_a_reported_result_keeps_only_this_executions_tables_and_numbers(app, db_engine, running):
    result = {
        "outputs": {
            "doubled": f"results.e{running}_doubled",
            "stolen": "results.e1_secret",
            "../x": f"results.e{running}_../x",
            "other": "bobs_ns.table",
        },
        "rows": {"doubled": 12, "stolen": "many"},
        "phases_s": {"bind": 0.1, "evil": "\x00"},
        "runtime_stats": "runtime_stats.e1",
        "console_logs": f"console_logs.e{running}",
        "lineage": {"read": [{"table": "t" * 10_000}] * 5_000, "wrote": []},
        "extra": "x" * 10**6,
    }
    with app.app_context():
        execution_work._record_end(
            running, {"state": "COMPLETED", "result": result}, "{}", no_limit_hit, {}
        )
    execution = reload(db_engine, Execution, running)
    assert execution.state == "COMPLETED"
    assert json.loads(execution.outputs) == {
        "outputs": {"doubled": f"results.e{running}_doubled"},
        "rows": {"doubled": 12},
        "phases_s": {"bind": 0.1},
        "console_logs": f"console_logs.e{running}",
    }
    lineage = json.loads(execution.lineage)
    assert len(lineage["read"]) == unit_reports.LINEAGE_LIMITS.items + 1
    assert lineage["read"][-1] == "… [cut: 4000 more items]"
    assert len(lineage["read"][0]["table"]) <= unit_reports.LINEAGE_LIMITS.string
    assert len(execution.lineage) < 1_000_000


def test_reported_progress_is_bounded_and_says_what_was_cut():
    reported = {
        "steps": [{"name": "s", "state": "running\x1b[0m"}],
        "logs": [{"level": "INFO", "message": "m" * 100_000}] * 2_000,
    }
    progress = json.loads(unit_reports.merged_progress({}, reported))
    assert progress["steps"] == [{"name": "s", "state": "running[0m"}]
    assert len(progress["logs"]) == unit_reports.PROGRESS_LIMITS.items + 1
    assert progress["logs"][-1] == "… [cut: 1500 more items]"
    assert progress["logs"][0]["message"].endswith("more characters]")
    assert json.loads(unit_reports.merged_progress({"steps": [1]}, "not a dict")) == {
        "steps": [1],
        "logs": [],
    }


@pytest.mark.parametrize("unit_running", [True, False])
def test_a_warehouse_that_cannot_take_the_run_fails_it_before_its_unit_is_asked_or_started(
    app, db_engine, monkeypatch, unit_running
):
    """The warehouse's check runs beside the token's minting, yet its verdict comes first: no
    Spark host is started for a run that cannot go, and a stopped unit does not hide why."""
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    queued = execution_row(db_engine, owner, workflow, warehouse, cu, state="QUEUED").id
    started_hosts = []

    def check_warehouse(execution, warehouse):
        raise execution_work.ExecutionFailed(
            f"the warehouse {execution.warehouse_name} was archived: it takes no new executions"
        )

    def running(cls, cu_id):
        if not unit_running:
            raise door.UnitUnavailable("the compute unit stopped: terminated")
        # Its host would have to be started.
        return StubDoor(reload(db_engine, type(cu), cu_id), ready_app=None, started=started_hosts)

    monkeypatch.setattr(execution_work, "_check_warehouse", check_warehouse)
    monkeypatch.setattr(door, "run_token", lambda warehouse, user: "token")
    monkeypatch.setattr(door.UnitDoor, "running", classmethod(running))
    with app.app_context():
        execution_work.drive(queued)
    execution = reload(db_engine, Execution, queued)
    assert execution.state == "FAILED"
    assert execution.reason.endswith("was archived: it takes no new executions")
    assert started_hosts == []


def test_the_runs_token_is_minted_while_the_rest_is_prepared_and_a_refusal_fails_the_run(
    app, db_engine, monkeypatch
):
    """Minting the run's catalog token is the preparation's longest wait: it starts as the
    worker takes the execution, beside the warehouse's check, and a refused token fails the run
    with the identity provider's reason."""
    import threading

    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    queued = execution_row(db_engine, owner, workflow, warehouse, cu, state="QUEUED").id
    minting = threading.Event()

    def refused_token(warehouse, user):
        minting.set()
        raise door.NoCatalogToken(
            "no catalog token for the run: the identity provider refused the exchange"
        )

    def check_warehouse(execution, warehouse):
        assert minting.wait(10), "the token was not being minted while the warehouse was checked"

    monkeypatch.setattr(door, "run_token", refused_token)
    monkeypatch.setattr(execution_work, "_check_warehouse", check_warehouse)
    monkeypatch.setattr(
        door.UnitDoor,
        "running",
        classmethod(lambda cls, cu_id: StubDoor(reload(db_engine, type(cu), cu_id), "app-1")),
    )
    with app.app_context():
        execution_work.drive(queued)
    execution = reload(db_engine, Execution, queued)
    assert (execution.state, execution.reason) == (
        "FAILED",
        "no catalog token for the run: the identity provider refused the exchange",
    )


def test_a_token_minted_while_the_units_spark_host_started_is_minted_again_for_the_run(
    app, db_engine, monkeypatch
):
    """The run gets its token's whole lifetime: one minted before a long wait for the unit's
    Spark host is replaced by a fresh one."""
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    queued = execution_row(db_engine, owner, workflow, warehouse, cu, state="INITIALIZING").id
    minted = []
    monkeypatch.setattr(
        door, "run_token", lambda warehouse, user: minted.append(user.id) or f"token-{len(minted)}"
    )
    monkeypatch.setattr(execution_work, "_check_warehouse", lambda execution, warehouse: None)
    monkeypatch.setattr(
        door.UnitDoor,
        "running",
        classmethod(lambda cls, cu_id: StubDoor(reload(db_engine, type(cu), cu_id), None)),
    )
    monkeypatch.setattr(
        execution_work, "FRESH_TOKEN_SECONDS", -1.0
    )  # every wait counts as a long one
    with app.app_context():
        spec, _, _ = execution_work._prepare(
            queued, execution_work._Groundwork.start(execution_service.load(queued))
        )
    assert minted == [owner.id, owner.id]
    assert spec.catalog.token == "token-2"
