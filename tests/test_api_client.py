"""The Python client and the `lakeport` command against the portal in this process: every call
the client makes, and every answer, is checked against the portal's OpenAPI document. The table
commands (`tables`, `table`, `table-policy`, `maintenance`) run against a real table of the local
stack's catalog."""

from __future__ import annotations

import json

import httpx
import pyarrow as pa
import pytest
from click.testing import CliRunner
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from sqlmodel import Session, select

from app.models import MaintenanceJob, TablePolicy, WarehouseShare
from lakeport_client import ApiError, Client, cli
from tests.factories import (
    add,
    equipped,
    execution_row,
    make_user,
    signed_in_owners_warehouse,
    token_for,
    unit_row,
    workflow_for,
)
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


# --------------------------------------------------------------------------- a table's commands
TABLE = "sales.daily"
ROWS = pa.schema([("id", pa.int64())])


@pytest.fixture
def lake(lakehouse_app, lakehouse, db_engine):
    """An owner's real warehouse on the local stack with `sales.daily`: three appends of 10 rows;
    the catalog table made directly (no compute unit)."""
    _, owner, warehouse, catalog = signed_in_owners_warehouse(
        lakehouse_app, lakehouse, db_engine, "cli-tables", "sales"
    )
    table = catalog.create_table(TABLE, schema=ROWS)
    for batch in range(3):
        table.append(pa.table({"id": [batch * 10 + n for n in range(10)]}, schema=ROWS))
    return lakehouse_app, owner, warehouse, table


def as_user(app, monkeypatch, checked, user, scope: str = "run"):
    """`lakeport …` (a list of arguments) as `user`, with a token of `scope`."""
    token = token_for(app, user, scope=scope)

    def lakeport(*args):
        monkeypatch.setattr(
            cli, "make_client", lambda: Client("http://portal.test", token, transport=checked)
        )
        return CliRunner().invoke(cli.main, [str(arg) for arg in args])

    return lakeport


def refused(result, words: str) -> bool:
    """Exit code 1 and one line on standard error naming the refusal, no traceback."""
    return (
        result.exit_code == 1
        and result.stdout == ""
        and result.stderr.strip().splitlines() == [f"Error: {words}"]
    )


