"""A workflow that keeps a named table, as a data engineer runs one, in a real browser: Alice's
workflow appends each day's orders to `sales.daily` behind a unique-key check, on a schedule.
Two days publish; the third day's input repeats an order id, so its run fails the check and
publishes nothing, and `sales.daily` still holds the first two days' rows only.

The schedule fires every minute (the most often a schedule may); between its runs she pauses it,
uploads the next day's input and resumes it, so each run reads the day it is meant to.

On the local stack the test does not wait for each minute: beside the stack's worker it makes one
scheduler pass of its own, as a second worker would (`app/schedules/work.py` `fire_due`: each due
time fires once, whatever the number of workers), with that pass's clock at the schedule's next
due time. Against a deployment each run comes on the minute. A worker's pass on the real clock is
tested in tests/test_schedules.py."""

import csv
import re
import time
import uuid

import pytest
from playwright.sync_api import expect

from e2e.journeys import (
    register_warehouse,
    start_unit,
    terminate_units,
    upload_csv,
    wait_until_unit_runs,
)

TABLE = "sales.daily"
CHECKS = '[{"kind": "unique", "columns": ["order_id"], "severity": "fail"}]'
# The step reads the day's input, uploaded as a dataset the test replaces between runs.
DAILY_STEP = "SELECT order_id, city, amount FROM datasets.{incoming}"
DAYS = (
    [(1, "Lisbon", 10.5), (2, "Oslo", 20.5), (3, "Quito", 30.5)],
    [(4, "Hanoi", 40.5), (5, "Perth", 50.5), (6, "Lisbon", 60.5)],
    # Order 8 twice: the check counts both rows and samples their key.
    [(7, "Oslo", 70.5), (8, "Quito", 80.5), (8, "Quito", 80.5)],
)
# A due time comes within a minute; the run then starts and ends on a warm unit.
SCHEDULED_RUN_SECONDS = 180


@pytest.fixture
def fire_next_due_time(target, monkeypatch):
    """On the local stack, a scheduler pass whose clock reads the next due time of the workflow's
    schedule (against a deployment, nothing: the minute comes)."""
    if target.stack is None:
        return lambda _workflow_id: False
    from sqlmodel import select

    from app import create_app
    from app.config import Config
    from app.db import get_db
    from app.models import Schedule
    from app.schedules import service, work

    app = create_app(Config.from_env(target.stack.portal_environment()))

    def fire(workflow_id: int) -> bool:
        with app.app_context():
            schedule = (
                get_db().exec(select(Schedule).where(Schedule.workflow_id == workflow_id)).one()
            )
            # The worker's own reckoning (work._fire_schedule): due times after handled_until.
            since = schedule.handled_until or schedule.created_at
            due = service.next_times(schedule, since, count=1)[0]
            monkeypatch.setattr(service, "now", lambda: due)
            work.fire_due()
        return True

    return fire


@pytest.fixture
def units_to_terminate(page, portal):
    names: list[str] = []
    yield names
    terminate_units(page, portal, names)


def write_day(path, rows) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["order_id", "city", "amount"])
        writer.writerows(rows)


def wait_for_scheduled_run(page, schedules_url: str, count: int, fire_next_due_time) -> int:
    """Reload the schedules page until the schedule has started its `count`th execution (the
    page does not refresh itself); returns that execution's id. On the local stack, a due time
    that has not fired yet is fired at once."""
    links = page.get_by_test_id("schedule-runs").locator('tr[data-outcome] a[href*="/executions/"]')
    deadline = time.monotonic() + SCHEDULED_RUN_SECONDS
    page.goto(schedules_url)
    workflow_id = int(schedules_url.rstrip("/").rsplit("/", 1)[1])
    if links.count() < count and fire_next_due_time(workflow_id):
        page.goto(schedules_url)
    while links.count() < count and time.monotonic() < deadline:
        page.wait_for_timeout(3_000)
        page.goto(schedules_url)
    assert links.count() >= count, page.get_by_test_id("schedule-runs").inner_text()
    ids = sorted(int(text.lstrip("#")) for text in links.all_inner_texts())
    return ids[count - 1]


def set_schedule(page, schedules_url: str, action: str) -> None:
    page.goto(schedules_url)
    page.get_by_test_id(f"schedule-{action}").click()
    expect(page.get_by_test_id("schedule-paused")).to_have_count(1 if action == "pause" else 0)


def watch_run(page, portal: str, execution_id: int) -> str:
    """Open the run's page and wait until it ends; returns its final state."""
    page.goto(f"{portal}/executions/{execution_id}")
    state = page.get_by_test_id("execution-state")
    expect(state).to_have_text(re.compile("COMPLETED|FAILED|CANCELLED"), timeout=240_000)
    return state.inner_text()


