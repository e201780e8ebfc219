"""Webhooks' own network policy (app/network_policy.py `WebhookPolicy`), attacked as a user would on
the local stack, where the loopback switch is on for the stack's storage: the portal itself, the
catalog, S3, [::1], 2130706433, 0x7f000001, 127.1 and user@127.0.0.1 are refused when a schedule
or a run is saved, and a URL saved before (a row written directly) is refused again at delivery
without a connection. The operator's allow-list opens a host as written and nothing else; the
delivery goes to the address checked; a slow receiver is cut off at the deadline. And the email
field: one plain address, read as smtplib reads recipients."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import pytest
from sqlmodel import Session

from app.executions import delivery, notifications
from app.models import JobState, Schedule
from app.network_policy import (
    HostNotAllowed,
    OutboundRefused,
    WebhookPolicy,
    parse_webhook_url,
    total_deadline,
)
from devstack.process import free_port
from tests.factories import csrf, deliver_all, equipped, notes, run_ends, scheduled
from tests.services import IN_PROCESS_PORTAL_URL
from tests.stand_ins import Receiver, SlowDrip, signed_as_documented, stub_resolver


def retire(db_engine, schedule) -> None:
    """Pause a test's schedule and settle its notifications: the scheduler passes and deliveries
    of later tests act on every row in the database."""
    from sqlmodel import select

    from app.models import Notification

    with Session(db_engine) as db:
        row = db.get(Schedule, schedule.id)
        row.paused = True
        db.add(row)
        for note in db.exec(select(Notification).where(Notification.schedule_id == schedule.id)):
            note.state = JobState.DONE
            db.add(note)
        db.commit()


@pytest.fixture
def local_stack_settings(app, lakehouse):
    """The portal's settings as the local stack sets them: loopback storage allowed, and the
    stack's catalog and S3 on loopback."""
    app.config.update(
        OUTBOUND_ALLOW_LOOPBACK=True,
        LAKEKEEPER_URL=lakehouse.catalog_url,
        CU_ALLOWED_ENDPOINTS=lakehouse.cu_allowed_endpoints,
        WEBHOOK_ALLOWED_HOSTS="",
    )
    return lakehouse


def spellings(server_port: int, lakehouse) -> list[str]:
    """Every way of naming something only the portal can reach that was once saved and delivered."""
    catalog, s3 = urlsplit(lakehouse.catalog_url), urlsplit(lakehouse.s3_endpoint)
    return [
        f"{IN_PROCESS_PORTAL_URL}/health",  # the portal itself
        f"http://{catalog.netloc}/management/v1/warehouse",  # the catalog
        f"http://{s3.netloc}/alice-lake/",  # S3
        f"http://[::1]:{server_port}/hook",
        f"http://2130706433:{server_port}/hook",
        f"http://0x7f000001:{server_port}/hook",
        f"http://127.1:{server_port}/hook",
        f"http://user@127.0.0.1:{server_port}/hook",
        f"http://localhost:{server_port}/hook",
        f"http://[::ffff:127.0.0.1]:{server_port}/hook",
        f"http://0177.0.0.1:{server_port}/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.7/hook",
    ]


def test_every_inward_spelling_is_refused_on_the_local_stack(
    app,
    client,
    db_engine,
    newcomer,
    local_stack_settings,
    listen,
    attempts,
):
    server = listen("127.0.0.1")
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    for url in spellings(server.port, local_stack_settings):
        with app.test_request_context():
            assert "webhook_url" in notifications.check(
                {"notify_on": "both", "webhook_url": url}
            ), url
        page = client.post(
            f"/schedules/workflow/{workflow.id}",
            data={
                "cron": "0 7 * * *",
                "timezone": "UTC",
                "compute_unit_id": str(cu.id),
                "warehouse_id": str(warehouse.id),
                "catch_up": "skip",
                "notify_on": "both",
                "webhook_url": url,
                "csrf_token": csrf(client),
            },
        )
        assert page.status_code == 422, url
        assert 'id="error-webhook_url"' in page.get_data(as_text=True)
    assert server.connections == [] and attempts == []


