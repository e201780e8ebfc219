"""ended compute units their owner cleared from the list

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 08:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compute_units") as batch:
        batch.add_column(
            sa.Column("cleared_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("compute_units") as batch:
        batch.drop_column("cleared_at")
