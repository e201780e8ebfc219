"""warehouses and workflows shared with users and groups; the Lakekeeper role of each shared group

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25 07:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


SHARED = (("warehouse", "warehouses"), ("workflow", "workflows"))


def upgrade() -> None:
    for thing, table in SHARED:
        op.create_table(
            f"{thing}_shares",
            sa.Column("id", sa.Integer(), primary_key=True),
            sa.Column(
                f"{thing}_id",
                sa.Integer(),
                sa.ForeignKey(f"{table}.id", ondelete="CASCADE"),
                nullable=False,
            ),
            sa.Column(
                "user_id",
                sa.Integer(),
                sa.ForeignKey("users.id", ondelete="CASCADE"),
                nullable=True,
            ),
            sa.Column("group_name", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True),
            sa.Column("level", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
            sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
            sa.UniqueConstraint(f"{thing}_id", "user_id", name=f"uq_{thing}_shares_user"),
            sa.UniqueConstraint(f"{thing}_id", "group_name", name=f"uq_{thing}_shares_group"),
        )
        for column in (f"{thing}_id", "user_id", "group_name"):
            op.create_index(f"ix_{thing}_shares_{column}", f"{thing}_shares", [column])
    op.create_table(
        "group_roles",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("group_name", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column(
            "lakekeeper_role_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False
        ),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.UniqueConstraint("group_name"),
    )


def downgrade() -> None:
    op.drop_table("group_roles")
    for thing, _ in SHARED:
        for column in (f"{thing}_id", "user_id", "group_name"):
            op.drop_index(f"ix_{thing}_shares_{column}", f"{thing}_shares")
        op.drop_table(f"{thing}_shares")
