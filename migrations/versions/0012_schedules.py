"""schedules: a workflow run on a cron schedule; each due time handled once; notifications of a run's end

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 03:45:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column(
            "workflow_id",
            sa.Integer(),
            sa.ForeignKey("workflows.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("cron", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("timezone", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column(
            "compute_unit_id",
            sa.Integer(),
            sa.ForeignKey("compute_units.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column(
            "warehouse_id",
            sa.Integer(),
            sa.ForeignKey("warehouses.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("catch_up", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("retry_backoff_seconds", sa.Integer(), nullable=False),
        sa.Column("timeout_minutes", sa.Integer(), nullable=False),
        sa.Column("max_running", sa.Integer(), nullable=False),
        sa.Column("notify_on", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("webhook_url", sqlmodel.sql.sqltypes.AutoString(length=1000), nullable=False),
        sa.Column("webhook_nonce", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("notify_email", sqlmodel.sql.sqltypes.AutoString(length=320), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("handled_until", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    )
    op.create_index("ix_schedules_owner_id", "schedules", ["owner_id"])
    op.create_index("ix_schedules_workflow_id", "schedules", ["workflow_id"])
    op.create_table(
        "scheduled_runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "schedule_id",
            sa.Integer(),
            sa.ForeignKey("schedules.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("due_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("outcome", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column(
            "execution_id",
            sa.Integer(),
            sa.ForeignKey("executions.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.UniqueConstraint("schedule_id", "due_at", "attempt", name="uq_scheduled_runs_due"),
    )
    op.create_index("ix_scheduled_runs_schedule_id", "scheduled_runs", ["schedule_id"])
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "schedule_id",
            sa.Integer(),
            sa.ForeignKey("schedules.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "execution_id",
            sa.Integer(),
            sa.ForeignKey("executions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("channel", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("last_error", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.UniqueConstraint("execution_id", "channel", name="uq_notifications_execution_channel"),
    )
    op.create_index("ix_notifications_schedule_id", "notifications", ["schedule_id"])


def downgrade() -> None:
    op.drop_index("ix_notifications_schedule_id", "notifications")
    op.drop_table("notifications")
    op.drop_index("ix_scheduled_runs_schedule_id", "scheduled_runs")
    op.drop_table("scheduled_runs")
    op.drop_index("ix_schedules_workflow_id", "schedules")
    op.drop_index("ix_schedules_owner_id", "schedules")
    op.drop_table("schedules")