def test_a_scheduled_workflow_appends_to_a_named_table_until_a_unique_check_stops_a_day(
    page,
    sign_in,
    portal,
    fill_warehouse_form,
    units_to_terminate,
    tmp_path,
    check_page,
    write_code,
    target,
    fire_next_due_time,
):
    suffix = uuid.uuid4().hex[:8]
    warehouse, unit, workflow = (
        target.name("sales"),
        target.name("nightly"),
        target.name("daily sales"),
    )
    incoming = f"incoming_{suffix}"
    days = []
    for number, rows in enumerate(DAYS, start=1):
        days.append(tmp_path / f"day{number}.csv")
        write_day(days[-1], rows)

    sign_in("alice")
    register_warehouse(page, fill_warehouse_form, warehouse)
    units_to_terminate.append(unit)
    unit_url = start_unit(page, unit)

    # The workflow: one SQL step appending the day's orders to sales.daily, gated by a unique
    # key on order_id.
    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_test_id("new-workflow").click()
    page.get_by_label("Name").fill(workflow)
    page.get_by_test_id("create-workflow").click()
    step = page.get_by_test_id("step-editor").nth(0)
    step.get_by_label("Name").fill("daily")
    write_code(step, DAILY_STEP.format(incoming=incoming))
    step.get_by_label("Publish to table").fill(TABLE)
    step.get_by_label("Publish mode").select_option("append")
    step.get_by_test_id("publish-checks").locator("summary").click()
    step.get_by_label("Checks").fill(CHECKS)
    check_page("editor-publish")
    page.get_by_test_id("save-workflow").click()
    expect(page.get_by_text(f"Saved {workflow} as version 1.")).to_be_visible()
    workflow_url = page.url

    # The first day's input, then the schedule: every minute, on her unit, into her warehouse.
    upload_csv(page, warehouse, incoming, days[0], rows=3)
    wait_until_unit_runs(page, unit_url)
    page.goto(workflow_url)
    page.get_by_test_id("workflow-schedules").click()
    schedules_url = page.url
    form = page.get_by_test_id("schedule-form")
    form.get_by_label("Cron expression").fill("* * * * *")
    form.get_by_label("Time zone").fill("UTC")
    form.get_by_label("Compute unit").select_option(
        form.locator('select[name="compute_unit_id"] option', has_text=unit).get_attribute("value")
    )
    form.get_by_label("Warehouse").select_option(label=warehouse)
    form.get_by_label("Missed times").select_option("skip")
    page.get_by_test_id("create-schedule").click()
    expect(page.get_by_test_id("schedule")).to_have_count(1)
    expect(page.get_by_test_id("next-runs")).to_be_visible()
    check_page("schedules")

    published_snapshots = []
    for day in (1, 2):
        run_id = wait_for_scheduled_run(page, schedules_url, day, fire_next_due_time)
        # Paused while she swaps the input, so no run reads a day twice or half a day.
        set_schedule(page, schedules_url, "pause")
        assert watch_run(page, portal, run_id) == "COMPLETED", page.get_by_test_id(
            "execution-live"
        ).inner_text()
        published = page.get_by_test_id("execution-published").locator(f'tr[data-table="{TABLE}"]')
        expect(published).to_contain_text("append")
        expect(published.locator("td").nth(4)).to_have_text("3")
        published_snapshots.append(
            (run_id, published.get_by_test_id("published-snapshot").inner_text())
        )
        check = page.get_by_test_id("check-result").filter(has_text="unique(order_id)")
        expect(check).to_have_attribute("data-passed", "true")
        expect(check.get_by_test_id("check-offending")).to_have_text(re.compile(r"^\s*0\b"))
        if day == 1:
            check_page("execution-published")
        upload_csv(page, warehouse, incoming, days[day], rows=3)
        set_schedule(page, schedules_url, "resume")

    # The third day repeats order 8: its run fails the check and publishes nothing.
    failed_id = wait_for_scheduled_run(page, schedules_url, 3, fire_next_due_time)
    page.get_by_test_id("schedule-delete").click()
    expect(page.get_by_test_id("schedule")).to_have_count(0)
    assert watch_run(page, portal, failed_id) == "FAILED"
    failure = page.get_by_test_id("failure-box")
    expect(failure).to_contain_text(
        f"check unique(order_id) on {TABLE} (step 'daily') failed: 2 offending rows"
    )
    expect(failure).to_contain_text("nothing was published")
    expect(page.get_by_test_id("execution-published")).to_have_count(0)
    check = page.get_by_test_id("check-result").filter(has_text="unique(order_id)")
    expect(check).to_have_attribute("data-passed", "false")
    expect(check).to_contain_text("failed")
    offending = check.get_by_test_id("check-offending")
    expect(offending).to_contain_text("2")
    expect(offending).to_contain_text("2 rows share a key with another row")
    # The sample rows, one click away.
    sample = check.get_by_test_id("check-sample")
    expect(sample.locator("li")).to_be_hidden()
    sample.locator("summary").click()
    expect(sample.locator("li")).to_have_text(["order_id=8, rows=2"])
    check_page("execution-check-failed")

    # sales.daily, read on its own page from the catalog: the first two days' rows, each
    # published by its run, and nothing of the third.
    page.goto(f"{portal}/executions/{published_snapshots[0][0]}")
    page.get_by_test_id("execution-published").get_by_role("link", name=TABLE).click()
    expect(page.get_by_test_id("table-title")).to_have_text(TABLE)
    expect(page.get_by_test_id("table-size").locator("article").first).to_contain_text("6")
    publishes = page.get_by_test_id("table-publishes")
    for run_id, snapshot_id in published_snapshots:
        row = publishes.locator("tbody tr", has_text=snapshot_id)
        expect(row).to_contain_text(f"execution #{run_id}")
        expect(row.locator("td").nth(4)).to_have_text("3")
    expect(publishes).not_to_contain_text(f"execution #{failed_id}")
    rows = page.get_by_test_id("result-table").locator("tbody tr td:first-child")
    expect(rows).to_have_count(6)
    assert sorted(int(text) for text in rows.all_inner_texts()) == [1, 2, 3, 4, 5, 6]
    check_page("table-published")
