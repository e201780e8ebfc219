"""Compare-and-set state changes, the one way Lakeport's workers and requests change a state.

A unit, an execution or a one-off job can be changed by two parties at once (the owner's
cancel and the worker's watcher, two workers after a lease changed hands). Each change is one
UPDATE that names the states it may start from: whichever comes first wins, and the loser
learns it (None) instead of overwriting a state it never saw, a final one least of all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from sqlalchemy import update
from sqlmodel import Session, SQLModel

from app.db import engine
from app.untrusted import fit_column

Row = TypeVar("Row", bound=SQLModel)
# What a change records to explain a state: fitted to its column here, whoever wrote it.
EXPLANATIONS = ("reason", "error")


def compare_and_set(
    model: type[Row],
    row_id: int,
    from_states: Iterable[str],
    *,
    where=None,
    then: Callable[[Session, Row], None] | None = None,
    **changes,
) -> Row | None:
    """Apply `changes` to row `row_id` only if its state is still one of `from_states` (and it
    matches `where`); `then(db, row)` runs in the same transaction, on the changed row. Returns
    the changed row (usable after the session), or None when another change came first."""
    for name in EXPLANATIONS:
        if isinstance(changes.get(name), str):
            where_said = f"{model.__tablename__} {row_id}'s {name}"
            changes[name] = fit_column(changes[name], model.__table__.c[name], where_said)
    with Session(engine(), expire_on_commit=False) as db:
        statement = update(model).where(model.id == row_id, model.state.in_(tuple(from_states)))
        if where is not None:
            statement = statement.where(where)
        # The changed row comes back with the UPDATE (PostgreSQL and SQLite both return it).
        row = db.exec(statement.values(**changes).returning(model)).scalars().first()
        if row is None:
            db.rollback()
            return None
        if then is not None:
            then(db, row)
        db.commit()
        return row


def set_fields(model: type[Row], row_id: int, **changes) -> None:
    """Write fields that are not a state (progress, a phase), whatever the state is."""
    with Session(engine()) as db:
        db.exec(update(model).where(model.id == row_id).values(**changes))
        db.commit()
