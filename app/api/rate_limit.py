"""Rate limits of the API, per token and per user: at most API_CALLS_PER_MINUTE calls a minute
each (a user's tokens share the user's count). Windows are rows (`api_rate_windows`), counted
with one upsert, so every web process shares them; old windows are dropped as new ones start.
Over a limit the call answers 429 with `Retry-After`."""

from __future__ import annotations

import time

from flask import current_app
from sqlalchemy import delete
from sqlalchemy.dialects import postgresql, sqlite

from app.api.problems import ApiProblem
from app.db import writing_session
from app.models import ApiRateWindow

WINDOW_SECONDS = 60


def count(keys: list[str]) -> None:
    """Count this call against each key ("token:7", "user:3"); raises a 429 problem once a limit
    is passed."""
    limit = current_app.config["API_CALLS_PER_MINUTE"]
    now = time.time()
    window = int(now // WINDOW_SECONDS) * WINDOW_SECONDS
    over = False
    with writing_session() as db:  # its own transaction: a GET's own session reads only
        insert = postgresql.insert if db.get_bind().dialect.name == "postgresql" else sqlite.insert
        for key in keys:
            statement = insert(ApiRateWindow).values(key=key, window_start=window, calls=1)
            statement = statement.on_conflict_do_update(
                index_elements=["key", "window_start"], set_={"calls": ApiRateWindow.calls + 1}
            )
            db.exec(statement)
            calls = db.get(ApiRateWindow, (key, window), populate_existing=True).calls
            over = over or calls > limit
            if calls == 1:  # the first call of a window: the windows before it are done with
                db.exec(
                    delete(ApiRateWindow).where(
                        ApiRateWindow.key == key, ApiRateWindow.window_start < window
                    )
                )
    if over:
        retry_after = max(1, int(window + WINDOW_SECONDS - now) + 1)
        raise ApiProblem(
            429,
            f"Over {limit} calls a minute: try again in {retry_after} s.",
            headers={"Retry-After": str(retry_after)},
        )
