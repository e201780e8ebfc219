"""The local stack's database: PostgreSQL when one answers on loopback, else SQLite.

On PostgreSQL the stack's database has two roles, as a deployment's has (app/database_roles.py):
`<database>_owner` owns the tables and migrates, `<database>_portal` is what the portal and the
worker connect as. Loopback here trusts every connection, so neither role has a password: the
split is about what each role may do, not who may log in as it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _sqlalchemy_url(libpq_url: str, database: str) -> str:
    base = libpq_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    return f"{base}/{database}"


def postgres_reachable(admin_url: str = POSTGRES_ADMIN_URL) -> bool:
    try:
        with psycopg.connect(admin_url, connect_timeout=2):
            return True
    except psycopg.Error:
        return False


def ensure_postgres_database(name: str, admin_url: str = POSTGRES_ADMIN_URL) -> str:
    """Create database `name` if missing; return its SQLAlchemy URL."""
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return _sqlalchemy_url(admin_url, name)


def drop_postgres_database(name: str, admin_url: str = POSTGRES_ADMIN_URL) -> None:
    """Drop the database and its two roles, if it had them (the roles belong to no other)."""
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        for role in (portal_role_name(name), owner_role_name(name)):
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def owner_role_name(database: str) -> str:
    return f"{database}_owner"


def portal_role_name(database: str) -> str:
    return f"{database}_portal"


def ensure_postgres_database_with_roles(
    name: str, admin_url: str = POSTGRES_ADMIN_URL
) -> tuple[str, str]:
    """Database `name` owned by its owner role, and its portal role, each made if missing:
    (the portal's SQLAlchemy URL, the owner's). A database made before it had roles is handed to
    its owner role, tables and functions included, so the owner can migrate it."""
    owner, portal = owner_role_name(name), portal_role_name(name)
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        for role, extra in ((owner, ""), (portal, " NOINHERIT")):
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                conn.execute(
                    sql.SQL(
                        "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE" + extra
                    ).format(sql.Identifier(role))
                )
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(name), sql.Identifier(owner)
                )
            )
        else:
            conn.execute(
                sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                    sql.Identifier(name), sql.Identifier(owner)
                )
            )
    _hand_objects_to(owner, _database_url(admin_url, name))
    return _role_url(admin_url, name, portal), _role_url(admin_url, name, owner)


def _hand_objects_to(owner: str, database_url: str) -> None:
    """Every table and function of the public schema owned by `owner` (a table takes its indexes
    and its columns' sequences along); the schema too, where it is not the database owner's."""
    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
        schema_owner = conn.execute(
            "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'public'"
        ).fetchone()[0]
        if schema_owner not in ("pg_database_owner", owner):
            conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(owner)))
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tableowner <> %s",
            (owner,),
        ).fetchall()
        for (table,) in tables:
            conn.execute(
                sql.SQL("ALTER TABLE {} OWNER TO {}").format(
                    sql.Identifier(table), sql.Identifier(owner)
                )
            )
        functions = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n "
            "ON n.oid = p.pronamespace WHERE n.nspname = 'public' "
            "AND p.proowner <> (SELECT oid FROM pg_roles WHERE rolname = %s)",
            (owner,),
        ).fetchall()
        for (function,) in functions:
            conn.execute(
                sql.SQL("ALTER FUNCTION {} OWNER TO {}").format(
                    sql.SQL(function), sql.Identifier(owner)
                )
            )


def _database_url(admin_url: str, database: str) -> str:
    return f"{admin_url.rsplit('/', 1)[0]}/{database}"


def _role_url(admin_url: str, database: str, role: str) -> str:
    """The SQLAlchemy URL of `database` on the admin URL's server, connecting as `role`."""
    parts = urlsplit(admin_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"postgresql+psycopg://{role}@{host}/{database}"


def fresh_postgres_database(
    prefix: str = "lakeport_test", admin_url: str = POSTGRES_ADMIN_URL
) -> tuple[str, str]:
    """A new, empty database for one test run: (name, SQLAlchemy URL)."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    return name, ensure_postgres_database(name, admin_url)


def stack_database_name(var_dir: Path) -> str:
    """The PostgreSQL database of the local stack living in `var_dir`: one per var dir, so two
    stacks side by side never share rows (nor poll, nor stop, each other's compute units).
    E.g. `lakeport_dev_devstack_1a2b3c4d` (the dir's name, and a hash of its whole path)."""
    path = str(Path(var_dir).resolve())
    slug = re.sub(r"[^a-z0-9]+", "_", Path(path).name.lower()).strip("_")[:24] or "stack"
    return f"lakeport_dev_{slug}_{hashlib.sha256(path.encode()).hexdigest()[:8]}"


def fresh_postgres_database_with_roles(
    prefix: str, admin_url: str = POSTGRES_ADMIN_URL
) -> tuple[str, str, str]:
    """A new, empty database with its two roles: (name, the portal's URL, the owner's URL)."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    return (name, *ensure_postgres_database_with_roles(name, admin_url))


def local_database_urls(var_dir: Path) -> tuple[str, str | None]:
    """(the portal's URL, the owner's URL): PostgreSQL on loopback if it answers (the stack's own
    database, with its two roles), otherwise a SQLite file under `var_dir` (no roles, no owner URL)."""
    if postgres_reachable():
        return ensure_postgres_database_with_roles(stack_database_name(var_dir))
    return f"sqlite:///{(var_dir / 'lakeport.db').resolve()}", None
