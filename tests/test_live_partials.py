"""Live partials: a poll that finds the execution or the unit as the browser's copy shows it
answers 304 with no body; any change answers the new partial with a new ETag; the next poll
comes after 1 s while the run changes and after 3 s once it is quiet; a 304 never answers for
another user's row."""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta

from app import live_partials
from app.models import ComputeUnit, Execution, utcnow
from tests.factories import equipped, execution_row, make_user, sign_in_as
from tests.factories import update_row as update

HTMX = {"HX-Request": "true"}


def next_poll(body: bytes) -> int:
    return int(re.search(rb'hx-trigger="load delay:(\d+)s"', body).group(1))


def progress(*log_moments: float) -> str:
    return json.dumps(
        {
            "steps": [{"name": "one", "state": "running", "started_at": None, "ended_at": None}],
            "logs": [
                {"ts": moment, "level": "INFO", "step": "one", "message": f"at {moment}"}
                for moment in log_moments
            ],
        }
    )


def test_poll_delay_is_fast_while_the_run_changes_and_slower_once_quiet():
    now = 1_000_000.0
    assert live_partials.poll_delay(None, now) == live_partials.FAST_POLL_S == 1
    assert live_partials.poll_delay(now - 14, now) == 1
    assert live_partials.poll_delay(now - 16, now) == live_partials.QUIET_POLL_S == 3


def test_an_unchanged_running_execution_answers_304_and_a_change_answers_the_new_partial(
    client, db_engine, newcomer
):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    execution = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="RUNNING",
        run_id="run-live",
        started_at=utcnow(),
        progress=progress(time.time()),
    )
    for path in (f"/executions/{execution.id}", f"/executions/{execution.id}/logs?tail=1"):
        first = client.get(path, headers=HTMX)
        assert first.status_code == 200 and b"at " in first.data
        etag = first.headers["ETag"]
        assert first.headers["Cache-Control"] == "private, no-cache"
        assert "HX-Request" in first.headers["Vary"]
        assert next_poll(first.data) == 1  # it logged a moment ago

        again = client.get(path, headers={**HTMX, "If-None-Match": etag})
        assert again.status_code == 304 and again.data == b"" and again.headers["ETag"] == etag

        # Without HX-Request the same URL is the full page, never a 304 for the partial's copy.
        page = client.get(path, headers={"If-None-Match": etag})
        assert page.status_code == 200 and b"<html" in page.data

    # A new log line (from long ago: the run has been quiet since) is a new version, polled slower.
    long_ago = time.time() - 60
    update(
        db_engine,
        Execution,
        execution.id,
        progress=progress(long_ago - 1, long_ago),
        started_at=utcnow() - timedelta(minutes=2),
    )
    changed = client.get(f"/executions/{execution.id}", headers={**HTMX, "If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    assert next_poll(changed.data) == 3
    assert b"data-running-since=" in changed.data  # its duration ticks in the browser

    # Its end is a change too; a final partial polls no more and carries no ETag.
    update(
        db_engine,
        Execution,
        execution.id,
        state="FAILED",
        reason="step 'one' failed: boom",
        ended_at=utcnow(),
    )
    ended = client.get(
        f"/executions/{execution.id}", headers={**HTMX, "If-None-Match": changed.headers["ETag"]}
    )
    assert ended.status_code == 200 and b"boom" in ended.data and "ETag" not in ended.headers
    assert b'hx-trigger="load delay' not in ended.data


def test_another_users_execution_and_unit_answer_404_whatever_etag_is_sent(
    client, db_engine, newcomer
):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    execution = execution_row(
        db_engine,
        newcomer,
        workflow,
        warehouse,
        cu,
        state="RUNNING",
        run_id="run-other",
        started_at=utcnow(),
        progress=progress(time.time()),
    )
    paths = (
        f"/executions/{execution.id}",
        f"/executions/{execution.id}/logs?tail=1",
        f"/compute-units/{cu.id}/row",
    )
    etags = {path: client.get(path, headers=HTMX).headers["ETag"] for path in paths}
    sign_in_as(client, make_user(db_engine))
    for path, etag in etags.items():
        assert client.get(path, headers={**HTMX, "If-None-Match": etag}).status_code == 404, path


def test_an_unchanged_unit_row_answers_304_and_polls_at_the_supervisors_pace(
    client, db_engine, newcomer
):
    _, _, cu = equipped(db_engine, newcomer)
    path = f"/compute-units/{cu.id}/row"
    first = client.get(path, headers=HTMX)
    assert first.status_code == 200 and next_poll(first.data) == 10  # RUNNING
    assert (
        client.get(path, headers={**HTMX, "If-None-Match": first.headers["ETag"]}).status_code
        == 304
    )

    update(
        db_engine, ComputeUnit, cu.id, state="TERMINATING", progress_step="stopping its Ray head"
    )
    stopping = client.get(path, headers={**HTMX, "If-None-Match": first.headers["ETag"]})
    assert stopping.status_code == 200 and b"stopping its Ray head" in stopping.data
    assert next_poll(stopping.data) == 1


def test_the_workers_check_of_a_unit_is_no_change_to_its_row(client, db_engine, newcomer):
    _, _, cu = equipped(db_engine, newcomer)
    path = f"/compute-units/{cu.id}/row"
    etag = client.get(path, headers=HTMX).headers["ETag"]
    update(
        db_engine,
        ComputeUnit,
        cu.id,
        cluster_status='{"nodes": 1}',
        cluster_checked_at=utcnow(),
        last_activity_at=utcnow(),
    )
    assert client.get(path, headers={**HTMX, "If-None-Match": etag}).status_code == 304
