"""users' groups from the identity provider; the audit trail, append-only (the database refuses UPDATE and DELETE)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 06:40:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

REFUSAL = "audit_events is append-only"


def upgrade() -> None:
    with op.batch_alter_table("users") as batch_op:
        batch_op.add_column(
            sa.Column(
                "groups", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default="[]"
            )
        )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("actor_id", sa.Integer(), nullable=True),
        sa.Column("actor_name", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("action", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("object_type", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("object_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("detail", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
        sa.Column("ip", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("user_agent", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
    )
    for column in ("at", "actor_id", "action", "owner_id"):
        op.create_index(f"ix_audit_events_{column}", "audit_events", [column])
    # Append-only, whoever connects: a trigger refuses every UPDATE and DELETE of a row.
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"""CREATE FUNCTION audit_events_append_only() RETURNS trigger AS $$
            BEGIN RAISE EXCEPTION '{REFUSAL}'; END; $$ LANGUAGE plpgsql""")
        op.execute("""CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
            FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()""")
        op.execute("""CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
            FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only()""")
    else:
        for event in ("UPDATE", "DELETE"):
            op.execute(f"""CREATE TRIGGER audit_events_no_{event.lower()} BEFORE {event} ON audit_events
                BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END""")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_events_no_truncate ON audit_events")
        op.execute("DROP TRIGGER audit_events_append_only ON audit_events")
        op.execute("DROP FUNCTION audit_events_append_only()")
    for column in ("at", "actor_id", "action", "owner_id"):
        op.drop_index(f"ix_audit_events_{column}", "audit_events")
    op.drop_table("audit_events")
    with op.batch_alter_table("users") as batch_op:
        batch_op.drop_column("groups")
