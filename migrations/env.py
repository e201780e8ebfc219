"""Alembic environment: Lakeport's SQLModel metadata, the URL from the portal's configuration."""

from logging.config import fileConfig

from alembic import context
from alembic.script import ScriptDirectory
from sqlmodel import SQLModel

import app.models  # noqa: F401  (registers every table on SQLModel.metadata)
from app.config import Config
from app.database_roles import apply_portal_grants
from app.database_roles import portal_role as portal_role_of
from app.db import make_engine

config = context.config
if config.config_file_name is not None and not config.attributes.get("database_url"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = SQLModel.metadata


def database_url() -> str:
    """The owner's URL when one is set (it migrates), else the one URL of a single-role database."""
    if config.attributes.get("database_url"):
        return config.attributes["database_url"]
    settings = Config.from_env()
    return settings.DATABASE_OWNER_URL or settings.DATABASE_URL


def portal_role() -> str | None:
    """The portal's role, to be granted its rights; None where one role does everything."""
    if "database_url" in config.attributes:
        return config.attributes.get("portal_role")
    settings = Config.from_env()
    return portal_role_of(settings.DATABASE_URL, settings.DATABASE_OWNER_URL)


config.attributes["portal_role"] = portal_role()
# From this revision on the portal's role has grants of its own (app/database_roles.py).
GRANTS_SINCE = "0018"


def grant_portal_role_again(connection) -> None:
    """After every upgrade, the portal's role gets its grants again (in the migration's
    transaction): a role named since, or a table a later migration added, needs no manual step."""
    role = config.attributes["portal_role"]
    if not role or connection.dialect.name != "postgresql":
        return
    heads = context.get_context().get_current_heads()
    script = ScriptDirectory.from_config(config)
    if any(
        revision.revision == GRANTS_SINCE
        for head in heads
        for revision in script.iterate_revisions(head, "base")
    ):
        apply_portal_grants(connection, role)


def run_migrations_offline() -> None:
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(database_url())
    with engine.connect() as connection:
        # Batch mode lets ALTER TABLE migrations run on SQLite too.
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True
        )
        with context.begin_transaction():
            context.run_migrations()
            grant_portal_role_again(connection)
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
