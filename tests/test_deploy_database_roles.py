"""The shipped deployments give the portal's database its two roles: compose and Kubernetes create
(or expect) an owner that migrates and a portal role the portal and the worker connect as, and
only the migration gets the owner's URL. The roles' SQL is run here against the local PostgreSQL,
followed by the real migration, so the files are checked by what they do, not by their text."""

from __future__ import annotations

import re
import secrets
import subprocess

import pytest
import yaml
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from app.config import PROJECT_ROOT, Config
from app.database_roles import portal_role
from app.db import make_engine, upgrade_database
from devstack.database import (
    POSTGRES_ADMIN_URL,
    drop_postgres_database,
    owner_role_name,
    portal_role_name,
)
from tests.deploy_files import FILLED_ENV, SERVICES, depends_on, environment

DATABASE_DIR = PROJECT_ROOT / "deploy" / "database"
ROLES_SQL = DATABASE_DIR / "lakeport-roles.sql"
KUBERNETES_DIR = PROJECT_ROOT / "deploy" / "kubernetes"


def sql_default(variable: str) -> str:
    """The name lakeport-roles.sql uses when it is given none."""
    found = re.search(rf"\\set {variable} (\w+)", ROLES_SQL.read_text())
    assert found, f"lakeport-roles.sql sets no default {variable}"
    return found.group(1)


def test_compose_runs_the_portal_and_worker_as_the_portal_role_and_only_the_migration_as_the_owner():
    migrate, database = SERVICES["portal-migrate"], SERVICES["portal-db"]
    portal_env, worker_env, migrate_env = (
        environment(SERVICES[name]) for name in ("portal", "worker", "portal-migrate")
    )
    assert (
        "LAKEPORT_DATABASE_OWNER_URL" not in portal_env
        and "LAKEPORT_DATABASE_OWNER_URL" not in worker_env
    )
    portal_url, owner_url = (
        make_url(portal_env["LAKEPORT_DATABASE_URL"]),
        make_url(migrate_env["LAKEPORT_DATABASE_OWNER_URL"]),
    )
    assert (
        worker_env["LAKEPORT_DATABASE_URL"]
        == portal_env["LAKEPORT_DATABASE_URL"]
        == migrate_env["LAKEPORT_DATABASE_URL"]
    )
    # The roles the URLs name are those the init script creates, with the passwords it is given.
    assert (portal_url.username, owner_url.username) == (
        sql_default("portal_role"),
        sql_default("owner_role"),
    )
    assert portal_url.database == owner_url.database == sql_default("database")
    database_env = environment(database)
    assert (
        database_env["PORTAL_ROLE_PASSWORD"]
        == portal_url.password
        == FILLED_ENV["PORTAL_DB_PASSWORD"]
    )
    assert (
        database_env["OWNER_ROLE_PASSWORD"]
        == owner_url.password
        == FILLED_ENV["PORTAL_DB_OWNER_PASSWORD"]
    )
    assert database_env["POSTGRES_USER"] not in (portal_url.username, owner_url.username)
    assert len({database_env["POSTGRES_PASSWORD"], portal_url.password, owner_url.password}) == 3
    mounts = dict(volume.split(":")[:2] for volume in database["volumes"])
    init_script = (DATABASE_DIR / "initdb-lakeport.sh").read_text()
    assert mounts["./database/initdb-lakeport.sh"].startswith("/docker-entrypoint-initdb.d/")
    assert f"-f {mounts['./database/lakeport-roles.sql']}" in init_script
    assert all(
        f'"${name}"' in init_script for name in ("OWNER_ROLE_PASSWORD", "PORTAL_ROLE_PASSWORD")
    )
    # The migration job migrates as the owner and grants the role the portal connects as.
    assert (
        migrate["command"] == ["flask", "--app", "wsgi", "db", "upgrade"]
        and migrate["restart"] == "no"
    )
    config = Config.from_env(migrate_env)
    config.validate()
    assert portal_role(config.DATABASE_URL, config.DATABASE_OWNER_URL) == portal_url.username
    for name in ("portal", "worker"):
        assert depends_on(SERVICES[name])["portal-migrate"] == "service_completed_successfully", (
            name
        )


