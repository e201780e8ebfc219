"""What the API takes and returns, as pydantic models: spectree validates calls with them and
writes the OpenAPI document from them."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_serializer


class Input(BaseModel):
    """What a call sends: a field the API does not know is refused."""

    model_config = ConfigDict(extra="forbid")


class Problem(BaseModel):
    """An error (RFC 9457); `field` names the input at fault."""

    type: str
    title: str
    status: int
    detail: str
    field: str | None = None


class VersionConflict(Problem):
    """A start refused because the workflow's latest version is not the one the call saw."""

    seen_version: int | None = Field(description="the version the call named (null: none)")
    latest_version: int = Field(
        description="the workflow's latest version: look at it, then start again naming it"
    )


class ListQuery(Input):
    cursor: str | None = Field(None, max_length=64, description="`next_cursor` of the page before")
    limit: int = Field(50, ge=1, le=100)


class Warehouse(BaseModel):
    id: int
    name: str
    status: str
    location: str
    bucket: str
    key_prefix: str
    endpoint: str
    region: str
    created_at: datetime
    archived_at: datetime | None
    closing: str = Field(
        description="what the worker still owes the catalog: archive, deactivate, purge, or ''"
    )


class ComputeUnit(BaseModel):
    id: int
    name: str
    kind: str
    state: str
    reason: str
    cpus: int
    memory_gb: float
    worker_nodes: int
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None


class ComputeUnitCreate(Input):
    name: str = Field(max_length=48)
    kind: str = Field("local", max_length=16)
    cpus: int = 1
    memory_gb: float = 2.0
    worker_nodes: int = 0
    ray_cluster: str = Field("", max_length=64)


class PublishTarget(BaseModel):
    table: str = Field(max_length=127, description="`namespace.table` in the run's warehouse")
    mode: str = Field(
        "append", max_length=24, description="append, overwrite, overwrite-partitions or merge"
    )
    checks: list[dict] = Field(
        default_factory=list,
        max_length=20,
        description="quality checks its rows must pass before publishing, each "
        '{"kind", …, "severity": "warn"|"fail"} (docs/features.md)',
    )
    keys: list[Annotated[str, StringConstraints(max_length=128)]] = Field(
        default_factory=list,
        max_length=10,
        description="mode merge: the key columns a row of the step replaces a row of the table on",
    )

    @model_serializer(mode="wrap")
    def _without_absent_checks(self, handler):
        """A target without checks (or keys) reads as it did before them."""
        data = handler(self)
        for optional in ("checks", "keys"):
            if not data.get(optional):
                data.pop(optional, None)
        return data


class Step(BaseModel):
    name: str = Field(max_length=40)
    kind: str = Field(max_length=16)
    code: str = Field(max_length=100_000)
    output: bool = Field(False, description="its rows are kept as the run's own result table")
    publish: PublishTarget | None = Field(
        None,
        description="the named table its rows are published to when the whole run succeeds "
        "(all of a run's tables in one catalog commit); absent or null: none",
    )

    @model_serializer(mode="wrap")
    def _without_absent_publish(self, handler):
        """A step that publishes nothing reads as it did before named outputs."""
        data = handler(self)
        if data.get("publish") is None:
            data.pop("publish", None)
        return data


class Workflow(BaseModel):
    id: int
    name: str
    description: str
    latest_version: int
    steps: list[Step] = Field(description="the steps of its latest version")


class Notify(Input):
    """Who is told when the execution ends: a webhook (signed, see `webhook_secret`) and/or an email."""

    on: Literal["failure", "success", "both"]
    webhook_url: str = Field("", max_length=1000)
    email: str = Field("", max_length=320)


class ExecutionStart(Input):
    workflow_id: int
    version: int | None = Field(
        None,
        description=(
            "the version you saw (and reviewed): it runs only if it is still the workflow's latest, else 409 "
            "(`seen_version`, `latest_version`) and nothing starts. Absent: the latest, for a workflow of your own "
            "only; someone else's workflow must be named at a version (409 otherwise)"
        ),
    )
    compute_unit_id: int
    warehouse_id: int
    pinned: dict[
        Annotated[
            str, StringConstraints(pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)+$", max_length=256)
        ],
        Annotated[int, Field(ge=0)],
    ] = Field(
        default_factory=dict,
        max_length=100,
        description="tables to read at a snapshot (`namespace.table` → snapshot id), e.g. an earlier run's inputs",
    )
    notify: Notify | None = None


