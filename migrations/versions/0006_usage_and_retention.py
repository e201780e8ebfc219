"""usage and retention: execution usage, storage samples, retention policies and log, maintenance jobs

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 05:40:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("outputs_expired_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("stats_expired_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
    op.create_table(
        "execution_usage",
        sa.Column("execution_id", sa.Integer(), nullable=False),
        sa.Column("results_bytes", sa.BigInteger(), nullable=False),
        sa.Column("results_files", sa.Integer(), nullable=False),
        sa.Column("logs_bytes", sa.BigInteger(), nullable=False),
        sa.Column("logs_files", sa.Integer(), nullable=False),
        sa.Column("measured_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["execution_id"], ["executions.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("execution_id"),
    )
    op.create_table(
        "storage_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("warehouse_id", sa.Integer(), nullable=False),
        sa.Column("namespace", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("tables", sa.Integer(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("measured_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["warehouse_id"], ["warehouses.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("storage_samples", schema=None) as batch_op:
        batch_op.create_index(
            "ix_storage_samples_warehouse_measured", ["warehouse_id", "measured_at"], unique=False
        )
    op.create_table(
        "retention_policies",
        sa.Column("warehouse_id", sa.Integer(), nullable=False),
        sa.Column("results_mode", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("results_value", sa.Integer(), nullable=False),
        sa.Column("logs_days", sa.Integer(), nullable=True),
        sa.Column("snapshots_retain_last", sa.Integer(), nullable=True),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["warehouse_id"], ["warehouses.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("warehouse_id"),
    )
    op.create_table(
        "retention_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("warehouse_id", sa.Integer(), nullable=False),
        sa.Column("at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("tables", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("message", sqlmodel.sql.sqltypes.AutoString(length=4000), nullable=False),
        sa.ForeignKeyConstraint(["warehouse_id"], ["warehouses.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("retention_log", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_retention_log_warehouse_id"), ["warehouse_id"], unique=False
        )
    op.create_table(
        "maintenance_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("warehouse_id", sa.Integer(), nullable=False),
        sa.Column("compute_unit_id", sa.Integer(), nullable=True),
        sa.Column("retain_last", sa.Integer(), nullable=False),
        sa.Column("remove_orphans", sa.Boolean(), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("result", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("error", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("ended_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["compute_unit_id"], ["compute_units.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
        ),
        sa.ForeignKeyConstraint(["warehouse_id"], ["warehouses.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("maintenance_jobs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_maintenance_jobs_owner_id"), ["owner_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_maintenance_jobs_warehouse_id"), ["warehouse_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("maintenance_jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_maintenance_jobs_warehouse_id"))
        batch_op.drop_index(batch_op.f("ix_maintenance_jobs_owner_id"))
    op.drop_table("maintenance_jobs")
    with op.batch_alter_table("retention_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_retention_log_warehouse_id"))
    op.drop_table("retention_log")
    op.drop_table("retention_policies")
    with op.batch_alter_table("storage_samples", schema=None) as batch_op:
        batch_op.drop_index("ix_storage_samples_warehouse_measured")
    op.drop_table("storage_samples")
    op.drop_table("execution_usage")
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_column("stats_expired_at")
        batch_op.drop_column("outputs_expired_at")
