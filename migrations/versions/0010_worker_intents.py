"""the worker carries out what requests used to wait for: a warehouse's catalog step once its
runs have stopped, the differing rows of a comparison, and the check of a unit's cluster that
its pages show

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 03:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


# Intents the worker is told of at once on PostgreSQL (migration 0009): table → columns whose
# change announces work.
ANNOUNCED = {
    "comparison_jobs": "state",
    "executions_cancel": "cancel_requested_at",
    "warehouses": "closing",
}


def _table(trigger: str) -> str:
    return trigger.removesuffix("_cancel")


def upgrade() -> None:
    with op.batch_alter_table("compute_units") as batch:
        batch.add_column(
            sa.Column(
                "cluster_status",
                sqlmodel.sql.sqltypes.AutoString(),
                nullable=False,
                server_default="",
            )
        )
        batch.add_column(
            sa.Column("cluster_checked_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
    with op.batch_alter_table("warehouses") as batch:
        batch.add_column(
            sa.Column(
                "closing",
                sqlmodel.sql.sqltypes.AutoString(length=16),
                nullable=False,
                server_default="",
            )
        )
        batch.add_column(
            sa.Column("closing_due_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
        batch.add_column(
            sa.Column(
                "closing_error",
                sqlmodel.sql.sqltypes.AutoString(length=2000),
                nullable=False,
                server_default="",
            )
        )
    op.create_table(
        "comparison_jobs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column(
            "a_id", sa.Integer(), sa.ForeignKey("executions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "b_id", sa.Integer(), sa.ForeignKey("executions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("result", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("error", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("ended_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    )
    op.create_index("ix_comparison_jobs_owner_id", "comparison_jobs", ["owner_id"])
    op.create_index("ix_comparison_jobs_a_id", "comparison_jobs", ["a_id"])
    if op.get_bind().dialect.name == "postgresql":
        for trigger, column in ANNOUNCED.items():
            op.execute(
                f"CREATE TRIGGER {trigger}_announce_intent AFTER INSERT OR UPDATE OF {column} "
                f"ON {_table(trigger)} FOR EACH STATEMENT EXECUTE FUNCTION lakeport_announce_work()"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for trigger in ANNOUNCED:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}_announce_intent ON {_table(trigger)}")
    op.drop_index("ix_comparison_jobs_a_id", "comparison_jobs")
    op.drop_index("ix_comparison_jobs_owner_id", "comparison_jobs")
    op.drop_table("comparison_jobs")
    with op.batch_alter_table("warehouses") as batch:
        batch.drop_column("closing_error")
        batch.drop_column("closing_due_at")
        batch.drop_column("closing")
    with op.batch_alter_table("compute_units") as batch:
        batch.drop_column("cluster_checked_at")
        batch.drop_column("cluster_status")