def test_a_url_saved_before_is_refused_again_at_delivery_without_a_connection(
    app,
    client,
    db_engine,
    newcomer,
    local_stack_settings,
    listen,
    monkeypatch,
):
    server = listen("127.0.0.1")
    receiver = Receiver()
    try:
        app.config["WEBHOOK_ALLOWED_HOSTS"] = (
            "127.0.0.1"  # the receiver, to save the schedule at all
        )
        schedule, _ = scheduled(client, db_engine, newcomer, webhook_url=receiver.url)
        app.config["WEBHOOK_ALLOWED_HOSTS"] = ""
        run_ends(app, db_engine, monkeypatch, schedule, "FAILED")
        for url in spellings(server.port, local_stack_settings):
            with Session(
                db_engine
            ) as db:  # as a row saved under an older, laxer check would hold it
                row = db.get(Schedule, schedule.id)
                row.webhook_url = url
                db.add(row)
                db.commit()
            connects: list = []
            spy_target = socket.create_connection
            monkeypatch.setattr(
                socket,
                "create_connection",
                lambda address, *a, **k: connects.append(address) or spy_target(address, *a, **k),
            )
            deliver_all(app, schedule)
            (note,) = notes(db_engine, schedule)
            assert note.state == JobState.QUEUED and note.last_error, url
            assert connects == [], url
            with Session(db_engine) as db:  # due again at once
                from app.models import Notification, utcnow

                row = db.get(Notification, note.id)
                row.next_attempt_at, row.attempts = utcnow(), 0
                db.add(row)
                db.commit()
    finally:
        receiver.close()
        retire(db_engine, schedule)
    assert server.connections == [] and receiver.calls == []


def test_the_portals_own_services_are_refused_by_address_even_when_public():
    resolver = stub_resolver(["93.184.215.14"])
    policy = WebhookPolicy(own_hosts=("portal.example.test",), resolver=resolver)
    with pytest.raises(HostNotAllowed):
        policy.check_url("https://portal.example.test/api/v1/tokens")  # by name, before any lookup
    with pytest.raises(HostNotAllowed):
        policy.check_url("https://another-name-for-the-portal.example.test/")  # same address
    fine = WebhookPolicy(
        own_hosts=("portal.example.test",),
        resolver=lambda host, port: (
            ["93.184.215.14"] if host == "portal.example.test" else ["151.101.1.69"]
        ),
    )
    assert str(fine.check_url("https://hooks.example.test/lakeport")) == "151.101.1.69"
    # The settings that name the portal's services.
    from_settings = WebhookPolicy.from_config(
        {
            "PUBLIC_URL": "https://lakeport.example.test",
            "LAKEKEEPER_URL": "http://catalog.internal:8181",
            "OIDC_ISSUER": "https://id.example.test/realms/x",
            "DATABASE_URL": "postgresql+psycopg://u:p@db.internal:5432/l",
            "SMTP_HOST": "mail.internal",
            "CU_ALLOWED_ENDPOINTS": "s3.internal:9000",
        }
    )
    assert set(from_settings.own_hosts) >= {
        "lakeport.example.test",
        "catalog.internal",
        "id.example.test",
        "db.internal",
        "mail.internal",
        "s3.internal",
    }


@pytest.mark.parametrize(
    "url, message",
    [
        ("http://2130706433/", "four decimal numbers"),
        ("http://0x7f000001/", "four decimal numbers"),
        ("http://127.1/", "four decimal numbers"),
        ("http://0177.0.0.1/", "http://"),
        ("http://user@127.0.0.1/", "user name"),
        ("http://user:pw@hooks.example.test/", "user name"),
        ("http://@hooks.example.test/", "user name"),
        ("ftp://hooks.example.test/", "http://"),
        ("file:///etc/passwd", "http://"),
        ("http://hooks.example.test\\@127.0.0.1/", "http://"),
        ("http://hooks.example.test:99999/", "http://"),
        ("http://[fe80::1%25eth0]/", "http://"),
        ("http://hooks.example.test/a b", "http://"),
        ("http:///nohost", "http://"),
    ],
)
def test_webhook_urls_are_parsed_strictly(url, message):
    with pytest.raises(OutboundRefused) as refused:
        parse_webhook_url(url)
    assert message in refused.value.message


