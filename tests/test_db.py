"""The request's database session (app/db.py): a reading request (GET, HEAD) reads without a
transaction and writes nothing; other requests, and `writing_session()`, write in transactions."""

from __future__ import annotations

import pytest
from psycopg.pq import TransactionStatus
from sqlalchemy import insert, text, update
from sqlmodel import Session, select

from app.db import ReadingRequestWrites, get_db, writing_session
from app.models import User
from tests.factories import make_user


def transaction_status(db: Session) -> TransactionStatus:
    """What PostgreSQL says of the session's connection: in a transaction or idle."""
    return db.connection().connection.driver_connection.info.transaction_status


def subjects(db_engine) -> set[str]:
    with Session(db_engine) as db:
        return set(db.exec(select(User.subject)))


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_reading_request_reads_outside_any_transaction_and_refuses_every_write(
    app, db_engine, method
):
    someone = make_user(db_engine)
    with app.test_request_context("/", method=method):
        db = get_db()
        assert db.get(User, someone.id).subject == someone.subject
        # No BEGIN was sent: PostgreSQL sees the connection idle after the read.
        assert transaction_status(db) == TransactionStatus.IDLE

        db.add(
            User(
                issuer="https://tests.invalid",
                subject="written-by-a-get",
                name="x",
                email="x@example.test",
            )
        )
        with pytest.raises(ReadingRequestWrites, match="INSERT refused"):
            db.flush()
        db.rollback()
        with pytest.raises(ReadingRequestWrites, match="UPDATE refused"):
            db.exec(update(User).where(User.id == someone.id).values(name="renamed by a GET"))
        with pytest.raises(ReadingRequestWrites, match="INSERT refused"):
            db.exec(
                insert(User).values(
                    issuer="https://tests.invalid",
                    subject="core-insert-by-a-get",
                    name="y",
                    email="y@example.test",
                )
            )
        # SQL written out as text says what it does only in its words, and is read for them.
        assert (
            db.execute(
                text("SELECT count(*) FROM users WHERE id = :id"), {"id": someone.id}
            ).scalar()
            == 1
        )
        with pytest.raises(ReadingRequestWrites, match="UPDATE refused"):
            db.execute(
                text("update users SET name = 'renamed by text' WHERE id = :id"), {"id": someone.id}
            )
        with pytest.raises(ReadingRequestWrites, match="DELETE refused"):
            db.connection().exec_driver_sql(
                "WITH gone AS (DELETE FROM users WHERE id = %(id)s RETURNING id) "
                "SELECT count(*) FROM gone",
                {"id": someone.id},
            )
    assert not {"written-by-a-get", "core-insert-by-a-get"} & subjects(db_engine)
    with Session(db_engine) as db:
        assert db.get(User, someone.id).name == someone.name


def test_other_requests_write_in_a_transaction_of_their_own(app, db_engine):
    with app.test_request_context("/", method="POST"):
        db = get_db()
        db.add(
            User(
                issuer="https://tests.invalid",
                subject="written-by-a-post",
                name="p",
                email="p@example.test",
            )
        )
        db.flush()
        assert transaction_status(db) == TransactionStatus.INTRANS
        assert "written-by-a-post" not in subjects(db_engine)  # not before its commit
        db.commit()
    assert "written-by-a-post" in subjects(db_engine)


def test_a_reading_request_writes_through_writing_session_all_or_nothing(app, db_engine):
    with app.test_request_context("/", method="GET"):
        with writing_session() as db:
            db.add(
                User(
                    issuer="https://tests.invalid",
                    subject="kept-by-a-get",
                    name="k",
                    email="k@example.test",
                )
            )
        with pytest.raises(RuntimeError), writing_session() as db:
            db.add(
                User(
                    issuer="https://tests.invalid",
                    subject="dropped-by-a-get",
                    name="d",
                    email="d@example.test",
                )
            )
            db.flush()
            raise RuntimeError("the write fails halfway")
    written = subjects(db_engine)
    assert "kept-by-a-get" in written and "dropped-by-a-get" not in written


def test_a_signed_in_poll_reads_without_a_transaction(client, db_engine, app):
    """The hot path: a signed-in page's poll loads its user and row and leaves PostgreSQL with no
    transaction begun or rolled back."""
    from tests.factories import sign_in_as

    someone = make_user(db_engine)
    sign_in_as(client, someone)
    seen = []

    @app.after_request
    def remember_status(response):
        seen.append(transaction_status(get_db()))
        return response

    assert client.get("/compute-units/", headers={"HX-Request": "true"}).status_code == 200
    assert seen == [TransactionStatus.IDLE]


def test_a_pooled_connection_is_pinged_only_after_waiting_and_replaced_if_the_server_closed_it(
    database_url, db_engine, monkeypatch
):
    from sqlalchemy import text

    from app import db as db_module
    from app.db import make_engine

    engine = make_engine(database_url)
    real_ping, pings = engine.dialect.do_ping, []
    monkeypatch.setattr(
        engine.dialect, "do_ping", lambda connection: pings.append(1) or real_ping(connection)
    )
    backend_pid = text("SELECT pg_backend_pid()")
    try:
        with engine.connect() as connection:
            first = connection.execute(backend_pid).scalar()
        with (
            engine.connect() as connection
        ):  # back from the pool at once: the same one, no round trip to ping
            assert connection.execute(backend_pid).scalar() == first
        assert pings == []

        with db_engine.connect() as other:  # the server closes it while it waits in the pool
            assert other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first}).scalar()
        monkeypatch.setattr(db_module, "PING_AFTER_IDLE_S", 0.0)
        with engine.connect() as connection:
            assert (
                connection.execute(backend_pid).scalar() != first
            )  # pinged, found closed, replaced
        assert len(pings) >= 1
    finally:
        engine.dispose()
