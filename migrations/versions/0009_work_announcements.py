"""PostgreSQL announces new or changed background work to the worker (LISTEN/NOTIFY)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 04:00:00

A row of a table the worker takes work from, inserted or changed in state, sends a notification
on the channel `lakeport_work` when its transaction commits, so the worker starts on it at once
instead of at its next poll (app/worker.py). SQLite has no such thing: there the worker polls.
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

CHANNEL = "lakeport_work"
# The tables whose rows the worker's passes look for (each feature's `pending_work`).
WORK_TABLES = ("compute_units", "executions", "sample_data_jobs", "maintenance_jobs")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"""
        CREATE FUNCTION lakeport_announce_work() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{CHANNEL}', TG_TABLE_NAME);
            RETURN NULL;
        END $$
    """)
    for table in WORK_TABLES:
        # Per statement, and notifications of one transaction are delivered once at its commit.
        op.execute(
            f"CREATE TRIGGER {table}_announce_work AFTER INSERT OR UPDATE OF state ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION lakeport_announce_work()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in WORK_TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS {table}_announce_work ON {table}")
    op.execute("DROP FUNCTION IF EXISTS lakeport_announce_work()")