def test_the_allow_list_opens_a_host_as_written_and_nothing_else(app, listen, attempts):
    server = listen("127.0.0.1")
    listed = WebhookPolicy.from_config(
        {
            "WEBHOOK_ALLOWED_HOSTS": "127.0.0.1, hooks.internal.test",
            "PUBLIC_URL": f"http://127.0.0.1:{server.port}",
        }
    )
    assert (
        str(listed.check_url(f"http://127.0.0.1:{server.port}/hook")) == "127.0.0.1"
    )  # listed beats "own"
    for url in (
        f"http://2130706433:{server.port}/",
        f"http://localhost:{server.port}/",
        f"http://[::1]:{server.port}/",
        f"http://user@127.0.0.1:{server.port}/",
    ):
        with pytest.raises(OutboundRefused):
            listed.check_url(url)
    metadata = WebhookPolicy(
        allowed_hosts=frozenset({"169.254.169.254", "meta.test"}),
        resolver=stub_resolver(["169.254.169.254"]),
    )
    for url in ("http://169.254.169.254/", "http://meta.test/"):
        with pytest.raises(HostNotAllowed):
            metadata.check_url(url)
    assert attempts == []
    with listed.client(timeout=2) as client:
        assert client.put(f"http://127.0.0.1:{server.port}/hook", content=b"{}").status_code == 200
    assert len(server.connections) == 1


def test_the_delivery_connects_to_the_address_it_checked(listen):
    server = listen("127.0.0.1")
    # The name first resolves to the listed host's address; asked again, it would point elsewhere.
    rebinding = stub_resolver(["127.0.0.1"], ["10.9.9.9"])
    policy = WebhookPolicy(allowed_hosts=frozenset({"hooks.internal.test"}), resolver=rebinding)
    with policy.client(timeout=2) as client:
        for _ in range(3):
            assert (
                client.put(
                    f"http://hooks.internal.test:{server.port}/hook", content=b"{}"
                ).status_code
                == 200
            )
    assert rebinding.calls == ["hooks.internal.test"]  # one lookup for all three
    assert (
        server.hosts == [f"hooks.internal.test:{server.port}"] * 3
    )  # the name kept in the Host header


def test_a_slow_receiver_is_cut_off_at_the_deadline(app, client, db_engine, newcomer, monkeypatch):
    drip = SlowDrip(interval=1.0)
    app.config["WEBHOOK_ALLOWED_HOSTS"] = "127.0.0.1"
    try:
        schedule, _ = scheduled(
            client, db_engine, newcomer, webhook_url=f"http://127.0.0.1:{drip.port}/hook"
        )
        run_ends(app, db_engine, monkeypatch, schedule, "FAILED")
        started = time.monotonic()
        deliver_all(app, schedule)
        took = time.monotonic() - started
        (note,) = notes(db_engine, schedule)
    finally:
        drip.close()
        retire(db_engine, schedule)
    assert drip.accepted == 1
    assert took < delivery.DELIVERY_TIMEOUT_SECONDS + 1.5, took
    assert note.attempts == 1 and note.state == JobState.QUEUED  # failed, to be tried again


def test_a_deadline_bounds_every_read_however_slowly_bytes_come():
    drip = SlowDrip(interval=0.5)
    policy = WebhookPolicy(allowed_hosts=frozenset({"127.0.0.1"}))
    started = time.monotonic()
    try:
        with (
            total_deadline(2.0),
            policy.client(timeout=30) as client,
            pytest.raises(Exception) as failed,
        ):
            client.post(f"http://127.0.0.1:{drip.port}/", content=b"{}").read()
    finally:
        drip.close()
    assert (
        time.monotonic() - started < 3.0
    )  # per-read timeouts of 30 s never fired: the deadline did
    assert "Timeout" in type(failed.value).__name__ or "Protocol" in type(failed.value).__name__


