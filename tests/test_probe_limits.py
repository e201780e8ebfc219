""" "Test connection" against storage that misbehaves: a server that drips one byte every few
seconds is cut off at the probe's total deadline; answers that are not S3's (any status, a banner,
a huge body) are reported in S3's terms without echoing them; one user runs at most two probes at
once and LAKEPORT_STORAGE_PROBES_PER_MINUTE a minute. Then the real thing: the portal served by
gunicorn as shipped (gunicorn.conf.py), twelve slow-drip probes at once from two users, and
/health answering throughout. The API's 64 KiB limit holds for chunked bodies, through gunicorn too.

The slow-drip servers listen on loopback, which the tests' portal allows for storage
(`LAKEPORT_OUTBOUND_ALLOW_LOOPBACK`, as on the local stack)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from app.config import SETTINGS
from app.storage_probe import (
    NOT_S3,
    PROBE_DEADLINE_SECONDS,
    TOO_SLOW,
    Outcome,
    S3Credentials,
    S3Location,
    probe_storage,
)
from devstack.process import free_port
from tests.factories import make_user, token_for
from tests.services import LOOPBACK_ALLOWED, PROJECT_ROOT
from tests.stand_ins import SlowDrip

KEYS = S3Credentials("AKIAPROBETEST", "probe-secret-key")


def storage_at(port: int) -> S3Location:
    return S3Location(
        bucket="probe-bucket",
        region="us-east-1",
        key_prefix="lake",
        endpoint=f"http://127.0.0.1:{port}",
    )


def probe_body(port: int) -> dict:
    return {
        "bucket": "probe-bucket",
        "region": "us-east-1",
        "endpoint": f"http://127.0.0.1:{port}",
        "access_key_id": KEYS.access_key_id,
        "secret_access_key": KEYS.secret_access_key,
    }


@pytest.fixture
def drip():
    server = SlowDrip(interval=3.0)
    yield server
    server.close()


def test_a_slow_drip_storage_is_cut_off_at_the_deadline(drip):
    started = time.monotonic()
    report = probe_storage(storage_at(drip.port), KEYS, policy=LOOPBACK_ALLOWED)
    took = time.monotonic() - started
    assert took < PROBE_DEADLINE_SECONDS + 1.5, took  # not 3 s per byte of a 1 MB answer
    assert report.first_failure.name == "write" and report.first_failure.message == TOO_SLOW
    assert [check.outcome for check in report.checks[1:]] == [Outcome.SKIPPED] * 3


class Impostor(ThreadingHTTPServer):
    """Answers every request with `status`, `body` and a server banner: anything but S3."""

    daemon_threads = True

    def __init__(self, status: int, body: bytes, headers: dict | None = None) -> None:
        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Server", "SECRET-BANNER/1.0")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_DELETE = _answer

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.mark.parametrize(
    "status, body, headers, expected",
    [
        (418, b"<html>SECRET-BANNER admin console</html>", {}, NOT_S3),
        (
            403,
            b"<html>SECRET-BANNER forbidden</html>",
            {},
            NOT_S3,
        ),  # a 403 that is not S3's is not "access denied"
        (
            500,
            b"<Error><Code>SECRET-BANNER</Code><Message>SECRET-BANNER</Message></Error>",
            {},
            NOT_S3,
        ),
        (302, b"", {"Location": "http://169.254.169.254/"}, NOT_S3),
        (200, b"SECRET-BANNER", {}, NOT_S3),  # no ETag: no PutObject answer
        (200, b"x" * 5_000_000, {"ETag": '"1"'}, NOT_S3),  # far longer than any S3 answer here
        (404, b"<Error><Code>NoSuchBucket</Code></Error>", {}, "Bucket not found"),
        (
            403,
            b"<Error><Code>SignatureDoesNotMatch</Code></Error>",
            {},
            "Access denied: the signature does not match",
        ),
    ],
)
def test_a_failure_is_said_in_s3s_terms_and_never_echoes_the_answer(
    status, body, headers, expected
):
    server = Impostor(status, body, headers)
    try:
        report = probe_storage(storage_at(server.server_address[1]), KEYS, policy=LOOPBACK_ALLOWED)
    finally:
        server.shutdown()
        server.server_close()
    failure = report.first_failure
    assert failure is not None and failure.message.startswith(expected), failure.message
    said = report.summary() + " ".join(check.message for check in report.checks)
    assert "SECRET" not in said and str(status) not in said.replace("127.0.0.1", "")


def probe_through_api(client, token: str, port: int):
    return client.post(
        "/api/v1/warehouses/test-connection",
        json=probe_body(port),
        headers={"Authorization": f"Bearer {token}"},
    )


def test_one_user_runs_two_probes_at_once(app, db_engine, drip):
    owner = make_user(db_engine)
    token = token_for(app, owner)
    answers: list = []

    def probe():
        started = time.monotonic()
        answer = probe_through_api(app.test_client(), token, drip.port)
        answers.append((answer.status_code, time.monotonic() - started, answer))

    first = [threading.Thread(target=probe) for _ in range(2)]
    for thread in first:
        thread.start()
    while drip.accepted < 2:  # both are holding their slot, waiting on the drip
        time.sleep(0.05)
    probe()  # a third
    status, took, third = answers[0]
    assert status == 429 and took < 2, (status, took)
    assert (
        third.content_type == "application/problem+json" and int(third.headers["Retry-After"]) > 0
    )
    assert "At most 2 connection tests run at once" in third.get_json()["detail"]
    for thread in first:
        thread.join()
    assert sorted(status for status, _took, _answer in answers) == [200, 200, 429]
    probe()  # the slots are free again
    assert answers[-1][0] == 200 and drip.accepted == 3


def test_one_user_starts_so_many_probes_a_minute(app, client, db_engine, closed_port):
    app.config["STORAGE_PROBES_PER_MINUTE"] = 3
    owner = make_user(db_engine)
    token = token_for(app, owner)
    window_start = time.time() // 60
    statuses = [probe_through_api(client, token, closed_port).status_code for _ in range(4)]
    if time.time() // 60 != window_start:
        pytest.skip("the minute turned during the test")
    assert statuses == [200, 200, 200, 429]
    other = token_for(app, make_user(db_engine))
    assert probe_through_api(client, other, closed_port).status_code == 200  # per user


def test_the_register_page_says_a_limited_probe_plainly(app, client, db_engine, closed_port):
    from tests.factories import csrf, sign_in_as

    app.config["STORAGE_PROBES_PER_MINUTE"] = 1
    owner = make_user(db_engine)
    sign_in_as(client, owner)
    form = {**probe_body(closed_port), "path_style_access": "on", "csrf_token": csrf(client)}
    first = client.post("/warehouses/test-connection", data=form)
    assert first.status_code == 200, first.get_data(as_text=True)
    limited = client.post("/warehouses/test-connection", data=form)
    assert limited.status_code == 429
    assert "connection tests a minute" in limited.get_data(as_text=True)
    assert 'data-testid="probe-refused"' in limited.get_data(as_text=True)


def test_a_chunked_body_over_64_kib_answers_413(app, client, db_engine):
    token = token_for(app, make_user(db_engine))

    def chunked(body: bytes):
        return client.post(
            "/api/v1/compute-units",
            input_stream=io.BytesIO(body),
            headers={
                "Authorization": f"Bearer {token}",
                "Transfer-Encoding": "chunked",
                "Content-Type": "application/json",
            },
            environ_overrides={"wsgi.input_terminated": True},
        )

    huge = chunked(b'{"name": "' + b"x" * 200_000 + b'"}')
    assert huge.status_code == 413 and huge.content_type == "application/problem+json"
    just_over = chunked(b'{"name": "' + b"x" * (64 * 1024 - 11) + b'"}')  # 64 KiB + 1 byte
    assert just_over.status_code == 413
    small = chunked(
        b'{"name": "Bad Name!"}'
    )  # read whole and checked: the name is refused, not missing
    assert small.status_code == 400 and small.get_json()["field"] == "name"


def portal_environment(portal_config) -> dict[str, str]:
    """The test run's portal settings as the environment gunicorn's `wsgi:app` reads them."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("LAKEPORT_")}
    for name, setting in SETTINGS.items():
        value = getattr(portal_config, name)
        if value is not None:
            env[setting.env] = (
                ("true" if value else "false") if isinstance(value, bool) else str(value)
            )
    return env


