"""The Python client and the `lakeport` command against the portal in this process: every call
the client makes, and every answer, is checked against the portal's OpenAPI document."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse

from lakeport_client import ApiError, Client, cli
from tests.factories import equipped, execution_row, make_user, token_for
from tests.factories import execution_count as execution_count_of


class CheckedTransport(httpx.BaseTransport):
    """Sends to the Flask app in-process (WSGI) and checks the call and its answer against the
    OpenAPI document; remembers which operations were used."""

    def __init__(self, app) -> None:
        self.inner = httpx.WSGITransport(app=app)
        document = app.test_client().get("/api/v1/openapi.json").get_json()
        self.openapi = OpenAPI.from_dict(
            document,
            config=Config(extra_media_type_deserializers={"application/problem+json": json.loads}),
        )
        self.used: set[tuple[str, str]] = set()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        body = response.read()
        checked = MockRequest(
            "http://localhost",
            request.method.lower(),
            request.url.path,
            args=dict(request.url.params),
            headers=dict(request.headers),
            data=request.content or b"",
            content_type=request.headers.get("content-type", "application/json"),
        )
        self.openapi.validate_request(checked)  # the client sends what the document describes
        self.openapi.validate_response(
            checked,
            MockResponse(
                body,
                status_code=response.status_code,
                headers=dict(response.headers),
                content_type=response.headers.get("content-type", "").split(";")[0],
            ),
        )
        self.used.add((request.method, request.url.path))
        return httpx.Response(response.status_code, headers=response.headers, content=body)


@pytest.fixture
def checked(app):
    return CheckedTransport(app)


def test_the_client_speaks_the_documented_api(app, db_engine, checked):
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    done = execution_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        cu,
        state="COMPLETED",
        run_id="r",
        lineage=json.dumps({"read": [], "wrote": []}),
    )
    with Client("http://portal.test", token_for(app, owner), transport=checked) as client:
        assert [unit["id"] for unit in client.units()] == [cu.id]
        assert [item["id"] for item in client.warehouses()] == [warehouse.id]
        assert client.warehouse(warehouse.id)["name"] == warehouse.name
        assert client.workflow(workflow.id)["latest_version"] == 1
        assert [item["id"] for item in client.workflows()] == [workflow.id]
        started = client.start(workflow.id, cu.id, warehouse.id, idempotency_key="ci-42")
        assert (
            client.start(workflow.id, cu.id, warehouse.id, idempotency_key="ci-42")["id"]
            == started["id"]
        )
        assert {item["id"] for item in client.executions()} == {started["id"], done.id}
        assert client.cancel(started["id"])["state"] == "CANCELLED"
        assert client.lineage(done.id) == {"read": [], "wrote": [], "changes": []}
        assert client.log_tail(done.id) == []
        with pytest.raises(ApiError) as refused:
            client.create_unit("Bad Name!")
        assert refused.value.status == 400 and refused.value.field == "name"
        with pytest.raises(ApiError) as missing:
            client.execution(done.id + 10_000)
        assert missing.value.status == 404
        assert client.terminate_unit(cu.id)["state"] == "TERMINATING"
    assert len(checked.used) >= 10


def test_the_command_line_lists_and_starts(app, db_engine, checked, monkeypatch):
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    token = token_for(app, owner)
    monkeypatch.setattr(
        cli, "make_client", lambda: Client("http://portal.test", token, transport=checked)
    )
    runner = CliRunner()
    listed = runner.invoke(cli.main, ["units"])
    assert listed.exit_code == 0 and cu.name in listed.output and "RUNNING" in listed.output
    started = runner.invoke(
        cli.main, ["run", workflow.name, "--unit", cu.name, "--warehouse", str(warehouse.id)]
    )
    assert started.exit_code == 0 and "QUEUED" in started.output, started.output
    history = runner.invoke(cli.main, ["executions"])
    assert history.exit_code == 0 and workflow.name in history.output and "QUEUED" in history.output
    unknown = runner.invoke(
        cli.main, ["run", "no-such-workflow", "--unit", cu.name, "--warehouse", warehouse.name]
    )
    assert (
        unknown.exit_code == 1
        and "No workflow of yours is called 'no-such-workflow'" in unknown.output
    )
    missing = runner.invoke(cli.main, ["results", "999999", "step"])
    assert missing.exit_code == 1 and "404" in missing.output


def test_a_read_over_the_rate_limit_waits_as_told_and_a_change_is_never_sent_twice(
    app, db_engine, checked, monkeypatch
):
    """Against the portal's real rate limit (two calls a minute here): a GET answered 429 waits the
    Retry-After it names and asks again; a POST answered 429 is not sent again."""
    from types import SimpleNamespace

    from app.api import rate_limit
    from lakeport_client import client as client_module

    app.config["API_CALLS_PER_MINUTE"] = 2
    minute = 60 * 29_000_000 + 30  # one minute's window throughout, whenever the test runs
    monkeypatch.setattr(rate_limit, "time", SimpleNamespace(time=lambda: minute))
    owner = make_user(db_engine)
    workflow, warehouse, cu = equipped(db_engine, owner)
    api = Client("http://portal.test", token_for(app, owner), transport=checked)
    waits: list[float] = []

    def wait(seconds: float) -> None:  # the minute passes: the portal allows more calls again
        waits.append(seconds)
        app.config["API_CALLS_PER_MINUTE"] = 100

    monkeypatch.setattr(client_module.time, "sleep", wait)
    assert [unit["id"] for unit in api.units()] == [cu.id]
    assert api.unit(cu.id)["id"] == cu.id  # the second call of the minute
    assert api.unit(cu.id)["name"] == cu.name  # the third: 429, then asked again
    assert len(waits) == 1 and 1 <= waits[0] <= 61

    app.config["API_CALLS_PER_MINUTE"] = (
        1  # a CSV download over the limit waits too, then asks again
    )
    with pytest.raises(ApiError) as missing:
        list(api.results_csv(cu.id + 10_000, "step"))
    assert missing.value.status == 404 and len(waits) == 2

    app.config["API_CALLS_PER_MINUTE"] = 1  # over it again
    with pytest.raises(ApiError) as refused:
        api.start(workflow.id, cu.id, warehouse.id)
    assert refused.value.status == 429 and len(waits) == 2
    assert execution_count_of(db_engine, owner) == 0

    waits.clear()
    monkeypatch.setattr(client_module.time, "sleep", waits.append)  # this time the limit holds
    with pytest.raises(ApiError) as still:
        api.units()
    assert still.value.status == 429 and len(waits) == client_module.RATE_LIMITED_RETRIES


def test_the_command_line_reads_its_settings_from_the_environment_or_a_file(tmp_path, monkeypatch):
    monkeypatch.delenv("LAKEPORT_URL", raising=False)
    monkeypatch.delenv("LAKEPORT_TOKEN", raising=False)
    config = tmp_path / "config.toml"
    monkeypatch.setenv("LAKEPORT_CONFIG", str(config))
    with pytest.raises(Exception, match="Set LAKEPORT_URL and LAKEPORT_TOKEN"):
        cli.settings()
    config.write_text('url = "https://lakeport.example"\ntoken = "lkp_from_file"\n')
    assert cli.settings() == ("https://lakeport.example", "lkp_from_file")
    monkeypatch.setenv("LAKEPORT_TOKEN", "lkp_from_env")
    assert cli.settings() == ("https://lakeport.example", "lkp_from_env")
    config.write_text("url = [unclosed")
    with pytest.raises(Exception, match="config.toml"):
        cli.settings()


def test_a_csv_download_streams_after_a_wait_and_every_answer_it_opened_is_closed(monkeypatch):
    """The streamed path of the client's one rule for 429s: the refused answer is closed before
    the wait, the CSV arrives whole, and its answer is closed once read."""
    from lakeport_client import client as client_module

    answers: list[httpx.Response] = []

    def portal(request: httpx.Request) -> httpx.Response:
        if not answers:
            answer = httpx.Response(
                429,
                headers={"Retry-After": "7", "Content-Type": "application/json"},
                stream=httpx.ByteStream(b'{"detail": "slow down"}'),
            )
        else:
            answer = httpx.Response(
                200,
                headers={"Content-Type": "text/csv"},
                stream=httpx.ByteStream(b"id,name\n1,a\n"),
            )
        answers.append(answer)
        return answer

    waits: list[float] = []
    monkeypatch.setattr(client_module.time, "sleep", waits.append)
    api = Client("http://portal.test", "token", transport=httpx.MockTransport(portal))
    assert b"".join(api.results_csv(1, "step")) == b"id,name\n1,a\n"
    assert waits == [7.0] and len(answers) == 2 and all(answer.is_closed for answer in answers)


def test_revoking_the_token_raises_the_portals_refusal():
    refusals = httpx.MockTransport(
        lambda request: (
            httpx.Response(401, json={"detail": "token revoked"})
            if request.url.path.endswith("/tokens/current/revoke")
            else httpx.Response(404)
        )
    )
    with pytest.raises(ApiError) as refused:
        Client("http://portal.test", "token", transport=refusals).revoke_token()
    assert refused.value.status == 401 and refused.value.detail == "token revoked"
