"""the SQL console's queries: one row per statement a user ran, its state and bounded result

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28 15:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column(
            "warehouse_id",
            sa.Integer(),
            sa.ForeignKey("warehouses.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("warehouse_name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column(
            "compute_unit_id",
            sa.Integer(),
            sa.ForeignKey("compute_units.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("compute_unit_name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("sql", sqlmodel.sql.sqltypes.AutoString(length=100000), nullable=False),
        sa.Column("mode", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("statement", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("error", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("started_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("ended_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("cancel_requested_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("row_count", sa.Integer(), nullable=True),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("result", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("snapshots", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    )
    op.create_index("ix_queries_owner_id", "queries", ["owner_id"])
    op.create_index("ix_queries_warehouse_id", "queries", ["warehouse_id"])
    op.create_index("ix_queries_state", "queries", ["state"])
    if op.get_bind().dialect.name == "postgresql":
        # The worker hears of a new query, and of a cancel, at once (migration 0009).
        op.execute(
            "CREATE TRIGGER queries_announce_intent AFTER INSERT OR UPDATE OF state, "
            "cancel_requested_at ON queries FOR EACH STATEMENT EXECUTE FUNCTION "
            "lakeport_announce_work()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS queries_announce_intent ON queries")
    op.drop_index("ix_queries_state", "queries")
    op.drop_index("ix_queries_warehouse_id", "queries")
    op.drop_index("ix_queries_owner_id", "queries")
    op.drop_table("queries")
