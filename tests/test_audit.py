"""The audit trail: actions recorded once wherever they come from (pages, the API, the worker),
with who, from where and before → after, never a secret; an owner reads their objects' trail,
nobody else's; filters and CSV; and the database itself refuses to change or remove a row."""

from __future__ import annotations

import csv
import io
import json

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session, select

from app.db import make_engine
from app.models import ApiToken, AuditEvent, User
from tests.factories import csrf, equipped, make_user, sign_in_as


def events(db_engine, **where) -> list[AuditEvent]:
    with Session(db_engine) as db:
        statement = select(AuditEvent).order_by(AuditEvent.id)
        for name, value in where.items():
            statement = statement.where(getattr(AuditEvent, name) == value)
        return list(db.exec(statement))


def test_sign_in_and_out_are_recorded_with_the_groups_from_the_provider(auth, client, db_engine):
    auth.login("alice")
    with Session(db_engine) as db:
        alice = db.exec(select(User).where(User.email == "alice@example.test")).one()
    assert alice.group_names == ["analytics"]
    auth.logout()
    recorded = [
        (event.action, json.loads(event.detail).get("groups"))
        for event in events(db_engine, actor_id=alice.id)
    ]
    assert recorded[-2:] == [("user.sign_in", ["analytics"]), ("user.sign_out", None)]
    last = events(db_engine, actor_id=alice.id)[-1]
    assert last.ip == "127.0.0.1" and last.user_agent and last.owner_id == alice.id


def test_page_and_api_actions_are_recorded_with_the_token_and_no_secret(
    app, client, db_engine, newcomer
):
    from tests.factories import Api

    workflow, warehouse, cu = equipped(db_engine, newcomer)
    made = client.post(
        "/tokens/", data={"name": "ci", "scope": "run", "days": "7", "csrf_token": csrf(client)}
    )
    token_text = made.get_data(as_text=True).split('data-testid="token-text">')[1].split("<")[0]
    api = Api(client, token_text)
    started = api.call(
        "POST",
        "/api/v1/executions",
        {"workflow_id": workflow.id, "compute_unit_id": cu.id, "warehouse_id": warehouse.id},
    )
    execution_id = started.get_json()["id"]
    client.post(
        f"/executions/{execution_id}/cancel",
        data={"csrf_token": csrf(client)},
        headers={"User-Agent": "audit-test-browser"},
    )
    mine = events(db_engine, owner_id=newcomer.id)
    actions = [event.action for event in mine]
    assert actions == ["token.create", "execution.start", "execution.cancel"]
    create, start, cancel = mine
    assert (create.actor_id, create.token_id) == (newcomer.id, None)
    with Session(db_engine) as db:
        token = db.exec(select(ApiToken).where(ApiToken.owner_id == newcomer.id)).one()
    assert (start.token_id, start.actor_id) == (token.id, newcomer.id) and create.object_id == str(
        token.id
    )
    assert json.loads(start.detail)["warehouse_id"] == warehouse.id and start.object_id == str(
        execution_id
    )
    assert (
        cancel.user_agent == "audit-test-browser"
        and json.loads(cancel.detail)["before"] == "QUEUED"
    )
    everything = json.dumps([event.model_dump(mode="json") for event in mine])
    assert token_text not in everything and token_text[4:20] not in everything


def test_an_owner_reads_their_trail_only_filtered_and_as_csv(app, client, db_engine, newcomer):
    with Session(db_engine) as db:  # a name from the identity provider that a spreadsheet would run
        row = db.get(User, newcomer.id)
        row.name = "=HYPERLINK(1)"
        db.add(row)
        db.commit()
    client.post(
        "/tokens/", data={"name": "mine", "scope": "read", "days": "7", "csrf_token": csrf(client)}
    )
    other = make_user(db_engine)
    stranger = app.test_client()
    sign_in_as(stranger, other)
    stranger.post(
        "/tokens/",
        data={
            "name": "strangers-token",
            "scope": "read",
            "days": "7",
            "csrf_token": csrf(stranger),
        },
    )
    page = client.get("/audit/").get_data(as_text=True)
    assert "token.create" in page and "strangers-token" not in page
    assert "strangers-token" not in client.get("/audit/?action=token").get_data(as_text=True)
    assert 'data-testid="audit-empty"' in client.get("/audit/?action=warehouse.").get_data(
        as_text=True
    )
    partial = client.get("/audit/?object_type=apitoken", headers={"HX-Request": "true"}).get_data(
        as_text=True
    )
    assert partial.lstrip().startswith('<div id="audit-events"') and "token.create" in partial
    exported = client.get("/audit/export.csv?action=token")
    assert exported.headers["Content-Disposition"].startswith("attachment")
    rows = list(csv.DictReader(io.StringIO(exported.get_data(as_text=True))))
    assert [row["action"] for row in rows] == ["token.create"]
    assert rows[0]["actor"] == "'=HYPERLINK(1)"  # shown as text, never run as a formula
    assert all("strangers-token" not in row["detail"] for row in rows)


def test_operators_read_every_users_trail(app, client, db_engine):
    operator = make_user(db_engine)
    with Session(db_engine) as db:
        row = db.get(User, operator.id)
        row.groups = json.dumps(["lakeport-admins"])
        db.add(row)
        db.commit()
    someone = make_user(db_engine)
    theirs = app.test_client()
    sign_in_as(theirs, someone)
    theirs.post(
        "/tokens/",
        data={"name": "someones-token", "scope": "read", "days": "7", "csrf_token": csrf(theirs)},
    )
    sign_in_as(client, operator)
    assert "someones-token" in client.get("/audit/").get_data(as_text=True)
    assert "someones-token" in theirs.get("/audit/").get_data(as_text=True)  # their own
    assert (
        client.get("/operators/").status_code == 200
        and theirs.get("/operators/").status_code == 404
    )


def test_the_database_refuses_to_change_or_remove_an_audit_row(app, db_engine, owner_database_url):
    """On PostgreSQL (the tests' database) a trigger refuses UPDATE, DELETE and TRUNCATE even to the
    tables' owner; the portal's own role is refused them before (tests/test_database_roles.py)."""
    assert db_engine.dialect.name == "postgresql"
    with app.app_context():
        from app.audit import service as audit

        audit.record("test.append_only", owner_id=None, note="kept")
    (row,) = events(db_engine, action="test.append_only")
    owner = make_engine(owner_database_url)
    try:
        for statement in (
            f"UPDATE audit_events SET action = 'rewritten' WHERE id = {row.id}",
            f"DELETE FROM audit_events WHERE id = {row.id}",
            "TRUNCATE audit_events",
        ):
            with owner.connect() as connection, pytest.raises(DBAPIError, match="append-only"):
                connection.execute(text(statement))
                connection.commit()
            with (
                db_engine.connect() as connection,
                pytest.raises(DBAPIError, match="permission denied"),
            ):
                connection.execute(text(statement))
    finally:
        owner.dispose()
    assert [event.action for event in events(db_engine, id=row.id)] == ["test.append_only"]


def test_a_detail_that_could_hold_a_secret_is_refused(app):
    from app.audit import service as audit

    with app.app_context(), pytest.raises(ValueError, match="never hold secrets"):
        audit.record("warehouse.rotate_keys", secret_access_key="x")
