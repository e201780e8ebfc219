"""Lakeport's tables. Every change here comes with an Alembic migration in `migrations/versions/`."""
from __future__ import annotations

from datetime import datetime, timezone

from flask_login import UserMixin
from sqlalchemy import UniqueConstraint
from sqlmodel import Field, SQLModel


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

    @property
    def display_name(self) -> str:
        return self.name or self.email or self.subject


class WarehouseStatus:
    """A warehouse's life in Lakeport. Purged warehouses have no row."""

    ACTIVE = "active"        # can be chosen for new executions
    INACTIVE = "inactive"    # deactivated in Lakekeeper; can be activated again
    ARCHIVED = "archived"    # no new executions; everything written stays readable
    ALL = (ACTIVE, INACTIVE, ARCHIVED)


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

    @property
    def location(self) -> str:
        return f"s3://{self.bucket}/{self.key_prefix}".rstrip("/")


class ComputeUnitState:
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    FAILED = "FAILED"
    FINAL = (TERMINATED, FAILED)
    LIVE = (PENDING, STARTING, RUNNING, TERMINATING)


class ComputeUnit(SQLModel, table=True):
    """A Ray cluster that runs a user's executions (Spark on Ray through RayDP)."""

    __tablename__ = "compute_units"

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    name: str = Field(max_length=64)
    kind: str = Field(max_length=16)  # local | existing | kuberay
    cpus: int = 1                # per node
    memory_gb: float = 2.0       # per node
    worker_nodes: int = 0
    address: str = Field(default="", max_length=512)  # existing clusters only
    state: str = Field(default=ComputeUnitState.PENDING, max_length=16, index=True)
    reason: str = Field(default="", max_length=1000)
    progress_step: str = Field(default="", max_length=200)
    # What the Ray backend needs to find the cluster again (ports, pids, URLs): JSON.
    handle: str = Field(default="{}")
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_activity_at: datetime = Field(default_factory=utcnow)


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
    __table_args__ = (UniqueConstraint("workflow_id", "version", name="uq_workflow_versions_version"),)

    id: int | None = Field(default=None, primary_key=True)
    workflow_id: int = Field(foreign_key="workflows.id", index=True, ondelete="CASCADE")
    version: int
    steps: str = Field(default="[]")
    created_at: datetime = Field(default_factory=utcnow)


class ExecutionState:
    QUEUED = "QUEUED"
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    FINAL = (COMPLETED, FAILED, CANCELLED)
    ALL = (QUEUED, INITIALIZING, RUNNING, COMPLETED, FAILED, CANCELLED)


class Execution(SQLModel, table=True):
    """One run of a workflow version on a compute unit, writing into one warehouse.

    The warehouse's name is copied so history stays readable after a purge
    (`warehouse_id` is then cleared and `outputs_purged` set).
    """

    __tablename__ = "executions"

    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    workflow_id: int = Field(foreign_key="workflows.id", index=True)
    workflow_version_id: int = Field(foreign_key="workflow_versions.id")
    workflow_version: int
    compute_unit_id: int | None = Field(default=None, foreign_key="compute_units.id", index=True,
                                        ondelete="SET NULL")
    warehouse_id: int | None = Field(default=None, foreign_key="warehouses.id", index=True, ondelete="SET NULL")
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
