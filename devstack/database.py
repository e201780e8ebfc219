"""The local stack's database: PostgreSQL when one answers on loopback, else SQLite."""
from __future__ import annotations

import hashlib
import re
import secrets
from pathlib import Path

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
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def fresh_postgres_database(prefix: str = "lakeport_test", admin_url: str = POSTGRES_ADMIN_URL) -> tuple[str, str]:
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


def local_database_url(var_dir: Path) -> str:
    """PostgreSQL on loopback if it answers (the stack's own database), otherwise a SQLite file under `var_dir`."""
    if postgres_reachable():
        return ensure_postgres_database(stack_database_name(var_dir))
    return f"sqlite:///{(var_dir / 'lakeport.db').resolve()}"
