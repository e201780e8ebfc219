"""catalog grants reconciled: when each warehouse's grants in Lakekeeper were last checked and agreed,
and the groups each user's role memberships were last synced for

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28 11:30:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("warehouses") as batch_op:
        batch_op.add_column(
            sa.Column("grants_checked_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("grants_agreed_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column(
                "grants_repair",
                sqlmodel.sql.sqltypes.AutoString(length=2000),
                nullable=False,
                server_default="",
            )
        )
        batch_op.add_column(
            sa.Column(
                "grants_error",
                sqlmodel.sql.sqltypes.AutoString(length=2000),
                nullable=False,
                server_default="",
            )
        )
        batch_op.add_column(
            sa.Column("grants_due_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
        batch_op.create_index("ix_warehouses_grants_due_at", ["grants_due_at"])
    with op.batch_alter_table("users") as batch_op:
        batch_op.add_column(
            sa.Column(
                "catalog_groups",
                sqlmodel.sql.sqltypes.AutoString(),
                nullable=False,
                server_default="[]",
            )
        )
    # Until now every sign-in synced every role's membership: the groups then are the groups synced.
    op.execute("UPDATE users SET catalog_groups = groups")


def downgrade() -> None:
    with op.batch_alter_table("users") as batch_op:
        batch_op.drop_column("catalog_groups")
    with op.batch_alter_table("warehouses") as batch_op:
        batch_op.drop_index("ix_warehouses_grants_due_at")
        batch_op.drop_column("grants_due_at")
        batch_op.drop_column("grants_error")
        batch_op.drop_column("grants_repair")
        batch_op.drop_column("grants_agreed_at")
        batch_op.drop_column("grants_checked_at")
