"""Database access: one engine per app, one SQLModel session per request.

Schema changes go through Alembic (`migrations/`); nothing here creates tables.
"""
from __future__ import annotations

from pathlib import Path

from flask import Flask, abort, current_app, g
from flask_login import current_user
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlmodel import Session, SQLModel, create_engine

from app.config import PROJECT_ROOT

# What the database raises while it cannot be reached (down, restarting, refusing connections):
# background work waits and retries on these rather than recording a failure it cannot write.
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)


def make_engine(database_url: str) -> Engine:
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_foreign_keys(dbapi_connection, _record):
            # SQLite ignores foreign keys unless asked, per connection.
            dbapi_connection.execute("PRAGMA foreign_keys=ON")
            # The web workers and the worker process share the file: with a write-ahead log,
            # readers do not wait for a writer (writers still take turns).
            dbapi_connection.execute("PRAGMA journal_mode=WAL")

        return engine
    return create_engine(url, pool_pre_ping=True)


def init_app(app: Flask) -> None:
    app.extensions["db_engine"] = make_engine(app.config["DATABASE_URL"])
    app.teardown_appcontext(close_db)


def engine() -> Engine:
    return current_app.extensions["db_engine"]


def get_db() -> Session:
    """The request's database session, opened on first use and closed at teardown."""
    if "db" not in g:
        g.db = Session(engine(), expire_on_commit=False)
    return g.db


def close_db(_exc: BaseException | None = None) -> None:
    session = g.pop("db", None)
    if session is not None:
        session.close()


def get_owned_or_404(model: type[SQLModel], row_id):
    """The row with this id if it belongs to the signed-in user; 404 otherwise.

    Another user's row answers exactly like a missing one, so ids reveal nothing.
    """
    row = get_db().get(model, row_id)
    if row is None or getattr(row, "owner_id", None) != current_user.id:
        abort(404)
    return row


def alembic_config(database_url: str):
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    config.attributes["database_url"] = database_url
    return config


def upgrade_database(database_url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(database_url), revision)
