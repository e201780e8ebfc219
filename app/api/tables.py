"""The API's tables: a table's health, its maintenance policy (read by whoever may read the
warehouse, set by whoever may write it), its maintenance jobs and its publishes. The same queries
and service as the table page (app/tables/); no access answers 404."""

from __future__ import annotations

from datetime import datetime

from flask_login import current_user
from pydantic import BaseModel, Field
from spectree import Response

from app.api import bp, schemas
from app.api.openapi import spec
from app.api.paging import ERRORS, table_read
from app.api.problems import ApiProblem
from app.models import MaintenanceJob, TablePolicy, Warehouse, WarehouseStatus
from app.tables import forms, queries, service
from app.warehouses import sharing
from app.warehouses.queries import valid_table_name

TABLE = "/warehouses/<int:warehouse_id>/tables/<name>"


class TableHealthOut(BaseModel):
    data_files: int
    average_file_bytes: int | None
    small_files: int = Field(description="data files below `small_file_bytes`")
    small_file_bytes: int
    delete_files: int
    records: int
    snapshots: int
    last_compaction_ms: int | None = Field(description="the newest compaction's commit, or null")


class PolicyIn(schemas.Input):
    small_file_mb: int = forms.DEFAULT_SMALL_FILE_MB
    compact_small_files: int | None = Field(None, description="null: never compact")
    expire_days: int | None = Field(None, description="null: never expire snapshots")
    start_unit: bool | None = Field(
        None,
        description="with no idle unit of the owner's, start one for the job and stop it after; "
        "null or absent: as it is (off for a new policy); only the warehouse's owner may change it "
        "(403 for anyone else)",
    )


class PolicyOut(BaseModel):
    small_file_mb: int
    compact_small_files: int | None
    expire_days: int | None
    start_unit: bool
    updated_at: datetime | None


class MaintenanceJobOut(BaseModel):
    id: int
    state: str = Field(description="queued, running, done or failed")
    compact: bool
    expire_before: datetime | None
    skipped: str = Field(description="why it did not run, else ''")
    error: str
    data_files_before: int | None
    data_files_after: int | None
    gb_hours: float | None
    compute_unit_id: int | None = Field(description="the unit it ran (or waits to run) on")
    started_unit: bool = Field(description="that unit was started for this job")
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None


class PublishOut(BaseModel):
    snapshot_id: int
    committed_at_ms: int = Field(description="0 for an expired snapshot whose time is unknown")
    operation: str = Field(description="append, overwrite, replace (a compaction)…; '' if expired")
    added_records: int | None
    execution_id: int | None = Field(description="the execution that wrote it, from its lineage")
    step: str = Field(description="the execution's step that wrote it, else ''")
    expired: bool = Field(description="the snapshot expired since; the publish stays listed")


class WorkflowRef(BaseModel):
    id: int
    name: str


class TablePublishesOut(BaseModel):
    publishes: list[PublishOut] = Field(description="every snapshot of the table, newest first")
    written_by: list[WorkflowRef] = Field(description="the workflows whose executions wrote it")
    read_by: list[WorkflowRef] = Field(description="the workflows whose executions read it")


def _table(warehouse_id: int, name: str, need: str | None = None) -> Warehouse:
    warehouse = sharing.accessible_or_404(warehouse_id, need)
    if not valid_table_name(name):
        raise ApiProblem(404, "No such table.")
    return warehouse


def _policy_out(policy: TablePolicy | None) -> PolicyOut:
    if policy is None:
        return PolicyOut(
            small_file_mb=forms.DEFAULT_SMALL_FILE_MB,
            compact_small_files=None,
            expire_days=None,
            start_unit=False,
            updated_at=None,
        )
    return PolicyOut(**{name: getattr(policy, name) for name in PolicyOut.model_fields})


@bp.get(f"{TABLE}/health")
@spec.validate(
    resp=Response(HTTP_200=TableHealthOut, HTTP_409=schemas.Problem, **ERRORS), tags=["tables"]
)
def get_table_health(warehouse_id: int, name: str):
    """A table's data and delete files, small files and snapshots, from its metadata."""
    warehouse = _table(warehouse_id, name)
    policy = queries.policy_of(warehouse, name)
    health = table_read(lambda: queries.health(warehouse, name, policy), missing="No such table.")
    return TableHealthOut(
        **{name_: getattr(health, name_) for name_ in TableHealthOut.model_fields}
    )


@bp.get(f"{TABLE}/policy")
@spec.validate(resp=Response(HTTP_200=PolicyOut, **ERRORS), tags=["tables"])
def get_table_policy(warehouse_id: int, name: str):
    """A table's maintenance policy (without one: nothing is compacted nor expired)."""
    warehouse = _table(warehouse_id, name)
    return _policy_out(queries.policy_of(warehouse, name))


@bp.post(f"{TABLE}/policy")
@spec.validate(json=PolicyIn, resp=Response(HTTP_200=PolicyOut, **ERRORS), tags=["tables"])
def set_table_policy(warehouse_id: int, name: str, json: PolicyIn):
    """Set a table's maintenance policy (you may write the warehouse); the worker acts on it."""
    warehouse = _table(warehouse_id, name, sharing.WRITE)
    if warehouse.status != WarehouseStatus.ACTIVE:
        raise ApiProblem(400, "Only an active warehouse's tables can be maintained.")
    body = json.model_dump()
    if body["start_unit"] is None:  # a client that does not know the flag keeps it
        current = queries.policy_of(warehouse, name)
        body["start_unit"] = current is not None and current.start_unit
    form = {key: "" if value is None else str(value) for key, value in body.items()}
    values, errors = forms.parse_policy(form, name)
    if errors:
        field, message = next(iter(errors.items()))
        raise ApiProblem(400, message, None if field == "form" else field)
    try:
        return _policy_out(service.save_policy(warehouse, name, values, current_user))
    except service.StartUnitRefused as refused:
        raise ApiProblem(403, refused.message, "start_unit") from None


@bp.get(f"{TABLE}/maintenance")
@spec.validate(resp=Response(HTTP_200=list[MaintenanceJobOut], **ERRORS), tags=["tables"])
def list_table_maintenance(warehouse_id: int, name: str):
    """A table's maintenance jobs, newest first (the last 50)."""
    warehouse = _table(warehouse_id, name)
    return [_job_out(job) for job in queries.history(warehouse, name)]


def _job_out(job: MaintenanceJob) -> MaintenanceJobOut:
    return MaintenanceJobOut(
        **{name: getattr(job, name) for name in MaintenanceJobOut.model_fields}
    )


@bp.get(f"{TABLE}/publishes")
@spec.validate(
    resp=Response(HTTP_200=TablePublishesOut, HTTP_409=schemas.Problem, **ERRORS),
    tags=["tables"],
)
def get_table_publishes(warehouse_id: int, name: str):
    """A table's publishes: each snapshot, newest first, with the execution and step that wrote it
    (an expired one stays listed); the workflows that write the table and those that read it."""
    warehouse = _table(warehouse_id, name)
    story = table_read(
        lambda: queries.story(warehouse, name, current_user), missing="No such table."
    )
    return TablePublishesOut(
        publishes=[
            PublishOut(**{name_: getattr(entry, name_) for name_ in PublishOut.model_fields})
            for entry in story.entries
        ],
        written_by=[WorkflowRef(id=id_, name=name_) for id_, (name_, _) in story.workflows.items()],
        read_by=[WorkflowRef(id=id_, name=name_) for id_, (name_, _) in story.consumers.items()],
    )