@pytest.mark.parametrize(
    "address",
    [
        "a@b.example,root",
        "a@b.example, root@localhost",
        "a@[127.0.0.1]",
        "a@[IPv6:::1]",
        "Bob <a@b.example>",
        "a@b.example (Bob)",
        '"a,b"@b.example',
        "a@b.example;b@c.example",
        "a@b.example\nBcc: x@y.example",
        "root",
        "a@localhost",
        "a@b.example b@c.example",
        "<a@b.example>",
    ],
)
def test_the_email_field_takes_one_plain_address(address, app, client, db_engine, newcomer):
    assert notifications.plain_address(address) is None
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
            "notify_email": address,
            "csrf_token": csrf(client),
        },
    )
    assert page.status_code == 422 and "One email address" in page.get_data(as_text=True)


def test_plain_addresses_pass():
    for address in ("data-team@example.com", "a.b+tag@sub.example.co.uk", "o'brien@example.ie"):
        assert notifications.plain_address(address) == address


def test_an_address_saved_before_goes_to_nobody_else(app, client, db_engine, newcomer, monkeypatch):
    """A row holding "a@b,root" (saved under the old check) is refused at delivery: smtplib would
    have sent it to both."""
    from aiosmtpd.controller import Controller

    received = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802
            received.append(envelope.rcpt_tos)
            return "250 OK"

    port = free_port()
    smtp = Controller(Handler(), hostname="127.0.0.1", port=port)
    smtp.start()
    try:
        app.config.update(SMTP_HOST="127.0.0.1", SMTP_PORT=port)
        schedule, _ = scheduled(client, db_engine, newcomer, notify_email="team@example.test")
        with Session(db_engine) as db:
            row = db.get(Schedule, schedule.id)
            row.notify_email = "team@example.test,root@example.test"
            db.add(row)
            db.commit()
        run_ends(app, db_engine, monkeypatch, schedule, "FAILED")
        deliver_all(app, schedule)
        (note,) = notes(db_engine, schedule)
        assert "not one plain address" in note.last_error
        with Session(db_engine) as db:
            row = db.get(Schedule, schedule.id)
            row.notify_email = "team@example.test"
            db.add(row)
            db.commit()
            from app.models import Notification, utcnow

            queued = db.get(Notification, note.id)
            queued.next_attempt_at = utcnow()
            db.add(queued)
            db.commit()
        deliver_all(app, schedule)
    finally:
        smtp.stop()
        retire(db_engine, schedule)
    assert received == [["team@example.test"]]


def test_the_signature_covers_the_timestamp(app, client, db_engine, newcomer, monkeypatch):
    """A receiver that checks as docs/features.md says accepts the call, and refuses it replayed with a
    newer timestamp (the signature no longer matches) or as it was, later (the timestamp is old)."""
    app.config["WEBHOOK_ALLOWED_HOSTS"] = "127.0.0.1"
    receiver = Receiver()
    try:
        schedule, secret = scheduled(client, db_engine, newcomer, webhook_url=receiver.url)
        run_ends(app, db_engine, monkeypatch, schedule, "FAILED")
        deliver_all(app, schedule)
    finally:
        receiver.close()
        retire(db_engine, schedule)
    ((headers, body),) = receiver.calls
    assert signed_as_documented(secret, headers, body)
    assert abs(int(headers["X-Lakeport-Timestamp"]) - time.time()) < 60
    replayed_fresh = {
        **headers,
        "X-Lakeport-Timestamp": str(int(headers["X-Lakeport-Timestamp"]) + 600),
    }
    assert not signed_as_documented(secret, replayed_fresh, body)
    monkeypatch.setattr(time, "time", lambda: int(headers["X-Lakeport-Timestamp"]) + 3600)
    assert not signed_as_documented(secret, headers, body)
