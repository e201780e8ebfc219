"""Two roles in Lakeport's PostgreSQL database: the owner, which migrates, and the portal's role.

The portal and its worker connect as the role named in `LAKEPORT_DATABASE_URL`; migrations run as
the owner (`LAKEPORT_DATABASE_OWNER_URL`), which owns every table. The portal's role may read and
write the rows it works with, only SELECT and INSERT the audit trail, and change no schema: no
DDL, no trigger switched off (that needs the table's owner), no `session_replication_role`
(superusers only), no grant to itself (it holds no grant option). So the audit trail cannot be
rewritten by the process that writes it, whatever runs in it.

`apply_portal_grants` is run by migration 0018 and again after every upgrade (`migrations/env.py`),
so a role named later, or a table added by a later migration, gets its grants without manual
steps; tables created later by the owner also get them from its default privileges.
SQLite has no roles: there the one database file is the whole story.
"""

from __future__ import annotations

import logging

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine, make_url

log = logging.getLogger(__name__)

# Rows the portal only ever adds: it may read and insert, never change or remove them.
APPEND_ONLY_TABLES = ("audit_events",)
# Rows only migrations write; the portal reads them.
READ_ONLY_TABLES = ("alembic_version",)
ROW_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE"


class PortalRoleRefused(RuntimeError):
    """The portal's role could get around its grants (superuser, member of the owner, owns tables)."""


def portal_role(portal_url: str, owner_url: str | None) -> str | None:
    """The role the portal connects as, to be granted its rights; None when one role does everything
    (no owner URL, or both URLs name the same user). Raises ValueError for URLs that cannot work."""
    if not owner_url:
        return None
    portal, owner = make_url(portal_url), make_url(owner_url)
    if portal.get_backend_name() != "postgresql" or owner.get_backend_name() != "postgresql":
        raise ValueError(
            "two database roles need PostgreSQL (SQLite has no roles): leave the owner URL empty"
        )
    # Hosts may differ (a connection pooler in front of the portal, say); the database may not.
    if portal.database != owner.database:
        raise ValueError("the portal's and the owner's URLs must name the same database")
    if not portal.username:
        raise ValueError(
            "the portal's URL must name its role (postgresql+psycopg://ROLE:PASSWORD@host/db)"
        )
    return None if portal.username == owner.username else portal.username


def apply_portal_grants(connection: Connection, role: str) -> None:
    """Grant `role` what the portal needs and nothing more, as the owner, in the migration's
    transaction; refuse a role that could get around its grants."""
    _refuse_unsafe_role(connection, role)
    quote = connection.dialect.identifier_preparer.quote
    who, database = (
        quote(role),
        quote(connection.execute(text("SELECT current_database()")).scalar_one()),
    )
    owns_database, owns_schema = connection.execute(
        text(
            "SELECT pg_has_role(current_user, d.datdba, 'USAGE'), pg_has_role(current_user, n.nspowner, 'USAGE') "
            "FROM pg_database d, pg_namespace n WHERE d.datname = current_database() AND n.nspname = 'public'"
        )
    ).one()
    statements = [
        f"GRANT CONNECT ON DATABASE {database} TO {who}",
        f"GRANT USAGE ON SCHEMA public TO {who}",
    ]
    if owns_schema:  # PostgreSQL 15+ gives PUBLIC no CREATE there; older versions did
        statements.append(f"REVOKE CREATE ON SCHEMA public FROM PUBLIC, {who}")
    if owns_database:  # temporary tables are DDL too, and the portal needs none
        statements.append(f"REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC, {who}")
    statements += [
        f"GRANT {ROW_PRIVILEGES} ON ALL TABLES IN SCHEMA public TO {who}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {who}",
        # Tables and sequences the owner creates later are the portal's to use at once.
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT {ROW_PRIVILEGES} ON TABLES TO {who}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {who}",
    ]
    existing = set(
        connection.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ).scalars()
    )
    for table in (name for name in APPEND_ONLY_TABLES if name in existing):
        statements.append(
            f"REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON {quote(table)} FROM PUBLIC, {who}"
        )
    for table in (name for name in READ_ONLY_TABLES if name in existing):
        statements.append(
            f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON {quote(table)} "
            f"FROM PUBLIC, {who}"
        )
    for statement in statements:
        connection.execute(text(statement))
    if connection.execute(
        text("SELECT has_schema_privilege(:role, 'public', 'CREATE')"), {"role": role}
    ).scalar():
        raise PortalRoleRefused(
            f"role {role} may create tables in schema public, and this owner cannot revoke "
            "it: revoke CREATE ON SCHEMA public from it and from PUBLIC as the schema's owner"
        )
    log.info(
        "database role %s may use the tables; it only reads and appends %s",
        role,
        ", ".join(APPEND_ONLY_TABLES),
    )


def audit_trail_exposure(engine: Engine) -> str | None:
    """Why the role `engine` connects as (the portal's) could rewrite the audit trail, if it could:
    a superuser, or the owner of the table (or a member of it). None on SQLite, which has no roles."""
    if engine.dialect.name != "postgresql":
        return None
    with engine.connect() as connection:
        user, superuser, owns = connection.execute(
            text(
                "SELECT current_user, r.rolsuper, pg_has_role(current_user, c.relowner, 'USAGE') "
                "FROM pg_roles r, pg_class c WHERE r.rolname = current_user AND c.oid = 'public.audit_events'::regclass"
            )
        ).one()
    if superuser or owns:
        what = "a superuser" if superuser else "the owner of the audit trail's table"
        return (
            f"the portal's database role {user} is {what}: it can switch the audit trail's triggers off. "
            "Run the portal as a role of its own and migrate with LAKEPORT_DATABASE_OWNER_URL (deploy/README.md)"
        )
    return None


def revoke_portal_grants(connection: Connection, role: str) -> None:
    """Undo `apply_portal_grants` (a downgrade): the role keeps nothing in this database's schema."""
    who = connection.dialect.identifier_preparer.quote(role)
    for statement in (
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON SEQUENCES FROM {who}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM {who}",
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {who}",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {who}",
        f"REVOKE ALL ON SCHEMA public FROM {who}",
    ):
        connection.execute(text(statement))


def _refuse_unsafe_role(connection: Connection, role: str) -> None:
    found = connection.execute(
        text(
            "SELECT r.rolsuper, r.rolcreaterole, r.rolname = current_user, pg_has_role(r.oid, current_user, 'MEMBER') "
            "FROM pg_roles r WHERE r.rolname = :role"
        ),
        {"role": role},
    ).first()
    if found is None:
        raise PortalRoleRefused(
            f"database role {role} (LAKEPORT_DATABASE_URL) does not exist: create it first "
            "(deploy/README.md, the database's two roles)"
        )
    superuser, creates_roles, is_owner, member_of_owner = found
    if superuser or creates_roles or is_owner or member_of_owner:
        # Any of these lets the portal undo its own limits: a superuser ignores grants, a role
        # that creates roles could join the owner (before PostgreSQL 16), a member acts as it.
        raise PortalRoleRefused(
            f"database role {role} must be neither a superuser, nor able to create roles, "
            "nor the owner or a member of it: the audit trail would not be safe from it"
        )
    owned = (
        connection.execute(
            text(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = :role)"
            ),
            {"role": role},
        )
        .scalars()
        .all()
    )
    if owned:
        raise PortalRoleRefused(
            f"database role {role} owns {', '.join(sorted(owned)[:5])}: an owner may alter, "
            f"disable triggers on and drop its tables; give them to the migrating role "
            f"(REASSIGN OWNED BY {role} TO <owner>)"
        )
