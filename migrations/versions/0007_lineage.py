"""lineage of executions and re-runs pinned to their inputs' snapshots

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 05:40:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.add_column(
            sa.Column(
                "lineage", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default="{}"
            )
        )
        batch.add_column(
            sa.Column(
                "pinned_to", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default="{}"
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("pinned_to")
        batch.drop_column("lineage")
