"""warehouses shared with users and groups; the Lakekeeper role of each shared group

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25 07:00:00
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'warehouse_shares',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('warehouse_id', sa.Integer(), sa.ForeignKey('warehouses.id', ondelete='CASCADE'), nullable=False),
        sa.Column('user_id', sa.Integer(), sa.ForeignKey('users.id', ondelete='CASCADE'), nullable=True),
        sa.Column('group_name', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True),
        sa.Column('level', sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.UniqueConstraint('warehouse_id', 'user_id', name='uq_warehouse_shares_user'),
        sa.UniqueConstraint('warehouse_id', 'group_name', name='uq_warehouse_shares_group'),
    )
    for column in ('warehouse_id', 'user_id', 'group_name'):
        op.create_index(f'ix_warehouse_shares_{column}', 'warehouse_shares', [column])
    op.create_table(
        'group_roles',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('group_name', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column('lakekeeper_role_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.UniqueConstraint('group_name'),
    )


def downgrade() -> None:
    op.drop_table('group_roles')
    for column in ('warehouse_id', 'user_id', 'group_name'):
        op.drop_index(f'ix_warehouse_shares_{column}', 'warehouse_shares')
    op.drop_table('warehouse_shares')
