"""identity re-validated: when the provider last confirmed a user's groups, the sealed refresh
token of their last sign-in, and when the provider last refused them

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28 12:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch_op:
        # Left empty for existing users: groups nobody confirmed count as none until the next sign-in.
        batch_op.add_column(
            sa.Column("groups_checked_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("refresh_token_sealed", sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("suspended_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("users") as batch_op:
        batch_op.drop_column("suspended_at")
        batch_op.drop_column("refresh_token_sealed")
        batch_op.drop_column("groups_checked_at")