def test_the_table_commands_show_health_publishes_policy_and_jobs(lake, db_engine, monkeypatch):
    app, owner, warehouse, table = lake
    checked = CheckedTransport(app)
    lakeport = as_user(app, monkeypatch, checked, owner)

    listed = lakeport("tables", warehouse.name)
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.splitlines() == ["TABLE", TABLE]

    # Its health, and each snapshot with the run that wrote it (an expired publish stays listed).
    newest = max(table.snapshots(), key=lambda snapshot: snapshot.timestamp_ms)
    writer, reader = workflow_for(db_engine, owner), workflow_for(db_engine, owner)
    unit = unit_row(db_engine, owner)
    wrote = [
        {"table": TABLE, "step": "daily", "snapshot_id": newest.snapshot_id, "snapshot_at_ms": 1},
        {"table": TABLE, "step": "daily", "snapshot_id": 4242, "added_records": 7},
    ]
    publisher = execution_row(
        db_engine,
        owner,
        writer,
        warehouse,
        unit,
        state="COMPLETED",
        lineage=json.dumps({"read": [], "wrote": wrote}),
    )
    execution_row(
        db_engine,
        owner,
        reader,
        warehouse,
        unit,
        state="COMPLETED",
        lineage=json.dumps({"read": [{"table": TABLE, "snapshot_id": newest.snapshot_id}]}),
    )
    shown = lakeport("table", warehouse.id, TABLE)
    assert shown.exit_code == 0, shown.output
    fields = dict(line.split("  ", 1) for line in shown.stdout.split("\n\n")[0].splitlines())
    fields = {label.strip(): value.strip() for label, value in fields.items()}
    assert fields["table"] == TABLE
    assert (fields["data files"], fields["snapshots"], fields["records"]) == ("3", "3", "30")
    assert fields["small files"] == "3 (below 32.0 MiB)" and fields["last compaction"] == "-"
    assert (fields["written by"], fields["read by"]) == (writer.name, reader.name)
    publishes = shown.stdout.split("\n\n")[1].splitlines()
    assert publishes[0].split() == "COMMITTED SNAPSHOT OPERATION EXECUTION STEP ROWS ADDED".split()
    newest_first = sorted(table.snapshots(), key=lambda snapshot: snapshot.timestamp_ms)[::-1]
    assert [row.split()[2] for row in publishes[1:4]] == [
        str(snapshot.snapshot_id) for snapshot in newest_first
    ]
    assert publishes[1].split()[3:] == ["append", f"#{publisher.id}", "daily", "10"]
    assert publishes[2].split()[3:] == ["append", "-", "-", "10"]
    assert publishes[4].split() == ["-", "4242", "(expired)", "-", f"#{publisher.id}", "daily", "7"]

    # The policy: none yet, then set part by part; what is not named stays as it was.
    policy = lakeport("table-policy", warehouse.name, TABLE)
    assert policy.exit_code == 0, policy.output
    assert policy.stdout.splitlines() == [
        "small files       below 32 MiB",
        "compact           never",
        "expire snapshots  never",
        "start a unit      no",
        "updated           never set",
    ]
    saved = lakeport(
        "table-policy", warehouse.name, TABLE, "--compact-small-files", 20, "--expire-days", 7
    )
    assert saved.exit_code == 0, saved.output
    assert "policy saved" in saved.stderr
    assert saved.stdout.splitlines()[:3] == [
        "small files       below 32 MiB",
        "compact           when small files reach 20",
        "expire snapshots  older than 7 days",
    ]
    kept = lakeport("table-policy", warehouse.id, TABLE, "--small-file-mb", 8, "--never-expire")
    assert kept.exit_code == 0, kept.output
    with Session(db_engine) as db:
        row = db.exec(select(TablePolicy).where(TablePolicy.warehouse_id == warehouse.id)).one()
    assert (row.small_file_mb, row.compact_small_files, row.expire_days) == (8, 20, None)
    read_back = lakeport("table-policy", warehouse.id, TABLE).stdout.splitlines()
    assert read_back[:3] == [
        "small files       below 8 MiB",
        "compact           when small files reach 20",
        "expire snapshots  never",
    ]
    assert lakeport("table-policy", warehouse.id, TABLE, "--never-compact").exit_code == 0
    with Session(db_engine) as db:
        assert db.get(TablePolicy, row.id).compact_small_files is None
    # Starting a unit for a job: on, then kept by a change that does not name it, then off.
    started = lakeport("table-policy", warehouse.id, TABLE, "--start-unit")
    assert started.exit_code == 0, started.output
    assert "start a unit      yes, when no unit of yours is idle" in started.stdout.splitlines()
    assert lakeport("table-policy", warehouse.id, TABLE, "--expire-days", 9).exit_code == 0
    with Session(db_engine) as db:
        assert (
            db.get(TablePolicy, row.id).start_unit,
            db.get(TablePolicy, row.id).expire_days,
        ) == (
            True,
            9,
        )
    assert lakeport("table-policy", warehouse.id, TABLE, "--no-start-unit").exit_code == 0
    with Session(db_engine) as db:
        assert db.get(TablePolicy, row.id).start_unit is False
    # The portal's own rules refuse a bad value, in one line naming the field.
    assert refused(
        lakeport("table-policy", warehouse.id, TABLE, "--compact-small-files", 1),
        "400: Small files: a whole number from 2 to 1,000,000. (field compact_small_files)",
    )
    both = lakeport("table-policy", warehouse.id, TABLE, "--expire-days", 3, "--never-expire")
    assert both.exit_code == 2 and "Give one of --expire-days and --never-expire" in both.stderr
    with Session(db_engine) as db:
        assert db.get(TablePolicy, row.id).small_file_mb == 8

    # The maintenance jobs, newest first.
    jobs = lakeport("maintenance", warehouse.name, TABLE)
    assert jobs.exit_code == 0 and jobs.stdout.splitlines() == [
        "ID  ASKED  WHAT  OUTCOME  DATA FILES  GB-HOURS"
    ]
    skipped = add(
        db_engine,
        MaintenanceJob(
            owner_id=owner.id,
            warehouse_id=warehouse.id,
            retain_last=1,
            table_name=TABLE,
            compact=True,
            state="done",
            skipped="no compute unit of the owner's is running",
            data_files_before=3,
        ),
    )
    done = add(
        db_engine,
        MaintenanceJob(
            owner_id=owner.id,
            warehouse_id=warehouse.id,
            retain_last=1,
            table_name=TABLE,
            compact=True,
            expire_before=skipped.created_at,
            state="done",
            data_files_before=3,
            data_files_after=1,
            gb_hours=0.0125,
        ),
    )
    jobs = lakeport("maintenance", warehouse.name, TABLE)
    assert jobs.exit_code == 0, jobs.output
    rows = jobs.stdout.splitlines()[1:]
    assert [row.split()[0] for row in rows] == [str(done.id), str(skipped.id)]
    assert "compaction and snapshot expiry  done" in rows[0]
    assert rows[0].split()[-4:] == ["3", "->", "1", "0.0125"]
    assert "skipped: no compute unit of the owner's is running" in rows[1]
    assert rows[1].split()[-4:] == ["3", "->", "-", "-"]
    assert {
        ("GET", f"/api/v1/warehouses/{warehouse.id}/tables/{TABLE}/{part}")
        for part in ("health", "publishes", "policy", "maintenance")
    } <= checked.used


