"""compute units attach to operator-listed Ray clusters, one Spark host port each

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 04:50:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

LIVE_STATES_SQL = "state IN ('PENDING', 'STARTING', 'RUNNING', 'TERMINATING')"


def upgrade() -> None:
    with op.batch_alter_table("compute_units", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "ray_cluster",
                sqlmodel.sql.sqltypes.AutoString(length=64),
                nullable=False,
                server_default="",
            )
        )
        batch_op.add_column(sa.Column("spark_host_port", sa.Integer(), nullable=True))
        # Units attached by a typed address cannot be matched to a listed cluster: they keep no address.
        batch_op.drop_column("address")
    with op.batch_alter_table("compute_units", schema=None) as batch_op:
        batch_op.alter_column("ray_cluster", server_default=None)
        batch_op.create_index(
            "uq_compute_units_live_spark_host_port",
            ["ray_cluster", "spark_host_port"],
            unique=True,
            sqlite_where=sa.text(LIVE_STATES_SQL),
            postgresql_where=sa.text(LIVE_STATES_SQL),
        )


def downgrade() -> None:
    with op.batch_alter_table("compute_units", schema=None) as batch_op:
        batch_op.drop_index("uq_compute_units_live_spark_host_port")
        batch_op.add_column(
            sa.Column(
                "address",
                sqlmodel.sql.sqltypes.AutoString(length=512),
                nullable=False,
                server_default="",
            )
        )
        batch_op.drop_column("spark_host_port")
        batch_op.drop_column("ray_cluster")
    with op.batch_alter_table("compute_units", schema=None) as batch_op:
        batch_op.alter_column("address", server_default=None)
