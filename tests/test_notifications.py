"""Notifications of a run's end, asked by a schedule or for one execution: a webhook delivered to a real local HTTP server with a
signature (over its timestamp and body) it can check, a failing receiver retried and a hanging
one never holding the scheduler up, an email through a real local SMTP server (aiosmtpd), and a
webhook URL the webhook policy refuses. The receivers listen on loopback, which webhooks reach
only as a host the operator lists: each test's portal lists 127.0.0.1."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from app.executions import delivery
from app.models import JobState, Notification
from app.schedules import work as schedules_work
from app.worker import Worker
from devstack.process import free_port
from tests.factories import (
    T0,
    at,
    csrf,
    deliver_all,
    equipped,
    notes,
    run_ends,
    runs,
    scheduled,
    set_execution,
)
from tests.stand_ins import Receiver, signed_as_documented


@pytest.fixture(autouse=True)
def loopback_receivers_listed(app):
    app.config["WEBHOOK_ALLOWED_HOSTS"] = "127.0.0.1"


def test_a_webhook_is_delivered_with_a_signature_the_receiver_can_check(
    app,
    client,
    db_engine,
    newcomer,
    monkeypatch,
):
    receiver = Receiver()
    try:
        schedule, secret = scheduled(client, db_engine, newcomer, webhook_url=receiver.url)
        assert secret and secret not in client.get(
            f"/schedules/workflow/{schedule.workflow_id}"
        ).get_data(as_text=True)
        run_ends(app, db_engine, monkeypatch, schedule, "FAILED")
        deliver_all(app, schedule)
        deliver_all(app, schedule)  # delivered once
    finally:
        receiver.close()
    ((headers, body),) = receiver.calls
    assert signed_as_documented(secret, headers, body)
    # The body alone, without the timestamp, is not what is signed: a replay cannot pass an old
    # signature off with a new timestamp.
    assert (
        headers["X-Lakeport-Signature"]
        != "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    )
    sent = json.loads(body)
    assert (sent["state"], sent["reason"], sent["schedule_id"]) == ("FAILED", "boom", schedule.id)
    assert [note.state for note in notes(db_engine, schedule)] == [JobState.DONE]


def test_a_failing_receiver_is_retried_with_backoff_then_given_up(
    app,
    client,
    db_engine,
    newcomer,
    monkeypatch,
):
    receiver = Receiver(status=500)
    try:
        schedule, _ = scheduled(
            client, db_engine, newcomer, webhook_url=receiver.url, notify_on="failure"
        )
        run_ends(app, db_engine, monkeypatch, schedule, "FAILED")
        for attempt in range(1, delivery.MAX_ATTEMPTS + 1):
            deliver_all(app, schedule)
            (note,) = notes(db_engine, schedule)
            assert note.attempts == attempt and "answered 500" in note.last_error
            with Session(db_engine) as db:  # its backoff passes
                row = db.get(Notification, note.id)
                row.next_attempt_at = row.next_attempt_at - timedelta(hours=1)
                db.add(row)
                db.commit()
        deliver_all(app, schedule)
    finally:
        receiver.close()
    assert len(receiver.calls) == delivery.MAX_ATTEMPTS
    assert notes(db_engine, schedule)[0].state == JobState.FAILED


def test_a_hanging_receiver_never_holds_the_scheduler_up(
    app, client, db_engine, newcomer, monkeypatch
):
    receiver = Receiver(hang=True)
    app.config["SCHEDULER_SECONDS"] = 0.1
    worker = None
    try:
        schedule, _ = scheduled(client, db_engine, newcomer, webhook_url=receiver.url)
        run_ends(app, db_engine, monkeypatch, schedule, "COMPLETED")
        worker = Worker(app, worker_id="notify-test").start()
        deadline = time.monotonic() + 10
        while not receiver.calls and time.monotonic() < deadline:
            time.sleep(0.05)
        assert receiver.calls  # the delivery is under way, and hangs
        at(monkeypatch, T0 + timedelta(minutes=10, seconds=2))  # the next due time
        while len(runs(db_engine, schedule)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [run.outcome for run in runs(db_engine, schedule)][-1] in ("started", "skipped")
        assert len(runs(db_engine, schedule)) == 2 and time.monotonic() < deadline
    finally:
        if worker is not None:
            worker.stop(timeout=2)
        receiver.close()


def test_an_email_goes_through_a_real_smtp_server(app, client, db_engine, newcomer, monkeypatch):
    from aiosmtpd.controller import Controller

    received = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802
            received.append((envelope.rcpt_tos, envelope.content.decode()))
            return "250 OK"

    port = free_port()
    smtp = Controller(Handler(), hostname="127.0.0.1", port=port)
    smtp.start()
    try:
        app.config.update(SMTP_HOST="127.0.0.1", SMTP_PORT=port, SMTP_FROM="lakeport@example.test")
        schedule, secret = scheduled(
            client, db_engine, newcomer, notify_email="data-team@example.test"
        )
        assert secret is None  # no webhook, no secret
        run_ends(app, db_engine, monkeypatch, schedule, "COMPLETED")
        deliver_all(app, schedule)
    finally:
        smtp.stop()
    assert len(received) == 1, [(r, c[:300]) for r, c in received]
    ((recipients, content),) = received
    assert (
        recipients == ["data-team@example.test"]
        and "COMPLETED" in content
        and "Subject: Lakeport:" in content
    )


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("webhook_url", "http://169.254.169.254/latest", "is not allowed by this portal"),
        ("webhook_url", "ftp://example.test/hook", "http://"),
        ("notify_email", "not-an-address", "One email address"),
    ],
)
def test_a_notification_address_is_checked(client, db_engine, newcomer, field, value, message):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    page = client.post(
        f"/schedules/workflow/{workflow.id}",
        data={
            "cron": "0 7 * * *",
            "timezone": "UTC",
            "compute_unit_id": str(cu.id),
            "warehouse_id": str(warehouse.id),
            "catch_up": "skip",
            "notify_on": "both",
            field: value,
            "csrf_token": csrf(client),
        },
    )
    assert page.status_code == 422 and message in page.get_data(as_text=True)
    assert f'id="error-{field}"' in page.get_data(as_text=True)


def ended_executions_queue(app, db_engine, execution_id: int, state: str) -> None:
    from app.models import utcnow

    set_execution(
        db_engine,
        execution_id,
        state=state,
        reason="boom" if state == "FAILED" else "",
        ended_at=utcnow(),
    )
    with app.app_context():
        schedules_work.fire_due()  # the scheduler pass also queues what single executions asked for


def test_one_execution_started_from_the_run_page_tells_its_webhook_signed(
    app,
    client,
    db_engine,
    newcomer,
    monkeypatch,
):
    from app.models import Execution

    workflow, warehouse, cu = equipped(db_engine, newcomer)
    receiver = Receiver()
    try:
        page = client.post(
            f"/executions/new?workflow_id={workflow.id}",
            data={
                "compute_unit_id": str(cu.id),
                "warehouse_id": str(warehouse.id),
                "notify_on": "failure",
                "webhook_url": receiver.url,
                "csrf_token": csrf(client),
            },
        )
        assert page.status_code == 200, page.get_data(as_text=True)[:2000]
        secret = re.search(
            r'data-testid="webhook-secret-text">([0-9a-f]+)<', page.get_data(as_text=True)
        ).group(1)
        with Session(db_engine) as db:
            execution = db.exec(select(Execution).where(Execution.workflow_id == workflow.id)).one()
        assert secret not in client.get(f"/executions/{execution.id}").get_data(
            as_text=True
        )  # shown once
        assert secret not in json.dumps(execution.model_dump(mode="json"))  # derived, never stored
        at(monkeypatch, T0)
        ended_executions_queue(app, db_engine, execution.id, "FAILED")
        deliver_all(app, execution.id)
        ended_executions_queue(app, db_engine, execution.id, "FAILED")  # queued once
        deliver_all(app, execution.id)
    finally:
        receiver.close()
    ((headers, body),) = receiver.calls
    assert signed_as_documented(secret, headers, body)
    sent = json.loads(body)
    assert (sent["execution_id"], sent["state"], sent["reason"], sent["schedule_id"]) == (
        execution.id,
        "FAILED",
        "boom",
        None,
    )


def test_an_execution_that_asks_only_for_failures_is_not_told_of_success(
    app,
    client,
    db_engine,
    newcomer,
    monkeypatch,
):
    from app.models import Execution

    workflow, warehouse, cu = equipped(db_engine, newcomer)
    client.post(
        f"/executions/new?workflow_id={workflow.id}",
        data={
            "compute_unit_id": str(cu.id),
            "warehouse_id": str(warehouse.id),
            "notify_on": "failure",
            "notify_email": "me@example.test",
            "csrf_token": csrf(client),
        },
    )
    with Session(db_engine) as db:
        execution = db.exec(select(Execution).where(Execution.workflow_id == workflow.id)).one()
    assert execution.notify_email == "me@example.test"
    at(monkeypatch, T0)
    ended_executions_queue(app, db_engine, execution.id, "COMPLETED")
    with Session(db_engine) as db:
        assert (
            db.exec(select(Notification).where(Notification.execution_id == execution.id)).all()
            == []
        )


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("webhook_url", "http://169.254.169.254/latest", "is not allowed by this portal"),
        ("notify_email", "not-an-address", "One email address"),
    ],
)
def test_the_run_page_checks_the_notification_address(
    client, db_engine, newcomer, field, value, message
):
    from app.models import Execution

    workflow, warehouse, cu = equipped(db_engine, newcomer)
    page = client.post(
        f"/executions/new?workflow_id={workflow.id}",
        data={
            "compute_unit_id": str(cu.id),
            "warehouse_id": str(warehouse.id),
            "notify_on": "both",
            field: value,
            "csrf_token": csrf(client),
        },
    )
    assert page.status_code == 422 and message in page.get_data(as_text=True)
    with Session(db_engine) as db:
        assert db.exec(select(Execution).where(Execution.workflow_id == workflow.id)).all() == []


def test_the_api_starts_an_execution_that_tells_a_webhook(app, client, db_engine, monkeypatch):
    from tests.factories import Api, make_user, token_for

    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    api = Api(client, token_for(app, owner))
    body = {"workflow_id": workflow.id, "compute_unit_id": cu.id, "warehouse_id": warehouse.id}
    refused = api.call(
        "POST", "/api/v1/executions", {**body, "notify": {"on": "both", "email": "nope"}}
    )
    assert refused.status_code == 400 and refused.get_json()["field"] == "notify.email"
    metadata = api.call(
        "POST",
        "/api/v1/executions",
        {**body, "notify": {"on": "both", "webhook_url": "http://169.254.169.254/x"}},
    )
    assert metadata.status_code == 400 and metadata.get_json()["field"] == "notify.webhook_url"
    receiver = Receiver()
    try:
        started = api.call(
            "POST",
            "/api/v1/executions",
            {**body, "notify": {"on": "success", "webhook_url": receiver.url}},
        )
        assert started.status_code == 201, started.get_json()
        secret, execution_id = started.get_json()["webhook_secret"], started.get_json()["id"]
        assert secret and started.get_json()["notify_on"] == "success"
        assert (
            api.call("GET", f"/api/v1/executions/{execution_id}").get_json()["webhook_secret"]
            is None
        )
        at(monkeypatch, T0)
        ended_executions_queue(app, db_engine, execution_id, "COMPLETED")
        deliver_all(app, execution_id)
    finally:
        receiver.close()
    ((headers, body_sent),) = receiver.calls
    assert signed_as_documented(secret, headers, body_sent)
