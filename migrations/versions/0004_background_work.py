"""background work: leases, sample-data jobs, cancel requests

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 04:50:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

LIVE_JOB = sa.text("state IN ('queued', 'running')")


def upgrade() -> None:
    op.create_table(
        "work_leases",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("holder", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("expires_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "sample_data_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("warehouse_id", sa.Integer(), nullable=False),
        sa.Column("scale_factor", sa.Float(), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("step", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("table_rows", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("error", sqlmodel.sql.sqltypes.AutoString(length=1000), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("started_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("ended_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
        ),
        sa.ForeignKeyConstraint(["warehouse_id"], ["warehouses.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("sample_data_jobs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_sample_data_jobs_owner_id"), ["owner_id"], unique=False
        )
        batch_op.create_index(
            "uq_sample_data_jobs_live_warehouse",
            ["warehouse_id"],
            unique=True,
            postgresql_where=LIVE_JOB,
            sqlite_where=LIVE_JOB,
        )
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("cancel_requested_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_column("cancel_requested_at")
    with op.batch_alter_table("sample_data_jobs", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_sample_data_jobs_live_warehouse", postgresql_where=LIVE_JOB, sqlite_where=LIVE_JOB
        )
        batch_op.drop_index(batch_op.f("ix_sample_data_jobs_owner_id"))
    op.drop_table("sample_data_jobs")
    op.drop_table("work_leases")
