"""Alembic migrations build the schema the models describe, on SQLite and on PostgreSQL."""

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlmodel import SQLModel

import app.models  # noqa: F401
from app.db import alembic_config, make_engine, upgrade_database
from devstack.database import drop_postgres_database, fresh_postgres_database


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrate.db'}"
        return
    name, url = fresh_postgres_database("lakeport_migrate")
    yield url
    drop_postgres_database(name)


def test_upgrade_head_matches_models(empty_database_url):
    upgrade_database(empty_database_url)
    engine = make_engine(empty_database_url)
    try:
        with engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
        assert diff == [], f"models and migrations differ: {diff}"
        assert "users" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_downgrade_to_base_and_up_again(empty_database_url):
    config = alembic_config(empty_database_url)
    command.upgrade(config, "head")
    command.downgrade(config, "base")
    engine = make_engine(empty_database_url)
    try:
        assert "users" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    command.upgrade(config, "head")