class PublishedOutput(BaseModel):
    step: str
    table: str = Field(description="`namespace.table` in the run's warehouse")
    mode: str = Field(description="append, overwrite or overwrite-partitions")
    snapshot_id: int = Field(description="the table's snapshot the run published")
    rows_added: int | None


class CheckResult(BaseModel):
    step: str
    table: str = Field(description="the named output it checked, `namespace.table`")
    kind: str = Field(description="not_null, unique, accepted_values, row_count, …")
    check: str = Field(description="the check in a few words, as a failure names it")
    severity: str = Field(description="fail (a failure publishes nothing) or warn")
    offending: int = Field(description="how many rows break it (0: passed)")
    passed: bool
    detail: str = ""
    sample: list[str] = Field(default_factory=list, description="up to 5 offending rows")


class Execution(BaseModel):
    id: int
    workflow_id: int
    workflow_version: int
    compute_unit_id: int | None
    warehouse_id: int | None
    warehouse_name: str
    state: str
    reason: str
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    outputs: dict[str, str] = Field(description="output step → its table in the warehouse")
    published: list[PublishedOutput] = Field(
        default_factory=list,
        description="the named tables a completed run published, all in one catalog commit",
    )
    checks: list[CheckResult] = Field(
        default_factory=list,
        description="the quality checks made before publishing (a failed run's too)",
    )
    notify_on: str = Field(
        "", description="when its owner is told it ended (failure, success, both; empty: never)"
    )
    code_author: str | None = Field(
        None,
        description="whose code it runs with your credentials (their email, "
        "else name) when the workflow is someone else's; null: yours",
    )
    webhook_secret: str | None = Field(
        None,
        description="the key of the webhook's X-Lakeport-Signature HMAC: "
        "in the answer that started the execution only",
    )


class StorageIn(Input):
    """A bucket to register (or only test): the secret goes to the catalog and is never stored."""

    name: str = Field("", max_length=48)
    bucket: str = Field(max_length=63)
    key_prefix: str = Field("", max_length=512)
    endpoint: str = Field("", max_length=512)
    region: str = Field(max_length=64)
    path_style_access: bool = True
    flavor: str = Field("s3-compat", max_length=16)
    access_key_id: str = Field(max_length=256)
    secret_access_key: str = Field(max_length=256)


class PurgeIn(Input):
    confirm_name: str = Field(max_length=64, description="the warehouse's name, typed again")


class Purged(BaseModel):
    tables_dropped: int
    namespaces_dropped: int
    pending: bool = Field(
        description="Lakekeeper still deletes the files; the warehouse goes once it has"
    )


class StorageCheck(BaseModel):
    name: str
    outcome: str
    message: str


class StorageReport(BaseModel):
    ok: bool
    location: str
    checks: list[StorageCheck]


class TableRef(BaseModel):
    namespace: str
    name: str


class Column(BaseModel):
    name: str
    type: str
    required: bool
    doc: str | None


class Snapshot(BaseModel):
    snapshot_id: int
    committed_at_ms: int
    operation: str
    added_records: int | None
    added_bytes: int | None


class TableOverview(BaseModel):
    name: str
    location: str
    columns: list[Column]
    properties: dict[str, str]
    snapshots: list[Snapshot]
    total_records: int | None
    total_bytes: int | None


class RowsPage(BaseModel):
    """One page of a table's rows, each a list in `columns` order."""

    columns: list[str]
    types: list[str]
    total_rows: int
    page: int
    size: int
    pages: int
    rows: list[list]


class RowsQuery(Input):
    page: int = Field(1, ge=1, le=10_000_000)
    size: int = Field(50, ge=1, le=500)


class StepsIn(Input):
    """A new version's steps, and the version they were edited from (a save since is refused)."""

    base_version: int = Field(ge=0)
    steps: list[Step] = Field(max_length=50)


class Lineage(BaseModel):
    read: list[dict] = []
    wrote: list[dict] = []
    changes: list[dict] = []  # incremental reads: table, from and to snapshots, rows


class WarehousePage(BaseModel):
    items: list[Warehouse]
    next_cursor: str | None


class ComputeUnitPage(BaseModel):
    items: list[ComputeUnit]
    next_cursor: str | None


class WorkflowPage(BaseModel):
    items: list[Workflow]
    next_cursor: str | None


class ExecutionPage(BaseModel):
    items: list[Execution]
    next_cursor: str | None


def cursor_after(row_id: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"before": row_id}).encode()).decode().rstrip("=")


def cursor_id(cursor: str) -> int | None:
    """The id a cursor continues before; None for one this API did not make."""
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))["before"]
    except (ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