def test_a_missing_table_or_a_warehouse_out_of_sight_is_one_line_and_exit_1(
    lake, db_engine, monkeypatch
):
    app, owner, warehouse, _ = lake
    checked = CheckedTransport(app)
    lakeport = as_user(app, monkeypatch, checked, owner)
    for command in ("table", "table-policy", "maintenance"):
        for name in ("sales.nope", "not-a-table-name"):
            assert refused(lakeport(command, warehouse.id, name), "404: No such table."), (
                command,
                name,
            )
    assert refused(
        lakeport("table-policy", warehouse.id, "sales.nope", "--expire-days", 3),
        "404: No such table.",
    )
    assert refused(
        lakeport("tables", "no-such-warehouse"),
        "No warehouse of yours is called 'no-such-warehouse'.",
    )

    # Another user: the owner's warehouse answers 404 by id, and is not theirs by name.
    stranger = as_user(app, monkeypatch, checked, make_user(db_engine))
    for args in (
        ("tables", warehouse.id),
        ("table", warehouse.id, TABLE),
        ("table-policy", warehouse.id, TABLE),
        ("table-policy", warehouse.id, TABLE, "--expire-days", 3),
        ("maintenance", warehouse.id, TABLE),
    ):
        assert refused(stranger(*args), "404: There is nothing here, or it is not yours."), args
    assert refused(
        stranger("table", warehouse.name, TABLE),
        f"No warehouse of yours is called {warehouse.name!r}.",
    )

    # A reader it is shared with sees the table and its policy by id, and may not set it.
    reader = make_user(db_engine)
    add(db_engine, WarehouseShare(warehouse_id=warehouse.id, user_id=reader.id, level="read"))
    sharee = as_user(app, monkeypatch, checked, reader)
    listed = sharee("tables", warehouse.id)
    assert listed.exit_code == 0 and TABLE in listed.output, listed.output
    assert sharee("table", warehouse.id, TABLE).exit_code == 0
    assert sharee("table-policy", warehouse.id, TABLE).exit_code == 0
    assert refused(
        sharee("table-policy", warehouse.id, TABLE, "--expire-days", 3),
        "404: There is nothing here, or it is not yours.",
    )
    # A read token of the owner's may look, not set.
    looking = as_user(app, monkeypatch, checked, owner, scope="read")
    assert looking("table-policy", warehouse.id, TABLE).exit_code == 0
    assert refused(
        looking("table-policy", warehouse.id, TABLE, "--expire-days", 3),
        "403: This token's scope is read: it cannot change anything.",
    )
    with Session(db_engine) as db:
        assert (
            db.exec(select(TablePolicy).where(TablePolicy.warehouse_id == warehouse.id)).all() == []
        )
