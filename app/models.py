"""Lakeport's tables. Every change here comes with an Alembic migration in `migrations/versions/`."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from enum import StrEnum, nonmember

from flask_login import UserMixin
from sqlalchemy import BigInteger, Index, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from app.states import ExecutionState, JobState, QueryState, UnitState


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class User(UserMixin, SQLModel, table=True):
    """A person who signed in through the identity provider; keyed by issuer + subject."""

    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("issuer", "subject", name="uq_users_issuer_subject"),)

    id: int | None = Field(default=None, primary_key=True)
    issuer: str = Field(max_length=255)
    subject: str = Field(max_length=255)
    name: str = Field(default="", max_length=255)
    email: str = Field(default="", max_length=320)
    created_at: datetime = Field(default_factory=utcnow)
    last_login_at: datetime = Field(default_factory=utcnow)
    # The identity provider's `groups` claim at the last sign-in or re-validation (JSON list of
    # names), and when the provider last confirmed it (app/roles.py: none once older than the bound).
    groups: str = Field(default="[]")
    groups_checked_at: datetime | None = Field(default_factory=utcnow)
    # The refresh token of the last sign-in, encrypted (app/auth/provider_grant.py): the worker
    # asks the provider about the user again with it. A secret: never shown or logged.
    refresh_token_sealed: str | None = Field(default=None, repr=False)
    # When the provider last refused the user (disabled, session revoked): sessions begun before
    # end and API tokens are refused until the next sign-in.
    suspended_at: datetime | None = None
    # The groups as of the last sync of this user's memberships of the groups' Lakekeeper roles
    # (app/warehouses/sharing.py `sync_memberships`): a sign-in asks the catalog only for changes.
    catalog_groups: str = Field(default="[]")

    @property
    def display_name(self) -> str:
        return self.name or self.email or self.subject

    @property
    def group_names(self) -> list[str]:
        return json.loads(self.groups or "[]")


# State vocabularies are string enums: a member is its stored value ("active" == WarehouseStatus.ACTIVE).
class WarehouseStatus(StrEnum):
    """A warehouse's life in Lakeport. Purged warehouses have no row."""

    ACTIVE = "active"  # can be chosen for new executions
    INACTIVE = "inactive"  # deactivated in Lakekeeper; can be activated again
    ARCHIVED = "archived"  # no new executions; everything written stays readable
    ALL = nonmember((ACTIVE, INACTIVE, ARCHIVED))


class Warehouse(SQLModel, table=True):
    """A user's warehouse: Lakekeeper's id plus non-secret metadata. Keys live only in Lakekeeper."""

    __tablename__ = "warehouses"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_warehouses_owner_name"),)

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    name: str = Field(max_length=64)
    # Lakekeeper's names are global to a project; this one is unique across users.
    lakekeeper_name: str = Field(max_length=128, unique=True)
    lakekeeper_id: str = Field(max_length=36, unique=True)
    bucket: str = Field(max_length=63)
    key_prefix: str = Field(default="", max_length=512)
    endpoint: str = Field(default="", max_length=512)
    region: str = Field(max_length=64)
    path_style_access: bool = False
    flavor: str = Field(default="s3-compat", max_length=16)
    status: str = Field(default=WarehouseStatus.ACTIVE, max_length=16)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    archived_at: datetime | None = None
    # The catalog's part of a deactivation or an archive ("deactivate", "archive"), owed once the
    # runs writing into it have stopped (app/warehouses/work.py); the worker does it at
    # `closing_due_at` at the latest, and after a failure (`closing_error`) tries again then.
    closing: str = Field(default="", max_length=16)
    closing_due_at: datetime | None = None
    closing_error: str = Field(default="", max_length=2000)
    # The worker's last comparison of the warehouse's grants in Lakekeeper with its shares
    # (app/warehouses/work.py): when, when the catalog last agreed (found so, or repaired), what
    # that check repaired, why it could not check; `grants_due_at` asks for one sooner (a failed write).
    grants_checked_at: datetime | None = None
    grants_agreed_at: datetime | None = None
    grants_repair: str = Field(default="", max_length=2000)
    grants_error: str = Field(default="", max_length=2000)
    grants_due_at: datetime | None = Field(default=None, index=True)

    @property
    def location(self) -> str:
        return f"s3://{self.bucket}/{self.key_prefix}".rstrip("/")


