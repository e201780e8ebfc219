"""What users do with workflows: create, save a new version of the steps, read versions, delete;
and the data sources they put into their warehouses for them: an uploaded file imported as
`datasets.<table>` (in the request), TPC-H sample data asked for (a `sample_data_jobs` row, at
most one live job per warehouse, which the database enforces; the worker writes it:
app/workflows/work.py).

A version is never changed once written; saving writes version `latest_version + 1`.
"""

from __future__ import annotations

import logging
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from flask import current_app
from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import select

from app.audit import service as audit
from app.db import get_db
from app.errors import UserFacingError
from app.models import (
    Execution,
    SampleDataJob,
    User,
    Warehouse,
    WarehouseStatus,
    Workflow,
    WorkflowVersion,
    utcnow,
)
from app.workflows import dataset_tables
from app.workflows import steps as step_model
from app.workflows.dataset_tables import DatasetError
from app.workflows.steps import Step

logger = logging.getLogger(__name__)

SCALE_FACTOR_MIN, SCALE_FACTOR_MAX = 0.01, 3.0
TABLE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
COPY_CHUNK_BYTES = 1024 * 1024


class WorkflowActionError(UserFacingError):
    """An action was refused; `message` is for the user."""


def create(owner: User, name: str, description: str) -> Workflow:
    """A workflow without steps yet: its first save in the editor is version 1."""
    db = get_db()
    if db.exec(
        select(Workflow.id).where(Workflow.owner_id == owner.id, Workflow.name == name)
    ).first():
        raise WorkflowActionError("You already have a workflow with this name.", field="name")
    workflow = Workflow(owner_id=owner.id, name=name, description=description)
    db.add(workflow)
    try:
        db.commit()
    except IntegrityError:  # the same name, created at the same moment
        db.rollback()
        raise WorkflowActionError(
            "You already have a workflow with this name.", field="name"
        ) from None
    current_app.logger.info("user %s created workflow %s", owner.id, workflow.id)
    audit.record("workflow.create", workflow, name=name)
    return workflow


def version_of(workflow: Workflow, number: int) -> WorkflowVersion | None:
    statement = select(WorkflowVersion).where(
        WorkflowVersion.workflow_id == workflow.id, WorkflowVersion.version == number
    )
    return get_db().exec(statement).first()


def latest_version(workflow: Workflow) -> WorkflowVersion | None:
    return version_of(workflow, workflow.latest_version) if workflow.latest_version else None


def steps_of(version: WorkflowVersion | None) -> list[Step]:
    """The version's steps in order ([] for a workflow never saved)."""
    return step_model.loads(version.steps) if version else []


def save_version(workflow: Workflow, steps: list[Step], base_version: int) -> WorkflowVersion:
    """Write the steps as the next version. `base_version` is the version the editor started
    from: if another save happened since, this one is refused rather than silently replacing it."""
    check = step_model.check_steps(steps)
    if not check.ok:
        raise WorkflowActionError("Fix the steps marked below, then save again.")
    if base_version != workflow.latest_version:
        raise WorkflowActionError(
            f"This workflow was saved as version {workflow.latest_version} after you opened the editor. "
            "Your changes are still here; save again to make them the next version.",
            field="base_version",
        )
    if workflow.latest_version and steps_of(latest_version(workflow)) == steps:
        raise WorkflowActionError(f"Nothing changed since version {workflow.latest_version}.")
    db = get_db()
    version = WorkflowVersion(
        workflow_id=workflow.id, version=workflow.latest_version + 1, steps=step_model.dumps(steps)
    )
    workflow.latest_version = version.version
    workflow.updated_at = utcnow()
    db.add(version)
    db.add(workflow)
    try:
        db.commit()
    except IntegrityError:  # another save took this version number first
        db.rollback()
        db.refresh(workflow)
        raise WorkflowActionError(
            f"This workflow was saved as version {workflow.latest_version} at the same moment. "
            "Your changes are still here; save again to make them the next version.",
            field="base_version",
        ) from None
    current_app.logger.info("workflow %s saved as version %s", workflow.id, version.version)
    audit.record("workflow.save", workflow, version=version.version, steps=len(steps))
    return version


def delete(workflow: Workflow) -> None:
    """Delete a workflow; its versions go with it (ON DELETE CASCADE). Refused once it has executions: their history
    (and the tables they wrote, which name the workflow) must keep pointing at it."""
    if (
        count := get_db()
        .exec(
            select(func.count()).select_from(Execution).where(Execution.workflow_id == workflow.id)
        )
        .one()
    ):
        raise WorkflowActionError(
            f"{workflow.name} has {count} execution{'s' if count != 1 else ''}; a workflow that has run "
            "stays, so that its history remains readable."
        )
    db = get_db()
    db.delete(workflow)
    db.commit()
    current_app.logger.info("deleted workflow %s", workflow.id)
    audit.record("workflow.delete", workflow, name=workflow.name)


