"""maintenance on a unit started for it: a table policy's `start_unit`, a job's `started_unit`

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29 01:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("table_policies", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("start_unit", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("maintenance_jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("started_unit", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("maintenance_jobs", schema=None) as batch_op:
        batch_op.drop_column("started_unit")
    with op.batch_alter_table("table_policies", schema=None) as batch_op:
        batch_op.drop_column("start_unit")