def test_kubernetes_gives_the_owners_url_to_the_migration_job_alone():
    documents = {
        path.name: yaml.safe_load(path.read_text()) for path in KUBERNETES_DIR.glob("*.yaml")
    }
    job = documents["migrate-job.yaml"]
    assert job["kind"] == "Job"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["flask", "--app", "wsgi", "db", "upgrade"]
    assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    (owner,) = [
        entry for entry in container["env"] if entry["name"] == "LAKEPORT_DATABASE_OWNER_URL"
    ]
    owner_secret = owner["valueFrom"]["secretKeyRef"]["name"]
    portal_secret = documents["secret.yaml"]
    assert owner_secret != portal_secret["metadata"]["name"]
    assert "LAKEPORT_DATABASE_OWNER_URL" not in portal_secret["stringData"]
    assert owner_secret not in str(documents["deployment.yaml"]) + str(documents["worker.yaml"])
    for name in ("deployment.yaml", "worker.yaml", "migrate-job.yaml"):
        (pod_container,) = documents[name]["spec"]["template"]["spec"]["containers"]
        refs = {ref.get("secretRef", {}).get("name") for ref in pod_container["envFrom"]}
        assert portal_secret["metadata"]["name"] in refs, (
            name
        )  # one LAKEPORT_DATABASE_URL for all three
    portal_url = make_url(portal_secret["stringData"]["LAKEPORT_DATABASE_URL"])
    assert portal_url.username == sql_default("portal_role") and portal_url.database == sql_default(
        "database"
    )
    owner_url = portal_url.set(username=sql_default("owner_role"))
    assert (
        portal_role(str(portal_url), owner_url.render_as_string(hide_password=False))
        == portal_url.username
    )


@pytest.fixture
def roles_from_the_deploy_sql():
    """The deploy's SQL run as the local server's superuser, under names of this run."""
    database = f"lakeport_deploy_{secrets.token_hex(4)}"
    names = {
        "database": database,
        "owner_role": owner_role_name(database),
        "portal_role": portal_role_name(database),
    }
    admin = make_url(POSTGRES_ADMIN_URL)
    arguments = [f"-v{name}={value}" for name, value in names.items()]
    created = subprocess.run(
        [
            "psql",
            "-h",
            admin.host,
            "-p",
            str(admin.port),
            "-U",
            admin.username,
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "owner_password=owner-pw",
            "-v",
            "portal_password=portal-pw",
            *arguments,
            "-f",
            str(ROLES_SQL),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        assert created.returncode == 0, created.stderr
        yield names
    finally:
        drop_postgres_database(database)  # and its two roles


def test_the_deploy_sql_and_the_migration_leave_the_portal_role_unable_to_rewrite_the_audit_trail(
    roles_from_the_deploy_sql,
):
    names = roles_from_the_deploy_sql
    admin = make_url(POSTGRES_ADMIN_URL)

    def url(role: str, password: str) -> str:
        return (
            f"postgresql+psycopg://{role}:{password}@{admin.host}:{admin.port}/{names['database']}"
        )

    portal_url, owner_url = (
        url(names["portal_role"], "portal-pw"),
        url(names["owner_role"], "owner-pw"),
    )
    upgrade_database(owner_url, portal_url=portal_url)
    engine = make_engine(portal_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO audit_events (at, actor_name, action, object_type, object_id, detail, ip, user_agent) "
                    "VALUES (now(), '', 'deploy.kept', '', '', '{}', '', '')"
                )
            )
        for statement in (
            "UPDATE audit_events SET action = 'rewritten'",
            "DELETE FROM audit_events",
            "ALTER TABLE audit_events DISABLE TRIGGER ALL",
            "CREATE TABLE planted (id integer)",
        ):
            with engine.connect() as connection, pytest.raises(DBAPIError) as raised:
                connection.execute(text(statement))
            assert raised.value.orig.sqlstate == "42501", statement
        with engine.connect() as connection:
            assert connection.execute(text("SELECT action FROM audit_events")).scalars().all() == [
                "deploy.kept"
            ]
            attributes = connection.execute(
                text(
                    "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user"
                )
            ).one()
        assert tuple(attributes) == (False, False, False)
    finally:
        engine.dispose()