# --- Data sources ---


def check_table_name(value: str) -> str | None:
    if not value:
        return "Name the table."
    if not TABLE_NAME_RE.match(value):
        return "1–63 characters: lowercase letters, digits and _, starting with a letter."
    return None


def upload_limit_mb() -> float:
    return float(current_app.config["UPLOAD_MAX_MB"])


def upload_limit_bytes() -> int:
    return int(upload_limit_mb() * 1024 * 1024)


def upload_limit_message() -> str:
    return f"The file is larger than the upload limit of {upload_limit_mb():g} MB."


def _require_active(warehouse: Warehouse) -> None:
    if warehouse.status != WarehouseStatus.ACTIVE:
        raise DatasetError(
            f"Warehouse {warehouse.name} is {warehouse.status}: choose an active warehouse.",
            field="warehouse_id",
        )


@dataclass
class ImportedTable:
    identifier: str  # e.g. "datasets.orders"
    file_format: str  # "csv" | "parquet"
    rows: int
    columns: list[str]


def import_upload(
    warehouse: Warehouse, table_name: str, stream: IO[bytes], filename: str, uploaded_by: User
) -> ImportedTable:
    """Import an uploaded CSV or Parquet file as `datasets.<table_name>` of the warehouse."""
    _require_active(warehouse)
    if message := check_table_name(table_name):
        raise DatasetError(message, field="table_name")
    with tempfile.TemporaryDirectory(prefix="lakeport-upload-") as directory:
        path = Path(directory) / "upload"
        _save_within_limit(stream, path)
        file_format = dataset_tables.sniff_format(path)
        schema, pieces = (
            dataset_tables.read_csv if file_format == "csv" else dataset_tables.read_parquet
        )(path)
        schema = dataset_tables.iceberg_schema(schema)
        properties = {
            "lakeport.source": f"upload ({file_format})",
            "lakeport.source-file": filename[:200],
            "lakeport.uploaded-by": uploaded_by.email or str(uploaded_by.id),
        }
        rows = dataset_tables.replace_table(
            dataset_tables.warehouse_catalog(warehouse),
            dataset_tables.DATASETS_NAMESPACE,
            table_name,
            schema,
            pieces,
            properties,
        )
    logger.info(
        "imported %s rows of a %s upload into %s.%s of warehouse %s",
        rows,
        file_format,
        dataset_tables.DATASETS_NAMESPACE,
        table_name,
        warehouse.id,
    )
    return ImportedTable(
        f"{dataset_tables.DATASETS_NAMESPACE}.{table_name}", file_format, rows, schema.names
    )


def _save_within_limit(stream: IO[bytes], path: Path) -> None:
    limit, size = upload_limit_bytes(), 0
    with open(path, "wb") as target:
        while chunk := stream.read(COPY_CHUNK_BYTES):
            size += len(chunk)
            if size > limit:
                raise DatasetError(upload_limit_message(), field="file")
            target.write(chunk)


def start_sample_data(owner: User, warehouse: Warehouse, scale_factor: float) -> SampleDataJob:
    """Record a job to generate TPC-H at `scale_factor` into `tpch.*` of the warehouse; the
    worker runs it."""
    _require_active(warehouse)
    if not SCALE_FACTOR_MIN <= scale_factor <= SCALE_FACTOR_MAX:
        raise DatasetError(
            f"Choose a scale factor from {SCALE_FACTOR_MIN:g} to {SCALE_FACTOR_MAX:g}.",
            field="scale_factor",
        )
    dataset_tables.tpchgen_binary()
    # Fails here, visibly, if the catalog is unreachable.
    dataset_tables.warehouse_catalog(warehouse)
    db = get_db()
    job = SampleDataJob(owner_id=owner.id, warehouse_id=warehouse.id, scale_factor=scale_factor)
    db.add(job)
    try:
        db.commit()
    except IntegrityError:  # the partial unique index: a live job for this warehouse exists
        db.rollback()
        raise DatasetError(
            "Sample data is already being written into this warehouse; wait for it to finish."
        ) from None
    logger.info(
        "user %s asked for TPC-H at scale factor %g in warehouse %s",
        owner.id,
        scale_factor,
        warehouse.id,
    )
    return job
