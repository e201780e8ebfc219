"""personal access tokens, API rate-limit windows and idempotent execution starts

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 03:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("scope", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("token_sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("prefix", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("expires_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("last_used_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("revoked_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    )
    op.create_index("ix_api_tokens_owner_id", "api_tokens", ["owner_id"])
    op.create_index("ix_api_tokens_token_sha256", "api_tokens", ["token_sha256"], unique=True)
    op.create_table(
        "api_rate_windows",
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("window_start", sa.Integer(), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", "window_start"),
    )
    with op.batch_alter_table("executions") as batch:
        batch.add_column(
            sa.Column(
                "idempotency_key", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True
            )
        )
        batch.create_unique_constraint(
            "uq_executions_owner_idempotency_key", ["owner_id", "idempotency_key"]
        )


def downgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.drop_constraint("uq_executions_owner_idempotency_key", type_="unique")
        batch.drop_column("idempotency_key")
    op.drop_table("api_rate_windows")
    op.drop_index("ix_api_tokens_token_sha256", "api_tokens")
    op.drop_index("ix_api_tokens_owner_id", "api_tokens")
    op.drop_table("api_tokens")