@pytest.fixture
def gunicorn_portal(portal_config, tmp_path):
    """The portal as shipped: gunicorn with gunicorn.conf.py (its web processes and threads)."""
    port = free_port()
    log = open(tmp_path / "gunicorn.log", "wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--config",
            str(PROJECT_ROOT / "gunicorn.conf.py"),
            "--bind",
            f"127.0.0.1:{port}",
            "--no-control-socket",
            "wsgi:app",
        ],
        cwd=PROJECT_ROOT,
        env=portal_environment(portal_config),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (
                tmp_path / "gunicorn.log"
            ).read_text()
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_twelve_slow_drip_probes_of_one_user_leave_health_answering(
    app, db_engine, drip, gunicorn_portal
):
    """One user fires twelve probes at once at a server that drips a byte every 3 s. Each that
    runs ends at its deadline; at most two run at a time (the rest answer 429 at once, or run
    once a slot is free, if gunicorn queued them that long); /health answers throughout."""
    token = token_for(app, make_user(db_engine))
    probes: list[tuple[int, float, dict]] = []
    health: list[tuple[int, float]] = []
    done = threading.Event()

    def probe() -> None:
        started = time.monotonic()
        answer = httpx.post(
            f"{gunicorn_portal}/api/v1/warehouses/test-connection",
            json=probe_body(drip.port),
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        )
        probes.append((answer.status_code, time.monotonic() - started, answer.json()))

    def watch_health() -> None:
        while not done.is_set():
            started = time.monotonic()
            try:
                status = httpx.get(f"{gunicorn_portal}/health", timeout=30).status_code
            except httpx.TransportError:
                status = 0
            health.append((status, time.monotonic() - started))
            time.sleep(0.25)

    # Both web processes answer once before (a process's first API call loads what it needs).
    warm_up = [
        threading.Thread(
            target=httpx.get,
            args=(f"{gunicorn_portal}/api/v1/warehouses",),
            kwargs={"headers": {"Authorization": f"Bearer {token}"}, "timeout": 30},
        )
        for _ in range(8)
    ]
    for thread in warm_up:
        thread.start()
    for thread in warm_up:
        thread.join()
    watcher = threading.Thread(target=watch_health)
    watcher.start()
    threads = [threading.Thread(target=probe) for _ in range(12)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    watcher.join()
    elapsed = time.monotonic() - started

    ran = [(took, body) for status, took, body in probes if status == 200]
    refused = [body for status, _took, body in probes if status == 429]
    assert len(ran) + len(refused) == 12 and len(ran) >= 2 and refused, probes
    assert all(
        body["checks"][0]["message"] == TOO_SLOW for _took, body in ran
    )  # each cut at its deadline
    assert all("At most 2 connection tests run at once" in body["detail"] for body in refused)
    assert drip.most_open <= 2  # never more than two of this user's probes at the storage at once
    assert all(status == 200 for status, _ in health), health
    assert max(took for _, took in health) < 2, health
    assert len(health) >= elapsed / 1.5
    print(
        json.dumps(
            {
                "probes_ran": len(ran),
                "ran_s": sorted(round(took, 1) for took, _ in ran),
                "refused": len(refused),
                "elapsed_s": round(elapsed, 1),
                "health_calls": len(health),
                "health_max_s": round(max(t for _, t in health), 3),
            }
        )
    )


def test_a_chunked_body_over_64_kib_answers_413_through_gunicorn(app, db_engine, gunicorn_portal):
    token = token_for(app, make_user(db_engine))

    def chunks(body: bytes):
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]

    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    huge = httpx.post(
        f"{gunicorn_portal}/api/v1/compute-units",
        headers=headers,
        timeout=30,
        content=chunks(b'{"name": "' + b"x" * 200_000 + b'"}'),
    )
    assert huge.status_code == 413 and huge.headers["content-type"] == "application/problem+json"
    small = httpx.post(
        f"{gunicorn_portal}/api/v1/compute-units",
        headers=headers,
        timeout=30,
        content=chunks(b'{"name": "Bad Name!"}'),
    )
    assert small.status_code == 400 and small.json()["field"] == "name"
