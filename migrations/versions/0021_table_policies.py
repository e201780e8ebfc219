"""table policies: how a table is kept healthy; maintenance jobs of one table (compaction, expiry)

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28 18:30:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def job_columns() -> list[sa.Column]:
    """The columns a table's maintenance job adds to maintenance_jobs (new objects per call)."""
    return [
        sa.Column("table_name", sqlmodel.sql.sqltypes.AutoString(length=512), nullable=True),
        sa.Column("compact", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("expire_before", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("data_files_before", sa.Integer(), nullable=True),
        sa.Column("data_files_after", sa.Integer(), nullable=True),
        sa.Column("gb_hours", sa.Float(), nullable=True),
        sa.Column("started_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column(
            "skipped",
            sqlmodel.sql.sqltypes.AutoString(length=500),
            nullable=False,
            server_default="",
        ),
    ]


def upgrade() -> None:
    op.create_table(
        "table_policies",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "warehouse_id",
            sa.Integer(),
            sa.ForeignKey("warehouses.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("table_name", sqlmodel.sql.sqltypes.AutoString(length=512), nullable=False),
        sa.Column("small_file_mb", sa.Integer(), nullable=False),
        sa.Column("compact_small_files", sa.Integer(), nullable=True),
        sa.Column("expire_days", sa.Integer(), nullable=True),
        sa.Column(
            "updated_by",
            sa.Integer(),
            sa.ForeignKey("users.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.UniqueConstraint("warehouse_id", "table_name", name="uq_table_policies_table"),
    )
    op.create_index("ix_table_policies_warehouse_id", "table_policies", ["warehouse_id"])
    with op.batch_alter_table("maintenance_jobs", schema=None) as batch_op:
        for column in job_columns():
            batch_op.add_column(column)


def downgrade() -> None:
    with op.batch_alter_table("maintenance_jobs", schema=None) as batch_op:
        for column in reversed(job_columns()):
            batch_op.drop_column(column.name)
    op.drop_index("ix_table_policies_warehouse_id", "table_policies")
    op.drop_table("table_policies")
