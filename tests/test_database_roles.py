"""The audit trail is safe from its own writer: on PostgreSQL the portal and the worker connect as a
role that may only read and append the audit trail and change no schema; migrations run as the
owner and grant it (app/database_roles.py, migration 0018).

Each test here acts as the portal's role would if an attacker ran SQL through it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session, select

from app import create_app
from app.config import PROJECT_ROOT
from app.database_roles import PortalRoleRefused, portal_role
from app.db import alembic_config, make_engine, upgrade_database
from app.models import AuditEvent, ComputeUnit, User
from devstack.database import (
    drop_postgres_database,
    ensure_postgres_database_with_roles,
    fresh_postgres_database,
    fresh_postgres_database_with_roles,
    owner_role_name,
    portal_role_name,
)
from devstack.oidc_provider import TEST_USERS
from tests.factories import AuthActions, csrf

INSUFFICIENT_PRIVILEGE = "42501"


@pytest.fixture(scope="module")
def split_database():
    """A fresh database with its two roles, migrated by the owner: (name, portal URL, owner URL)."""
    name, portal_url, owner_url = fresh_postgres_database_with_roles("lakeport_roles")
    upgrade_database(owner_url, portal_url=portal_url)
    yield name, portal_url, owner_url
    drop_postgres_database(name)


@pytest.fixture(scope="module")
def portal_engine(split_database):
    engine = make_engine(split_database[1])
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def owner_engine(split_database):
    engine = make_engine(split_database[2])
    yield engine
    engine.dispose()


def appended_event(engine, action: str) -> int:
    with engine.begin() as connection:
        return connection.execute(
            text(
                "INSERT INTO audit_events (at, actor_name, action, object_type, object_id, detail, ip, user_agent) "
                "VALUES (now(), '', :action, '', '', '{}', '', '') RETURNING id"
            ),
            {"action": action},
        ).scalar_one()


def refused(engine, statement: str) -> DBAPIError:
    with engine.connect() as connection, pytest.raises(DBAPIError) as raised:
        connection.execute(text(statement))
        connection.commit()
    return raised.value


def test_the_portal_role_appends_and_reads_the_audit_trail_but_cannot_rewrite_it(
    split_database, portal_engine, owner_engine
):
    name = split_database[0]
    kept = appended_event(portal_engine, "test.kept")
    with portal_engine.connect() as connection:
        assert (
            connection.execute(
                text("SELECT action FROM audit_events WHERE id = :id"), {"id": kept}
            ).scalar_one()
            == "test.kept"
        )
        assert connection.execute(text("SELECT current_user")).scalar_one() == portal_role_name(
            name
        )
    attacks = [
        f"UPDATE audit_events SET action = 'rewritten' WHERE id = {kept}",
        f"DELETE FROM audit_events WHERE id = {kept}",
        "TRUNCATE audit_events",
        "ALTER TABLE audit_events DISABLE TRIGGER audit_events_append_only",
        "ALTER TABLE audit_events DISABLE TRIGGER ALL",
        "SET session_replication_role = replica",
        "DROP TABLE audit_events",
        "ALTER TABLE audit_events OWNER TO CURRENT_USER",
        "CREATE TABLE audit_events_copy (id integer)",
        "CREATE TEMPORARY TABLE scratch (id integer)",
        "CREATE FUNCTION lakeport_noop() RETURNS integer LANGUAGE sql AS 'SELECT 1'",
        "ALTER TABLE users ADD COLUMN planted text",
        "DROP TABLE users",
        f"SET ROLE {owner_role_name(name)}",
        f"GRANT {owner_role_name(name)} TO CURRENT_USER",
        "ALTER ROLE CURRENT_USER SUPERUSER",
        "ALTER ROLE CURRENT_USER CREATEROLE",
        "UPDATE alembic_version SET version_num = '0001'",
    ]
    for statement in attacks:
        error = refused(portal_engine, statement)
        assert error.orig.sqlstate == INSUFFICIENT_PRIVILEGE, (statement, error)
    # Granting itself a right on the table: PostgreSQL grants only what the grantor holds with grant
    # option, and the portal holds none, so nothing is granted and the UPDATE is still refused.
    with portal_engine.connect() as connection:
        connection.execute(text("GRANT UPDATE, DELETE, TRUNCATE ON audit_events TO CURRENT_USER"))
        connection.commit()
        assert not connection.execute(
            text(
                "SELECT has_table_privilege('audit_events', 'UPDATE') OR has_table_privilege('audit_events', 'DELETE') "
                "OR has_table_privilege('audit_events', 'TRUNCATE')"
            )
        ).scalar_one()
    assert (
        refused(portal_engine, f"DELETE FROM audit_events WHERE id = {kept}").orig.sqlstate
        == INSUFFICIENT_PRIVILEGE
    )
    with owner_engine.connect() as connection:
        assert (
            connection.execute(
                text("SELECT action FROM audit_events WHERE id = :id"), {"id": kept}
            ).scalar_one()
            == "test.kept"
        )


def test_the_portal_role_keeps_its_row_rights_on_every_other_table(portal_engine):
    with portal_engine.connect() as connection:
        tables = (
            connection.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
            .scalars()
            .all()
        )
        sequences = (
            connection.execute(
                text("SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'")
            )
            .scalars()
            .all()
        )
        lacking = [
            (table, right)
            for table in tables
            if table not in ("audit_events", "alembic_version")
            for right in ("SELECT", "INSERT", "UPDATE", "DELETE")
            if not connection.execute(
                text("SELECT has_table_privilege(:t, :r)"), {"t": table, "r": right}
            ).scalar()
        ]
        unusable = [
            sequence
            for sequence in sequences
            if not connection.execute(
                text("SELECT has_sequence_privilege(:s, 'USAGE')"), {"s": sequence}
            ).scalar()
        ]
        assert {"users", "compute_units", "executions", "work_leases"} <= set(tables) and sequences
        assert lacking == [] and unusable == []
        # What it does with them, on a table without a sequence: a lease taken, renewed, given back.
        connection.execute(
            text(
                "INSERT INTO work_leases (name, holder, expires_at) VALUES ('rights', 'me', now())"
            )
        )
        connection.execute(
            text(
                "UPDATE work_leases SET expires_at = now() + interval '1 minute' WHERE name = 'rights'"
            )
        )
        assert (
            connection.execute(text("DELETE FROM work_leases WHERE name = 'rights'")).rowcount == 1
        )
        connection.commit()
        # The migrations' bookkeeping is read, never written.
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one()


def test_a_table_a_later_migration_creates_is_the_portals_to_use_without_a_manual_grant(
    portal_engine, owner_engine
):
    with owner_engine.begin() as connection:  # as a later migration would, run by the owner
        connection.execute(text("CREATE TABLE later_feature (id serial PRIMARY KEY, note text)"))
    with portal_engine.begin() as connection:
        connection.execute(text("INSERT INTO later_feature (note) VALUES ('usable')"))
        connection.execute(text("UPDATE later_feature SET note = 'changed'"))
        assert connection.execute(text("SELECT note FROM later_feature")).scalar_one() == "changed"
    assert (
        refused(portal_engine, "DROP TABLE later_feature").orig.sqlstate == INSUFFICIENT_PRIVILEGE
    )


def test_the_portal_records_audit_events_and_its_worker_works_as_that_role(
    split_database, portal_engine, portal_config, oidc_provider
):
    from app.worker import Worker

    app = create_app(replace(portal_config, DATABASE_URL=split_database[1]))
    client = app.test_client()
    auth = AuthActions(client, {name: user.password for name, user in TEST_USERS.items()})
    auth.login("alice")  # the sign-in request records user.sign_in
    made = client.post(
        "/tokens/",
        data={"name": "as-portal-role", "scope": "read", "days": "7", "csrf_token": csrf(client)},
    )
    assert made.status_code == 200, made.get_data(as_text=True)[:500]
    with Session(portal_engine) as db:
        alice = db.exec(select(User).where(User.email == "alice@example.test")).one()
        actions = [
            event.action
            for event in db.exec(select(AuditEvent).where(AuditEvent.actor_id == alice.id))
        ]
        cu = ComputeUnit(
            owner_id=alice.id, name="stopped-by-the-worker", kind="local", state="RUNNING"
        )
        db.add(cu)
        db.commit()
        cu_id = cu.id
    assert actions[-2:] == ["user.sign_in", "token.create"]

    # The terminate request records its intent and an audit event; the worker, as the same role, stops it.
    terminated = client.post(f"/compute-units/{cu_id}/terminate", data={"csrf_token": csrf(client)})
    assert terminated.status_code == 302
    worker = Worker(app).start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with Session(portal_engine) as db:
                state = db.get(ComputeUnit, cu_id).state
            if state in ("TERMINATED", "FAILED"):
                break
            time.sleep(0.2)
    finally:
        worker.stop()
        app.extensions["db_engine"].dispose()
    assert state == "TERMINATED"
    with Session(portal_engine) as db:
        audit = db.exec(
            select(AuditEvent).where(
                AuditEvent.object_type == "computeunit", AuditEvent.object_id == str(cu_id)
            )
        ).all()
    assert [event.action for event in audit] == ["unit.terminate"]


def test_the_migration_refuses_a_portal_role_that_could_undo_its_limits(split_database):
    name, _portal_url, owner_url = split_database
    # The local server's admin is a superuser: granting it rights would protect nothing.
    superuser_url = owner_url.replace(f"{owner_role_name(name)}@", "postgres@")
    with pytest.raises(PortalRoleRefused, match="superuser"):
        upgrade_database(owner_url, portal_url=superuser_url)
    # The owner itself, or a URL without a role, is no second role.
    assert portal_role(owner_url, owner_url) is None
    with pytest.raises(ValueError, match="name its role"):
        portal_role(owner_url.replace(f"{owner_role_name(name)}@", ""), owner_url)
    with pytest.raises(ValueError, match="same database"):
        portal_role(owner_url.rsplit("/", 1)[0] + "/elsewhere", owner_url)
    with pytest.raises(ValueError, match="SQLite has no roles"):
        portal_role("sqlite:///lakeport.db", owner_url)


def test_the_migration_command_migrates_as_the_owner_and_the_grants_go_with_a_downgrade():
    """`flask db upgrade` (the deploy's migration job) with the two URLs: the owner migrates and the
    portal's role gets its rights; a downgrade past migration 0018 takes them away again."""
    name, portal_url, owner_url = fresh_postgres_database_with_roles("lakeport_roles_cli")
    try:

        def upgrade(**settings: str) -> subprocess.CompletedProcess:
            environment = {
                **os.environ,
                "LAKEPORT_SECRET_KEY": "s" * 32,
                "LAKEPORT_OIDC_CLIENT_SECRET": "unused",
                **settings,
            }
            return subprocess.run(
                [sys.executable, "-m", "flask", "--app", "wsgi", "db", "upgrade"],
                cwd=PROJECT_ROOT,
                env=environment,
                capture_output=True,
                text=True,
                timeout=120,
            )

        # The portal's image runs `flask db upgrade` before serving: as its own role it cannot migrate...
        alone = upgrade(LAKEPORT_DATABASE_URL=portal_url)
        assert alone.returncode != 0 and "permission denied" in alone.stderr
        migrated = upgrade(LAKEPORT_DATABASE_URL=portal_url, LAKEPORT_DATABASE_OWNER_URL=owner_url)
        assert migrated.returncode == 0, migrated.stderr[-2000:]
        assert "warning" not in migrated.stderr
        # ...and once the owner has, it finds nothing to do.
        again = upgrade(LAKEPORT_DATABASE_URL=portal_url)
        assert again.returncode == 0 and "warning" not in again.stderr
        # Run as the owner alone (one role for everything), the command says what that exposes.
        single = upgrade(LAKEPORT_DATABASE_URL=owner_url)
        assert (
            single.returncode == 0 and "can switch the audit trail's triggers off" in single.stderr
        )
        engine = make_engine(portal_url)
        try:
            with engine.connect() as connection:
                assert connection.execute(text("SELECT count(*) FROM users")).scalar_one() == 0
                owners = (
                    connection.execute(
                        text(
                            "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'"
                        )
                    )
                    .scalars()
                    .all()
                )
            assert owners == [owner_role_name(name)]
            config = alembic_config(owner_url, portal_url)
            command.downgrade(
                config, ScriptDirectory.from_config(config).get_revision("0018").down_revision
            )
            assert (
                refused(engine, "SELECT count(*) FROM users").orig.sqlstate
                == INSUFFICIENT_PRIVILEGE
            )
        finally:
            engine.dispose()
    finally:
        drop_postgres_database(name)


def test_a_local_stack_database_made_before_it_had_roles_is_handed_to_its_owner():
    """`make run`'s database from before the two roles: made and migrated by the server's superuser.
    The stack hands it to its owner role, which then migrates and grants the portal's role."""
    name, single_url = fresh_postgres_database("lakeport_roles_old")
    try:
        upgrade_database(single_url)  # every table and function the superuser's
        portal_url, owner_url = ensure_postgres_database_with_roles(name)
        upgrade_database(owner_url, portal_url=portal_url)
        engine = make_engine(portal_url)
        try:
            kept = appended_event(engine, "test.after_handover")
            assert (
                refused(engine, f"DELETE FROM audit_events WHERE id = {kept}").orig.sqlstate
                == INSUFFICIENT_PRIVILEGE
            )
            assert (
                refused(engine, "ALTER TABLE audit_events DISABLE TRIGGER ALL").orig.sqlstate
                == INSUFFICIENT_PRIVILEGE
            )
            with engine.connect() as connection:
                owners = (
                    connection.execute(
                        text(
                            "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public' UNION "
                            "SELECT DISTINCT proowner::regrole::text FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
                        )
                    )
                    .scalars()
                    .all()
                )
            assert owners == [owner_role_name(name)]
        finally:
            engine.dispose()
    finally:
        drop_postgres_database(name)
