"""warm standby units: a unit may belong to no one while it waits in the pool, until a user's create claims it

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 10:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compute_units") as batch_op:
        batch_op.alter_column("owner_id", existing_type=sa.Integer(), nullable=True)
        batch_op.add_column(
            sa.Column("pooled_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("claimed_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("spark_ready_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
        batch_op.create_index("ix_compute_units_pooled_at", ["pooled_at"])


def downgrade() -> None:
    # Units that never had an owner cannot be kept once every unit must have one.
    op.execute(
        "DELETE FROM compute_unit_events WHERE compute_unit_id IN "
        "(SELECT id FROM compute_units WHERE owner_id IS NULL)"
    )
    op.execute("DELETE FROM compute_units WHERE owner_id IS NULL")
    with op.batch_alter_table("compute_units") as batch_op:
        batch_op.drop_index("ix_compute_units_pooled_at")
        batch_op.drop_column("spark_ready_at")
        batch_op.drop_column("claimed_at")
        batch_op.drop_column("pooled_at")
        batch_op.alter_column("owner_id", existing_type=sa.Integer(), nullable=False)
