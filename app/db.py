"""Database access: one engine per app, one SQLModel session per request.

A request that only reads (GET, HEAD) reads without a transaction: each statement commits by
itself, so a poll costs no BEGIN and no ROLLBACK round trip. Its reads see what they would see
in a transaction at PostgreSQL's READ COMMITTED (a snapshot per statement), and it writes
nothing: its session refuses every INSERT, UPDATE and DELETE, and SQL text naming one. A
reading request that must write (the sign-in callback, a token's last use, the API's rate
counts) does so in `writing_session()`, its own transaction.

Schema changes go through Alembic (`migrations/`); nothing here creates tables.
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from flask import Flask, abort, current_app, g, has_request_context, request
from flask_login import current_user
from sqlalchemy import TextClause, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DisconnectionError, InterfaceError, InvalidRequestError, OperationalError
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
    engine = create_engine(url)
    _ping_connections_back_from_idle(engine)
    return engine


# A pooled connection that has waited this long is pinged before it is handed out again.
PING_AFTER_IDLE_S = 2.0


def _ping_connections_back_from_idle(engine: Engine) -> None:
    """Ping a pooled connection before use only if it sat idle for PING_AFTER_IDLE_S, rather than
    on every checkout (SQLAlchemy's `pool_pre_ping`): under load a connection goes back out within
    milliseconds, and a ping is a round trip per request. One the server closed while it waited
    (a restart, an idle timeout) fails its ping and is replaced. One closed while it was in use
    fails that request, and the failure invalidates the whole pool (SQLAlchemy's disconnect
    handling), so the next requests get new connections."""

    @event.listens_for(engine, "checkin")
    def _idle_from(_dbapi_connection, record) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection, record, _proxy) -> None:
        idle_since = record.info.pop("idle_since", None)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_S:
            return  # new, or back from the pool at once
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            raise DisconnectionError(
                f"an idle pooled connection was closed: {error}"
            ) from error  # the pool retries


READING_METHODS = frozenset({"GET", "HEAD"})


class ReadingRequestWrites(InvalidRequestError):
    """A GET or HEAD request's session was asked to write."""


def init_app(app: Flask) -> None:
    app.extensions["db_engine"] = make_engine(app.config["DATABASE_URL"])
    # The same pool, its connections in autocommit while a reading request holds them.
    reading_engine = app.extensions["db_engine"].execution_options(isolation_level="AUTOCOMMIT")
    event.listen(reading_engine, "before_cursor_execute", _refuse_writes)
    app.extensions["db_reading_engine"] = reading_engine
    app.teardown_appcontext(close_db)


def engine() -> Engine:
    return current_app.extensions["db_engine"]


def get_db() -> Session:
    """The request's database session, opened on first use and closed at teardown: without a
    transaction, and refusing to write, for a GET or HEAD request (see the module's notes)."""
    if "db" not in g:
        if has_request_context() and request.method in READING_METHODS:
            g.db = Session(current_app.extensions["db_reading_engine"], expire_on_commit=False)
        else:
            g.db = Session(engine(), expire_on_commit=False)
    return g.db


def _refuse_writes(_connection, _cursor, statement, _parameters, context, _executemany) -> None:
    """Before each statement of a reading request: none may change a row (the ORM's flushes,
    Core's statements, and SQL written out as text alike)."""
    if context is not None and (context.isinsert or context.isupdate or context.isdelete):
        refused = statement.split(None, 1)[0]
    elif _written_out(context) and (found := _WRITING_SQL.search(statement)):
        refused = found.group(1).upper()
    else:
        return
    raise ReadingRequestWrites(
        f"a reading request (GET or HEAD) may not write: {refused} refused; "
        "write in db.writing_session()"
    )


# SQL that SQLAlchemy did not compile from a construct (text(), exec_driver_sql) says what it
# does only in its words: one that names a writing command anywhere is refused.
_WRITING_SQL = re.compile(
    r"\b(insert|update|delete|merge|truncate|copy|create|drop|alter|grant|revoke)\b", re.IGNORECASE
)


def _written_out(context) -> bool:
    compiled = getattr(context, "compiled", None)
    return compiled is None or isinstance(compiled.statement, TextClause)


@contextmanager
def writing_session() -> Iterator[Session]:
    """A transaction of its own, committed when the block ends (rolled back if it raises), for
    the writes of a request that otherwise only reads."""
    with Session(engine(), expire_on_commit=False) as db, db.begin():
        yield db


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


def alembic_config(database_url: str, portal_url: str | None = None):
    """Alembic's configuration to migrate as `database_url`'s role; with `portal_url` (the portal's
    own, another role) the migrations grant that role its rights (app/database_roles.py)."""
    from alembic.config import Config as AlembicConfig

    from app.database_roles import portal_role

    config = AlembicConfig(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    config.attributes["database_url"] = database_url
    config.attributes["portal_role"] = portal_role(portal_url, database_url) if portal_url else None
    return config


def upgrade_database(
    database_url: str, revision: str = "head", portal_url: str | None = None
) -> None:
    from alembic import command

    command.upgrade(alembic_config(database_url, portal_url), revision)
