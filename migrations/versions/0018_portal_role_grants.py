"""the portal's own database role: rows to read and write, the audit trail only to read and append, no schema

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28 12:00:00

On PostgreSQL, when the migration runs as the owner (LAKEPORT_DATABASE_OWNER_URL) and the portal
connects as another role (LAKEPORT_DATABASE_URL), that role gets its grants here: app/database_roles.py
says which and why. migrations/env.py applies them again after every later upgrade. SQLite has no
roles: nothing changes there, nor where one role does everything.
"""

from alembic import context, op

from app.database_roles import apply_portal_grants, revoke_portal_grants

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _portal_role() -> str | None:
    if op.get_bind().dialect.name != "postgresql":
        return None
    return context.config.attributes.get("portal_role")


def upgrade() -> None:
    if role := _portal_role():
        apply_portal_grants(op.get_bind(), role)


def downgrade() -> None:
    if role := _portal_role():
        revoke_portal_grants(op.get_bind(), role)
