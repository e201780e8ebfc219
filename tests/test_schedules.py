"""Schedules with a clock the test controls: each due time fires once, however many workers
race for it and however the clock jumps; missed times follow the catch-up policy; a unit that is
not running skips its time with the reason; the pages check every field and keep users apart.
One pass runs on the real clock."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from sqlmodel import Session, select

from app.models import Execution, Schedule
from app.schedules import work
from app.worker import Worker
from tests.factories import (
    T0,
    at,
    csrf,
    equipped,
    make_user,
    runs,
    schedule_row,
    set_execution,
    sign_in_as,
    unit_row,
    update_row,
)


def executions(db_engine, owner) -> list[Execution]:
    with Session(db_engine) as db:
        return list(db.exec(select(Execution).where(Execution.owner_id == owner.id)))


def test_racing_passes_fire_each_due_time_once_and_a_clock_that_jumps_back_fires_nothing(
    app, db_engine, monkeypatch
):
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    schedule = schedule_row(db_engine, owner, workflow, warehouse, cu)
    at(monkeypatch, T0 + timedelta(minutes=10, seconds=30))  # due at 06:05 (late: missed) and 06:10
    errors = []

    def one_pass():
        try:
            with app.app_context():
                work.fire_due()
        except Exception as error:  # pragma: no cover - a failing pass is the test's failure
            errors.append(error)

    racers = [threading.Thread(target=one_pass) for _ in range(6)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert errors == []
    handled = runs(db_engine, schedule)
    assert [(run.due_at, run.outcome) for run in handled] == [
        (T0 + timedelta(minutes=5), "skipped"),
        (T0 + timedelta(minutes=10), "started"),
    ]
    assert "missed while Lakeport was down" in handled[0].reason
    assert [execution.id for execution in executions(db_engine, owner)] == [handled[1].execution_id]
    at(monkeypatch, T0 + timedelta(minutes=2))  # the clock jumps back: those times were handled
    with app.app_context():
        work.fire_due()
    assert len(runs(db_engine, schedule)) == 2 and len(executions(db_engine, owner)) == 1


def test_two_workers_with_their_own_leases_fire_a_due_time_once(app, db_engine, monkeypatch):
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    schedule = schedule_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        cu,
        cron="* * * * *",
        handled_until=T0 + timedelta(minutes=59),
    )
    at(monkeypatch, T0 + timedelta(hours=1, seconds=5))
    app.config["SCHEDULER_SECONDS"] = 0.05
    workers = [Worker(app, worker_id=f"scheduler-test-{n}").start() for n in range(2)]
    try:
        deadline = datetime.now() + timedelta(seconds=10)
        while not runs(db_engine, schedule) and datetime.now() < deadline:
            threading.Event().wait(0.1)
        threading.Event().wait(1.0)  # both workers keep passing meanwhile
    finally:
        for worker in workers:
            worker.stop()
    assert [(run.due_at, run.outcome) for run in runs(db_engine, schedule)] == [
        (T0 + timedelta(hours=1), "started")
    ]
    assert len(executions(db_engine, owner)) == 1


def test_a_pass_on_the_real_clock_fires_the_minute_that_just_passed(app, db_engine):
    """The clock no test replaces (the browser test of named tables fires its schedule through a
    pass whose clock it sets; a worker's passes are the test above): a pass reads the time and
    fires the due time that just passed, once."""
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    passed = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    schedule = schedule_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        cu,
        cron="* * * * *",
        handled_until=passed - timedelta(seconds=1),
    )
    with app.app_context():
        work.fire_due()
        work.fire_due()
    # The next minute may have come meanwhile (skipped: one run at once); this one ran.
    first = runs(db_engine, schedule)[0]
    assert (first.due_at, first.outcome) == (passed, "started")
    assert [execution.id for execution in executions(db_engine, owner)] == [first.execution_id]


@pytest.mark.parametrize(
    "catch_up, outcomes", [("skip", ["skipped"] * 4), ("once", ["skipped"] * 3 + ["started"])]
)
def test_times_missed_while_down_follow_the_catch_up_policy(
    app, db_engine, monkeypatch, catch_up, outcomes
):
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    schedule = schedule_row(
        db_engine, owner, workflow, warehouse, cu, cron="0 * * * *", catch_up=catch_up
    )
    at(monkeypatch, T0 + timedelta(hours=4, minutes=30))  # 07:00 … 10:00 passed while no worker ran
    with app.app_context():
        work.fire_due()
    handled = runs(db_engine, schedule)
    assert [run.outcome for run in handled] == outcomes
    assert len(executions(db_engine, owner)) == outcomes.count("started")


def test_a_unit_that_is_not_running_skips_its_time_with_the_reason(app, db_engine, monkeypatch):
    owner = make_user(db_engine)
    workflow, warehouse, _ = equipped(db_engine, owner)
    stopped = unit_row(db_engine, owner, state="TERMINATED")
    schedule = schedule_row(db_engine, owner, workflow, warehouse, stopped)
    at(monkeypatch, T0 + timedelta(minutes=5, seconds=3))
    with app.app_context():
        work.fire_due()
    (run,) = runs(db_engine, schedule)
    assert (
        run.outcome == "skipped"
        and "terminated, not running" in run.reason
        and run.execution_id is None
    )


def test_a_suspended_owners_schedule_skips_its_time_with_the_reason(app, db_engine, monkeypatch):
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    schedule = schedule_row(db_engine, owner, workflow, warehouse, cu)
    update_row(db_engine, type(owner), owner.id, suspended_at=T0)
    at(monkeypatch, T0 + timedelta(minutes=5, seconds=3))
    with app.app_context():
        work.fire_due()
    (run,) = runs(db_engine, schedule)
    assert (
        run.outcome == "skipped"
        and "sign-in was refused" in run.reason
        and run.execution_id is None
    )
    assert executions(db_engine, owner) == []


def test_a_paused_schedule_fires_nothing_and_resumes_from_now(
    app, client, db_engine, newcomer, monkeypatch
):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    schedule = schedule_row(db_engine, newcomer, workflow, warehouse, cu)
    client.post(f"/schedules/{schedule.id}/pause", data={"csrf_token": csrf(client)})
    at(monkeypatch, T0 + timedelta(minutes=5, seconds=3))
    with app.app_context():
        work.fire_due()
    assert runs(db_engine, schedule) == []
    page = client.get(f"/schedules/workflow/{workflow.id}").get_data(as_text=True)
    assert 'data-testid="schedule-paused"' in page
    client.post(f"/schedules/{schedule.id}/resume", data={"csrf_token": csrf(client)})
    with Session(db_engine) as db:
        assert db.get(Schedule, schedule.id).handled_until > T0 + timedelta(
            minutes=5
        )  # from now on


def test_the_schedules_page_checks_every_field_and_shows_the_next_times(
    client, db_engine, newcomer
):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    stranger = make_user(db_engine)
    _, theirs_warehouse, theirs_cu = equipped(db_engine, stranger)
    good = {
        "cron": "30 6 * * 1-5",
        "timezone": "Europe/Lisbon",
        "compute_unit_id": str(cu.id),
        "warehouse_id": str(warehouse.id),
        "catch_up": "once",
        "csrf_token": csrf(client),
    }
    for field, value in (
        ("cron", "every morning"),
        ("cron", "* * * * * *"),
        ("timezone", "Mars/Olympus"),
        ("compute_unit_id", str(theirs_cu.id)),
        ("warehouse_id", str(theirs_warehouse.id)),
        ("catch_up", "twice"),
    ):
        refused = client.post(f"/schedules/workflow/{workflow.id}", data={**good, field: value})
        page = refused.get_data(as_text=True)
        assert refused.status_code == 422, field
        assert f'id="error-{field}">' in page and 'aria-invalid="true"' in page, field
    made = client.post(f"/schedules/workflow/{workflow.id}", data=good)
    assert made.status_code == 302
    page = client.get(f"/schedules/workflow/{workflow.id}").get_data(as_text=True)
    assert "30 6 * * 1-5" in page and ("06:30 WET" in page or "06:30 WEST" in page)
    other = client.application.test_client()
    sign_in_as(other, stranger)
    with Session(db_engine) as db:
        schedule = db.exec(select(Schedule).where(Schedule.workflow_id == workflow.id)).one()
    assert other.get(f"/schedules/workflow/{workflow.id}").status_code == 404
    assert (
        other.post(f"/schedules/{schedule.id}/delete", data={"csrf_token": csrf(other)}).status_code
        == 404
    )
    assert (
        other.post(
            f"/schedules/workflow/{workflow.id}", data={**good, "csrf_token": csrf(other)}
        ).status_code
        == 404
    )


def test_a_failed_run_is_retried_after_its_backoff_up_to_the_limit(app, db_engine, monkeypatch):
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    schedule = schedule_row(db_engine, owner, workflow, warehouse, cu)
    with Session(db_engine) as db:
        row = db.get(Schedule, schedule.id)
        row.max_retries, row.retry_backoff_seconds = 2, 60
        db.add(row)
        db.commit()
    due = T0 + timedelta(minutes=5)
    at(monkeypatch, due + timedelta(seconds=2))
    with app.app_context():
        work.fire_due()
    failed_at = due + timedelta(seconds=30)
    for attempt, wait in ((0, 60), (1, 120)):
        (run,) = [run for run in runs(db_engine, schedule) if run.attempt == attempt]
        set_execution(
            db_engine, run.execution_id, state="FAILED", ended_at=failed_at, reason="boom"
        )
        at(monkeypatch, failed_at + timedelta(seconds=wait - 5))  # not yet: the backoff doubles
        with app.app_context():
            work.fire_due()
        assert len([run for run in runs(db_engine, schedule) if run.attempt == attempt + 1]) == 0
        at(monkeypatch, failed_at + timedelta(seconds=wait + 1))
        with app.app_context():
            work.fire_due()
            work.fire_due()  # twice: still one retry
        retries = [run for run in runs(db_engine, schedule) if run.attempt == attempt + 1]
        assert [(retry.due_at, retry.outcome) for retry in retries] == [(due, "started")]
        failed_at += timedelta(seconds=wait + 30)
    (last,) = [run for run in runs(db_engine, schedule) if run.attempt == 2]
    set_execution(db_engine, last.execution_id, state="FAILED", ended_at=failed_at)
    at(monkeypatch, failed_at + timedelta(hours=1) - timedelta(minutes=1))
    with app.app_context():
        work.fire_due()
    assert max(run.attempt for run in runs(db_engine, schedule)) == 2  # no third retry
    assert len({run.execution_id for run in runs(db_engine, schedule) if run.execution_id}) >= 3


def test_a_run_over_its_timeout_is_cancelled_and_runs_at_once_are_bounded(
    app, db_engine, monkeypatch
):
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    schedule = schedule_row(db_engine, owner, workflow, warehouse, cu)
    with Session(db_engine) as db:
        row = db.get(Schedule, schedule.id)
        row.timeout_minutes, row.max_running, row.max_retries = 7, 1, 3
        db.add(row)
        db.commit()
    first_due = T0 + timedelta(minutes=5)
    at(monkeypatch, first_due + timedelta(seconds=2))
    with app.app_context():
        work.fire_due()
    (first,) = runs(db_engine, schedule)
    set_execution(db_engine, first.execution_id, created_at=first_due)
    at(
        monkeypatch, T0 + timedelta(minutes=10, seconds=2)
    )  # the next due time, the first still queued
    with app.app_context():
        work.fire_due()
    second = runs(db_engine, schedule)[1]
    assert second.outcome == "skipped" and "still going" in second.reason
    at(monkeypatch, first_due + timedelta(minutes=7, seconds=30))
    with app.app_context():
        work.fire_due()
    with Session(db_engine) as db:
        assert db.get(Execution, first.execution_id).state == "CANCELLED"
    timed_out = runs(db_engine, schedule)[0]
    assert "over its timeout of 7 min" in timed_out.reason
    assert [run.attempt for run in runs(db_engine, schedule) if run.due_at == first_due] == [
        0
    ]  # no retry


def test_the_form_checks_the_options(client, db_engine, newcomer):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    good = {
        "cron": "0 7 * * *",
        "timezone": "UTC",
        "compute_unit_id": str(cu.id),
        "warehouse_id": str(warehouse.id),
        "catch_up": "skip",
        "max_retries": "2",
        "retry_backoff_seconds": "30",
        "timeout_minutes": "60",
        "max_running": "1",
        "csrf_token": csrf(client),
    }
    for field, value in (
        ("max_retries", "6"),
        ("retry_backoff_seconds", "1"),
        ("timeout_minutes", "-1"),
        ("max_running", "0"),
        ("max_running", "many"),
    ):
        refused = client.post(f"/schedules/workflow/{workflow.id}", data={**good, field: value})
        assert refused.status_code == 422 and f'id="error-{field}">' in refused.get_data(
            as_text=True
        ), field
    assert client.post(f"/schedules/workflow/{workflow.id}", data=good).status_code == 302
    with Session(db_engine) as db:
        made = db.exec(select(Schedule).where(Schedule.workflow_id == workflow.id)).one()
    assert (
        made.max_retries,
        made.retry_backoff_seconds,
        made.timeout_minutes,
        made.max_running,
    ) == (2, 30, 60, 1)


FIRE_IN_A_PROCESS = """
import sys, time
from datetime import datetime
from app import create_app
from app.config import Config
from app.schedules import service, work

moment = datetime.fromisoformat(sys.argv[1])
service.now = lambda: moment  # this process's clock, as the test sets it
app = create_app(Config.from_env())
deadline = time.monotonic() + float(sys.argv[2])
with app.app_context():
    while time.monotonic() < deadline:
        work.fire_due()
"""


def test_two_worker_processes_passing_at_once_fire_each_due_time_once(
    app, db_engine, portal_config, monkeypatch
):
    """Two processes (no lease between them: the database alone keeps a due time to one run)."""
    import os
    import subprocess
    import sys

    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    schedule = schedule_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        cu,
        cron="* * * * *",
        handled_until=T0 + timedelta(minutes=57),
    )
    # Due at 06:58 (over two minutes late: missed), 06:59 (on time) and 07:00 (while the 06:59 run
    # still goes: skipped, one run at once).
    moment = T0 + timedelta(hours=1, seconds=20)
    env = {
        **os.environ,
        "LAKEPORT_SECRET_KEY": portal_config.SECRET_KEY,
        "LAKEPORT_DATABASE_URL": portal_config.DATABASE_URL,
        "LAKEPORT_OIDC_ISSUER": portal_config.OIDC_ISSUER,
        "LAKEPORT_OIDC_CLIENT_SECRET": portal_config.OIDC_CLIENT_SECRET,
        "LAKEPORT_LAKEKEEPER_CLIENT_SECRET": portal_config.LAKEKEEPER_CLIENT_SECRET,
        "LAKEPORT_CU_ALLOW_UNLIMITED_UNITS": "true",
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", FIRE_IN_A_PROCESS, moment.isoformat(), "3"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=60)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    handled = runs(db_engine, schedule)
    assert [(run.due_at, run.outcome) for run in handled] == [
        (T0 + timedelta(minutes=58), "skipped"),
        (T0 + timedelta(minutes=59), "started"),
        (T0 + timedelta(hours=1), "skipped"),
    ]
    assert "still going" in handled[2].reason
    assert [execution.id for execution in executions(db_engine, owner)] == [handled[1].execution_id]


def unit_state(db_engine, unit_id: int, state: str) -> None:
    from app.models import ComputeUnit

    with Session(db_engine) as db:
        unit = db.get(ComputeUnit, unit_id)
        unit.state = state
        db.add(unit)
        db.commit()


def test_a_schedule_that_starts_its_unit_runs_on_a_copy_and_stops_it_after(
    app, db_engine, monkeypatch
):
    from app.models import ComputeUnit

    owner = make_user(db_engine)
    workflow, warehouse, _ = equipped(db_engine, owner)
    ended = unit_row(db_engine, owner, state="TERMINATED")
    schedule = schedule_row(db_engine, owner, workflow, warehouse, ended)
    with Session(db_engine) as db:
        row = db.get(Schedule, schedule.id)
        row.start_unit, row.max_retries, row.retry_backoff_seconds = True, 1, 10
        db.add(row)
        db.commit()
    at(monkeypatch, T0 + timedelta(minutes=5, seconds=3))
    with app.app_context():
        work.fire_due()
        work.fire_due()  # a second pass while the unit starts changes nothing
    (run,) = runs(db_engine, schedule)
    assert run.outcome == "waiting" and run.execution_id is None
    with Session(db_engine) as db:
        copy = db.get(ComputeUnit, run.started_unit_id)
        assert (copy.state, copy.name, copy.owner_id) == ("PENDING", ended.name, owner.id)
        assert (
            db.get(Schedule, schedule.id).compute_unit_id == copy.id
        )  # the schedule names the copy now
    unit_state(db_engine, copy.id, "RUNNING")  # as the worker's start would
    with app.app_context():
        work.fire_due()
    (run,) = runs(db_engine, schedule)
    assert run.outcome == "started" and run.execution_id is not None
    set_execution(
        db_engine, run.execution_id, state="FAILED", ended_at=T0
    )  # its retry runs on the same copy
    at(monkeypatch, T0 + timedelta(minutes=7))
    with app.app_context():
        work.fire_due()
    with Session(db_engine) as db:
        assert db.get(ComputeUnit, copy.id).state == "RUNNING"  # not stopped between attempts
    retry = [one for one in runs(db_engine, schedule) if one.attempt == 1][0]
    assert retry.outcome == "started" and retry.started_unit_id == copy.id
    set_execution(db_engine, retry.execution_id, state="COMPLETED", ended_at=T0)
    with app.app_context():
        work.fire_due()
    with Session(db_engine) as db:
        stopped = db.get(ComputeUnit, copy.id)
        assert (
            stopped.state in ("TERMINATING", "TERMINATED")
            and "stopped by its schedule" in stopped.reason
        )
        assert db.get(ComputeUnit, ended.id).state == "TERMINATED"


def test_a_unit_started_for_a_run_that_fails_or_cannot_start_skips_its_time(
    app, db_engine, monkeypatch
):
    owner = make_user(db_engine)
    workflow, warehouse, _ = equipped(db_engine, owner)
    schedule = schedule_row(
        db_engine, owner, workflow, warehouse, unit_row(db_engine, owner, state="FAILED")
    )
    with Session(db_engine) as db:
        row = db.get(Schedule, schedule.id)
        row.start_unit = True
        db.add(row)
        db.commit()
    at(monkeypatch, T0 + timedelta(minutes=5, seconds=3))
    with app.app_context():
        work.fire_due()
    (run,) = runs(db_engine, schedule)
    unit_state(db_engine, run.started_unit_id, "FAILED")  # the copy could not start
    with app.app_context():
        work.fire_due()
    (run,) = runs(db_engine, schedule)
    assert (
        run.outcome == "skipped"
        and "ended before it ran" in run.reason
        and run.execution_id is None
    )
    # The owner already has as many live units as allowed: the next due time says so.
    app.config["CU_MAX_RUNNING_PER_USER"] = 1
    unit_row(db_engine, owner, state="RUNNING")
    at(monkeypatch, T0 + timedelta(minutes=10, seconds=3))
    with app.app_context():
        work.fire_due()
    last = runs(db_engine, schedule)[-1]
    assert (
        last.outcome == "skipped"
        and "could not be started" in last.reason
        and "at most 1" in last.reason
    )


def test_the_schedule_form_keeps_start_unit(client, db_engine, newcomer):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    made = client.post(
        f"/schedules/workflow/{workflow.id}",
        data={
            "cron": "0 7 * * *",
            "timezone": "UTC",
            "compute_unit_id": str(cu.id),
            "warehouse_id": str(warehouse.id),
            "catch_up": "skip",
            "start_unit": "on",
            "csrf_token": csrf(client),
        },
    )
    assert made.status_code == 302
    with Session(db_engine) as db:
        assert (
            db.exec(select(Schedule).where(Schedule.workflow_id == workflow.id)).one().start_unit
            is True
        )
    assert "starts its unit" in client.get(f"/schedules/workflow/{workflow.id}").get_data(
        as_text=True
    )