LIVE_STATES_SQL = "state IN ({})".format(", ".join(f"'{state}'" for state in UnitState.LIVE))


class ComputeUnit(SQLModel, table=True):
    """A Ray cluster that runs a user's executions (Spark on Ray through RayDP)."""

    __tablename__ = "compute_units"
    # Two live units never share a Spark host port on one listed Ray cluster, even when created
    # at the same moment by two portal processes (the second insert fails and picks again).
    __table_args__ = (
        Index(
            "uq_compute_units_live_spark_host_port",
            "ray_cluster",
            "spark_host_port",
            unique=True,
            sqlite_where=text(LIVE_STATES_SQL),
            postgresql_where=text(LIVE_STATES_SQL),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    # None only while the unit waits in the warm pool (app/compute_units/pool.py) for its user.
    owner_id: int | None = Field(default=None, foreign_key="users.id", index=True)
    name: str = Field(max_length=64)
    kind: str = Field(max_length=16)  # local | existing | kuberay
    cpus: int = 1  # per node
    memory_gb: float = 2.0  # per node
    worker_nodes: int = 0
    ray_cluster: str = Field(
        default="", max_length=64
    )  # existing units: the operator-listed cluster's name
    spark_host_port: int | None = (
        None  # existing units: the unit's port of that cluster's Spark host range
    )
    state: str = Field(default=UnitState.PENDING, max_length=16, index=True)
    reason: str = Field(default="", max_length=1000)
    progress_step: str = Field(default="", max_length=200)
    # What the Ray backend needs to find the cluster again (ports, pids, URLs): JSON.
    handle: str = Field(default="{}")
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_activity_at: datetime = Field(default_factory=utcnow)
    # An ended unit its owner cleared from the list; the row stays (executions refer to it).
    cleared_at: datetime | None = None
    # The worker's last check of a RUNNING unit's cluster (JSON ClusterStatus), which its pages
    # show: a request never asks the unit itself.
    cluster_status: str = Field(default="")
    cluster_checked_at: datetime | None = None
    # The warm pool: when the unit was started for it, and when a user's create claimed it.
    pooled_at: datetime | None = Field(default=None, index=True)
    claimed_at: datetime | None = None
    # When its Spark session was first found ready (a pooled unit is claimed only then).
    spark_ready_at: datetime | None = None


class ComputeUnitEvent(SQLModel, table=True):
    """What happened to a compute unit, for its detail page."""

    __tablename__ = "compute_unit_events"

    id: int | None = Field(default=None, primary_key=True)
    compute_unit_id: int = Field(foreign_key="compute_units.id", index=True, ondelete="CASCADE")
    at: datetime = Field(default_factory=utcnow)
    message: str = Field(max_length=1000)


class Workflow(SQLModel, table=True):
    """A named, owned PySpark pipeline. Its steps live in versions: every save is a new one."""

    __tablename__ = "workflows"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_workflows_owner_name"),)

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    name: str = Field(max_length=64)
    description: str = Field(default="", max_length=1000)
    latest_version: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class WorkflowVersion(SQLModel, table=True):
    """One saved state of a workflow's steps; never changed once written.

    `steps` is JSON: [{"name", "kind": "sql" | "python", "code", "output": bool}, ...] in order.
    """

    __tablename__ = "workflow_versions"
    __table_args__ = (
        UniqueConstraint("workflow_id", "version", name="uq_workflow_versions_version"),
    )

    id: int | None = Field(default=None, primary_key=True)
    workflow_id: int = Field(foreign_key="workflows.id", index=True, ondelete="CASCADE")
    version: int
    steps: str = Field(default="[]")
    created_at: datetime = Field(default_factory=utcnow)


class NotifyFields(SQLModel):
    """Who is told when a run ends ("failure", "success", "both", or "" for nobody), and how: a
    webhook (signed with a secret derived from the portal's key and `webhook_nonce`, never
    stored) and/or an email. A schedule asks for its runs; a user for one execution
    (app/executions/notifications.py)."""

    notify_on: str = Field(default="", max_length=8)
    webhook_url: str = Field(default="", max_length=1000)
    webhook_nonce: str = Field(default="", max_length=32)
    notify_email: str = Field(default="", max_length=320)


class Execution(NotifyFields, table=True):
    """One run of a workflow version on a compute unit, writing into one warehouse.

    The warehouse's name is copied so history stays readable after a purge
    (`warehouse_id` is then cleared and `outputs_purged` set).
    """

    __tablename__ = "executions"
    __table_args__ = (
        UniqueConstraint("owner_id", "idempotency_key", name="uq_executions_owner_idempotency_key"),
    )

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    workflow_id: int = Field(foreign_key="workflows.id", index=True)
    workflow_version_id: int = Field(foreign_key="workflow_versions.id")
    workflow_version: int
    compute_unit_id: int | None = Field(
        default=None, foreign_key="compute_units.id", index=True, ondelete="SET NULL"
    )
    warehouse_id: int | None = Field(
        default=None, foreign_key="warehouses.id", index=True, ondelete="SET NULL"
    )
    warehouse_name: str = Field(max_length=64)
    state: str = Field(default=ExecutionState.QUEUED, max_length=16, index=True)
    reason: str = Field(default="", max_length=2000)
    # The Spark host's id for this run, once submitted.
    run_id: str = Field(default="", max_length=64)
    # Last progress seen from the compute unit (JSON: steps, logs); final once the run ends.
    progress: str = Field(default="{}")
    # What the run produced (JSON: {"outputs": {step: "results.e42_step"}, ...}).
    outputs: str = Field(default="{}")
    outputs_purged: bool = False
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # The owner asked to cancel the RUNNING run; its watcher (the worker) asks the compute unit.
    cancel_requested_at: datetime | None = None
    # When retention dropped its result tables / its runtime_stats and console_logs (the row stays).
    outputs_expired_at: datetime | None = None
    stats_expired_at: datetime | None = None
    # What the run read and wrote (JSON, compute/contract.py Lineage), once it COMPLETED.
    lineage: str = Field(default="{}")
    # A re-run on the same inputs: {"execution_id": <the run re-run>, "tables": {table: snapshot id}}.
    pinned_to: str = Field(default="{}")
    # The API's Idempotency-Key of the start that made it: a retried start finds this execution.
    idempotency_key: str | None = Field(default=None, max_length=128)


class WorkLease(SQLModel, table=True):
    """Which worker process does a piece of background work right now (see app/leases.py).

    `name` says what (`execution:42`, `unit-start:7`, `supervisor`); a lease not renewed before
    `expires_at` is free for another worker to take over."""

    __tablename__ = "work_leases"

    name: str = Field(primary_key=True, max_length=128)
    holder: str = Field(max_length=128)
    expires_at: datetime


class SampleDataJob(SQLModel, table=True):
    """One generation of TPC-H tables into a warehouse, done by the worker; pages read this row.

    At most one live job per warehouse: a partial unique index (PostgreSQL and SQLite)."""

    __tablename__ = "sample_data_jobs"
    __table_args__ = (
        Index(
            "uq_sample_data_jobs_live_warehouse",
            "warehouse_id",
            unique=True,
            postgresql_where=text("state IN ('queued', 'running')"),
            sqlite_where=text("state IN ('queued', 'running')"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    warehouse_id: int = Field(foreign_key="warehouses.id", ondelete="CASCADE")
    scale_factor: float
    state: str = Field(default=JobState.QUEUED, max_length=16)
    step: str = Field(default="waiting for the worker", max_length=200)
    # Rows written so far, by table (JSON).
    table_rows: str = Field(default="{}")
    error: str = Field(default="", max_length=1000)
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def running(self) -> bool:
        return self.state in JobState.LIVE

    @property
    def tables(self) -> dict[str, int]:
        return json.loads(self.table_rows or "{}")


class ExecutionUsage(SQLModel, table=True):
    """What one execution wrote, from the snapshot summaries of its tables (measured by the worker
    once the run ended): `results_*` its result tables, `logs_*` its runtime_stats and console_logs."""

    __tablename__ = "execution_usage"

    execution_id: int = Field(primary_key=True, foreign_key="executions.id", ondelete="CASCADE")
    results_bytes: int = Field(default=0, sa_type=BigInteger)
    results_files: int = 0
    logs_bytes: int = Field(default=0, sa_type=BigInteger)
    logs_files: int = 0
    measured_at: datetime = Field(default_factory=utcnow)

    @property
    def bytes_written(self) -> int:
        return self.results_bytes + self.logs_bytes

    @property
    def files_written(self) -> int:
        return self.results_files + self.logs_files


class StorageSample(SQLModel, table=True):
    """Live bytes and files of one namespace of a warehouse at one time (the worker measures)."""

    __tablename__ = "storage_samples"
    __table_args__ = (
        Index("ix_storage_samples_warehouse_measured", "warehouse_id", "measured_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    warehouse_id: int = Field(foreign_key="warehouses.id", ondelete="CASCADE")
    namespace: str = Field(max_length=255)
    tables: int = 0
    files: int = 0
    bytes: int = Field(default=0, sa_type=BigInteger)
    measured_at: datetime = Field(default_factory=utcnow)


class RetentionPolicy(SQLModel, table=True):
    """How long a warehouse keeps what executions write; set by its owner.

    Results: `results_mode` "days" keeps result tables `results_value` days after their run
    ended, "last" keeps those of the last `results_value` executions of each workflow.
    runtime_stats and console_logs: `logs_days` days, or forever (None). Datasets: snapshots
    beyond the last `snapshots_retain_last` are expired on demand (None: not offered)."""

    __tablename__ = "retention_policies"

    warehouse_id: int = Field(primary_key=True, foreign_key="warehouses.id", ondelete="CASCADE")
    results_mode: str = Field(default="days", max_length=8)
    results_value: int = 30
    logs_days: int | None = None
    snapshots_retain_last: int | None = None
    updated_at: datetime = Field(default_factory=utcnow)


class RetentionLogEntry(SQLModel, table=True):
    """One enforcement of a warehouse's retention, for its owner to read on the warehouse page."""

    __tablename__ = "retention_log"

    id: int | None = Field(default=None, primary_key=True)
    warehouse_id: int = Field(foreign_key="warehouses.id", index=True, ondelete="CASCADE")
    at: datetime = Field(default_factory=utcnow)
    kind: str = Field(max_length=16)  # expiry | snapshots
    tables: int = 0
    bytes: int = Field(default=0, sa_type=BigInteger)
    message: str = Field(default="", max_length=4000)


class UnitJob(SQLModel):
    """What a one-off job the worker runs on a unit records (maintenance, a comparison)."""

    state: str = Field(default=JobState.QUEUED, max_length=16)
    result: str = Field(default="{}")  # what the unit reported (JSON)
    error: str = Field(default="", max_length=2000)
    created_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None

    @property
    def running(self) -> bool:
        return self.state in JobState.LIVE


class MaintenanceJob(UnitJob, table=True):
    """Snapshot expiry and orphan-file clean-up of a warehouse's datasets, run by the worker on one
    of the owner's running compute units (compute/run/maintenance.py)."""

    __tablename__ = "maintenance_jobs"

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    warehouse_id: int = Field(foreign_key="warehouses.id", index=True, ondelete="CASCADE")
    compute_unit_id: int | None = Field(
        default=None, foreign_key="compute_units.id", ondelete="SET NULL"
    )
    retain_last: int
    remove_orphans: bool = False
    # result: per table, snapshots and files removed, or the error.
    # A table's policy job (app/tables/work.py): that one table, compacted and/or its snapshots
    # older than `expire_before` expired (None: the warehouse's datasets, as above).
    table_name: str | None = Field(default=None, max_length=512)
    compact: bool = False
    expire_before: datetime | None = None
    data_files_before: int | None = None
    data_files_after: int | None = None
    gb_hours: float | None = None
    started_at: datetime | None = None
    # Why the worker did not run it (no unit running, a publish in flight); the row is then DONE.
    skipped: str = Field(default="", max_length=500)
    # Its unit (`compute_unit_id`) was started for it (its policy's `start_unit`): the job waits,
    # QUEUED, until that unit runs, and the unit is stopped once the job has ended.
    started_unit: bool = False


class TablePolicy(SQLModel, table=True):
    """How one table of a warehouse is kept healthy, set by whoever may write the warehouse
    (app/tables/): compact when `compact_small_files` files are below `small_file_mb` MiB, expire
    snapshots older than `expire_days` days (keeping those pinned re-runs read). None: off."""

    __tablename__ = "table_policies"
    __table_args__ = (
        UniqueConstraint("warehouse_id", "table_name", name="uq_table_policies_table"),
    )

    id: int | None = Field(default=None, primary_key=True)
    warehouse_id: int = Field(foreign_key="warehouses.id", index=True, ondelete="CASCADE")
    table_name: str = Field(max_length=512)
    small_file_mb: int = 32
    compact_small_files: int | None = None
    expire_days: int | None = None
    # With no idle unit of the owner's running, start one for the job (and stop it after).
    start_unit: bool = False
    updated_by: int | None = Field(default=None, foreign_key="users.id", ondelete="SET NULL")
    updated_at: datetime = Field(default_factory=utcnow)


class ComparisonJob(UnitJob, table=True):
    """The rows in which two executions' outputs differ, computed by the worker on a running
    unit of the owner's (compute/run/comparison.py); the compare page polls this row."""

    __tablename__ = "comparison_jobs"

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    a_id: int = Field(foreign_key="executions.id", index=True, ondelete="CASCADE")
    b_id: int = Field(foreign_key="executions.id", ondelete="CASCADE")
    # result: output → {"only_in_a", "only_in_b", their counts, "columns"} or {"error"}.


class ApiToken(SQLModel, table=True):
    """A personal access token for the API (app/api/): shown once, stored only as its SHA-256.
    `scope` is "read" (look) or "run" (also start, cancel, create and terminate)."""

    __tablename__ = "api_tokens"

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    name: str = Field(max_length=64)
    scope: str = Field(max_length=8)
    token_sha256: str = Field(max_length=64, unique=True, index=True)
    # The token's first characters, to tell tokens apart on the page.
    prefix: str = Field(max_length=16)
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None


class ApiRateWindow(SQLModel, table=True):
    """Calls counted in one rate-limit window, per key ("token:7", "user:3"): shared by every
    web process, so the limit holds whatever their number."""

    __tablename__ = "api_rate_windows"

    key: str = Field(primary_key=True, max_length=64)
    window_start: int = Field(primary_key=True)
    calls: int = 0


class Schedule(NotifyFields, table=True):
    """A workflow run on a cron schedule in a time zone, on a unit into a warehouse of its
    owner's (app/schedules/). The worker fires each due time once (`ScheduledRun`)."""

    __tablename__ = "schedules"

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    workflow_id: int = Field(foreign_key="workflows.id", index=True, ondelete="CASCADE")
    cron: str = Field(max_length=100)
    timezone: str = Field(max_length=64)
    compute_unit_id: int | None = Field(
        default=None, foreign_key="compute_units.id", ondelete="SET NULL"
    )
    warehouse_id: int | None = Field(default=None, foreign_key="warehouses.id", ondelete="SET NULL")
    # Due times missed while no worker ran: "skip" them, or run "once" for all of them.
    catch_up: str = Field(default="skip", max_length=8)
    # A failed run is retried up to `max_retries` times, after retry_backoff_seconds * 2**attempt.
    max_retries: int = 0
    retry_backoff_seconds: int = 60
    # A run still going after this many minutes is cancelled (0: no limit).
    timeout_minutes: int = 0
    # A due time is skipped while this many of the schedule's runs are still going.
    max_running: int = 1
    # A due time whose unit has ended starts a copy of it for the run, and stops it after.
    start_unit: bool = False
    paused: bool = False
    created_at: datetime = Field(default_factory=utcnow)
    # The latest due time the scheduler has handled (fired, skipped or caught up).
    handled_until: datetime | None = None


class ScheduledRun(SQLModel, table=True):
    """One due time of a schedule, handled once: it started an execution, or was skipped (why)."""

    __tablename__ = "scheduled_runs"
    __table_args__ = (
        UniqueConstraint("schedule_id", "due_at", "attempt", name="uq_scheduled_runs_due"),
    )

    id: int | None = Field(default=None, primary_key=True)
    schedule_id: int = Field(foreign_key="schedules.id", index=True, ondelete="CASCADE")
    due_at: datetime
    attempt: int = 0  # 0: the due time's run; 1, 2…: its retries
    outcome: str = Field(
        max_length=16
    )  # "started", "skipped", or "waiting" for the unit it started
    reason: str = Field(default="", max_length=500)
    execution_id: int | None = Field(default=None, foreign_key="executions.id", ondelete="SET NULL")
    # The unit this due time started (its schedule's `start_unit`), stopped once the run has ended.
    started_unit_id: int | None = Field(
        default=None, foreign_key="compute_units.id", ondelete="SET NULL"
    )
    created_at: datetime = Field(default_factory=utcnow)


class Notification(SQLModel, table=True):
    """One message about a run's end, by one channel, for its schedule or (no schedule) for the
    execution's own request; delivered by the worker (retried with backoff; never by a request)."""

    __tablename__ = "notifications"
    __table_args__ = (
        UniqueConstraint("execution_id", "channel", name="uq_notifications_execution_channel"),
    )

    id: int | None = Field(default=None, primary_key=True)
    schedule_id: int | None = Field(
        default=None, foreign_key="schedules.id", index=True, ondelete="CASCADE"
    )
    execution_id: int = Field(foreign_key="executions.id", ondelete="CASCADE")
    channel: str = Field(max_length=8)  # "webhook" or "email"
    state: str = Field(default=JobState.QUEUED, max_length=16)
    attempts: int = 0
    next_attempt_at: datetime = Field(default_factory=utcnow)
    last_error: str = Field(default="", max_length=500)
    created_at: datetime = Field(default_factory=utcnow)


class AuditEvent(SQLModel, table=True):
    """One state-changing action, append-only (app/audit/): who, what, to which object (and
    whose), before → after where it matters, when and from where. The database refuses an
    UPDATE or DELETE of a row (migration 0014's triggers). Never a secret."""

    __tablename__ = "audit_events"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(default_factory=utcnow, index=True)
    # Who: a user (none for the portal's own actions), through a personal token when `token_id`.
    actor_id: int | None = Field(default=None, index=True)
    actor_name: str = Field(default="", max_length=255)
    token_id: int | None = None
    action: str = Field(max_length=64, index=True)  # e.g. "warehouse.rename"
    object_type: str = Field(default="", max_length=32)
    object_id: str = Field(default="", max_length=64)
    # The owner of the object acted on: they see the event in their trail.
    owner_id: int | None = Field(default=None, index=True)
    detail: str = Field(default="{}", max_length=2000)  # JSON: before, after, what else matters
    ip: str = Field(default="", max_length=64)
    user_agent: str = Field(default="", max_length=255)


class WarehouseShare(SQLModel, table=True):
    """A warehouse its owner shares with one user or one group (app/warehouses/sharing.py):
    `read` (browse its tables, read what is in it) or `write` (also run executions into it).
    Mirrored into Lakekeeper as grants, so the catalog enforces it too."""

    __tablename__ = "warehouse_shares"
    # One share per user and per group of a warehouse (NULLs differ: a user row and a group row
    # never collide).
    __table_args__ = (
        UniqueConstraint("warehouse_id", "user_id", name="uq_warehouse_shares_user"),
        UniqueConstraint("warehouse_id", "group_name", name="uq_warehouse_shares_group"),
    )

    id: int | None = Field(default=None, primary_key=True)
    warehouse_id: int = Field(foreign_key="warehouses.id", index=True, ondelete="CASCADE")
    user_id: int | None = Field(
        default=None, foreign_key="users.id", index=True, ondelete="CASCADE"
    )
    group_name: str | None = Field(default=None, max_length=255, index=True)
    level: str = Field(max_length=8)  # "read" or "write"
    created_at: datetime = Field(default_factory=utcnow)


class GroupRole(SQLModel, table=True):
    """The Lakekeeper role that stands for one identity-provider group: warehouses shared with the
    group are granted to it, and the group's members (as of their last sign-in) are its assignees."""

    __tablename__ = "group_roles"

    id: int | None = Field(default=None, primary_key=True)
    group_name: str = Field(max_length=255, unique=True)
    lakekeeper_role_id: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow)


class WorkflowShare(SQLModel, table=True):
    """A workflow its owner shares with one user or one group (app/workflows/sharing.py):
    `view` (read its versions, copy it) or `run` (also run it on their own unit, into a warehouse
    they may write). Its versions stay the owner's to write."""

    __tablename__ = "workflow_shares"
    __table_args__ = (
        UniqueConstraint("workflow_id", "user_id", name="uq_workflow_shares_user"),
        UniqueConstraint("workflow_id", "group_name", name="uq_workflow_shares_group"),
    )

    id: int | None = Field(default=None, primary_key=True)
    workflow_id: int = Field(foreign_key="workflows.id", index=True, ondelete="CASCADE")
    user_id: int | None = Field(
        default=None, foreign_key="users.id", index=True, ondelete="CASCADE"
    )
    group_name: str | None = Field(default=None, max_length=255, index=True)
    level: str = Field(max_length=8)  # "view" or "run"
    created_at: datetime = Field(default_factory=utcnow)


class Query(SQLModel, table=True):
    """One SQL statement a user ran in the console (app/console/) on one of their units against a
    warehouse they may read (or write, in `mode` "write"). The worker runs it
    (compute/run/query.py) and stores its bounded result here; the warehouse's name is copied so
    history stays readable after a purge."""

    __tablename__ = "queries"

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    warehouse_id: int | None = Field(
        default=None, foreign_key="warehouses.id", index=True, ondelete="SET NULL"
    )
    warehouse_name: str = Field(max_length=64)
    compute_unit_id: int | None = Field(
        default=None, foreign_key="compute_units.id", ondelete="SET NULL"
    )
    compute_unit_name: str = Field(default="", max_length=64)
    sql: str = Field(max_length=100_000)
    mode: str = Field(default="read", max_length=8)  # "read" or "write"
    statement: str = Field(default="", max_length=64)  # its name: SELECT, INSERT INTO…
    state: str = Field(default=QueryState.QUEUED, max_length=16, index=True)
    error: str = Field(default="", max_length=2000)
    # The Spark host's id for this run, once submitted.
    run_id: str = Field(default="", max_length=64)
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # The owner asked to cancel; the worker passes it on to the unit.
    cancel_requested_at: datetime | None = None
    # Rows the statement answered (past the bound too), and whether only some came back.
    row_count: int | None = None
    truncated: bool = False
    # {"columns": [{"name", "type"}], "rows": [[...]], "plan": "..."}: bounded by the unit and
    # checked again by the worker (app/console/work.py).
    result: str = Field(default="{}")
    # The tables and snapshots it read (JSON list, compute/contract.py LineageRead).
    snapshots: str = Field(default="[]")

    @property
    def live(self) -> bool:
        return self.state in QueryState.LIVE

    @property
    def completed(self) -> bool:
        return self.state == QueryState.COMPLETED

    @property
    def failed(self) -> bool:
        return self.state == QueryState.FAILED

    @property
    def cancelled(self) -> bool:
        return self.state == QueryState.CANCELLED
