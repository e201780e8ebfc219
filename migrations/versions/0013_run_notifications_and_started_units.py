"""a schedule may start its unit for a run and stop it after; a user may ask to be told when one execution ends

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 06:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

NOTIFY_COLUMNS = (
    ("notify_on", 8),
    ("webhook_url", 1000),
    ("webhook_nonce", 32),
    ("notify_email", 320),
)


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch_op:
        batch_op.add_column(
            sa.Column("start_unit", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("scheduled_runs") as batch_op:
        batch_op.add_column(sa.Column("started_unit_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            "fk_scheduled_runs_started_unit_id",
            "compute_units",
            ["started_unit_id"],
            ["id"],
            ondelete="SET NULL",
        )
    with op.batch_alter_table("executions") as batch_op:
        for name, length in NOTIFY_COLUMNS:
            batch_op.add_column(
                sa.Column(
                    name,
                    sqlmodel.sql.sqltypes.AutoString(length=length),
                    nullable=False,
                    server_default="",
                )
            )
    with op.batch_alter_table("notifications") as batch_op:
        batch_op.alter_column("schedule_id", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM notifications WHERE schedule_id IS NULL")
    with op.batch_alter_table("notifications") as batch_op:
        batch_op.alter_column("schedule_id", existing_type=sa.Integer(), nullable=False)
    with op.batch_alter_table("executions") as batch_op:
        for name, _ in NOTIFY_COLUMNS:
            batch_op.drop_column(name)
    with op.batch_alter_table("scheduled_runs") as batch_op:
        batch_op.drop_constraint("fk_scheduled_runs_started_unit_id", type_="foreignkey")
        batch_op.drop_column("started_unit_id")
    with op.batch_alter_table("schedules") as batch_op:
        batch_op.drop_column("start_unit")
