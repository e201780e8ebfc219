"""The worker's side of workflows' data sources: a sample-data job generates the eight TPC-H
tables with `tpchgen-cli` and writes them into the warehouse's `tpch` namespace
(app/workflows/dataset_tables.py writes each table), its progress on the job's row. A job whose worker
died is taken over and run again from the start (every table is replaced, so that is safe).
"""

from __future__ import annotations

import json
import logging
import subprocess
import tempfile
from pathlib import Path

from pyiceberg.catalog import Catalog
from sqlmodel import Session

from app import work_registry
from app.db import DATABASE_UNAVAILABLE, engine
from app.models import JobState, SampleDataJob, Warehouse, WarehouseStatus, utcnow
from app.transitions import compare_and_set, set_fields
from app.workflows import dataset_tables

logger = logging.getLogger(__name__)

TPCH_TIMEOUT_SECONDS = 600


def run_sample_data_job(job_id: int) -> None:
    """Generate the tables and write them into the warehouse, the row following along."""
    with Session(engine(), expire_on_commit=False) as db:
        job = db.get(SampleDataJob, job_id)
        warehouse = db.get(Warehouse, job.warehouse_id) if job else None
    if job is None or job.state not in JobState.LIVE:
        return
    if job.state == JobState.RUNNING:
        logger.info(
            "sample-data job %s was left by a worker that stopped: running it again", job_id
        )
    if not compare_and_set(
        SampleDataJob,
        job_id,
        JobState.LIVE,
        state=JobState.RUNNING,
        started_at=utcnow(),
        table_rows="{}",
        step="starting",
    ):
        return
    try:
        if warehouse is None or warehouse.status != WarehouseStatus.ACTIVE:
            raise dataset_tables.DatasetError("The warehouse is no longer active.")
        _generate_sample_data(
            job, dataset_tables.warehouse_catalog(warehouse), dataset_tables.tpchgen_binary()
        )
        _end_sample_data_job(job_id, JobState.DONE)
        logger.info(
            "TPC-H at scale factor %g written into warehouse %s", job.scale_factor, job.warehouse_id
        )
    except DATABASE_UNAVAILABLE:
        raise
    except dataset_tables.DatasetError as error:
        _end_sample_data_job(job_id, JobState.FAILED, error.message)
    except subprocess.CalledProcessError as error:
        _end_sample_data_job(
            job_id, JobState.FAILED, f"tpchgen-cli failed: {(error.stderr or '').strip()[-500:]}"
        )
    except subprocess.TimeoutExpired:
        _end_sample_data_job(
            job_id,
            JobState.FAILED,
            f"Generating took longer than {TPCH_TIMEOUT_SECONDS} s and was stopped.",
        )
    except Exception:
        logger.exception("TPC-H generation into warehouse %s failed", job.warehouse_id)
        _end_sample_data_job(
            job_id,
            JobState.FAILED,
            "Generating the sample data failed unexpectedly; the portal's log has the details.",
        )


def _end_sample_data_job(job_id: int, state: str, error: str = "") -> None:
    compare_and_set(
        SampleDataJob,
        job_id,
        JobState.LIVE,
        state=state,
        error=error,
        ended_at=utcnow(),
        **({"step": "done"} if state == JobState.DONE else {}),
    )


def _generate_sample_data(job: SampleDataJob, catalog: Catalog, binary: str) -> None:
    with tempfile.TemporaryDirectory(prefix="lakeport-tpch-") as directory:
        set_fields(
            SampleDataJob,
            job.id,
            step=f"generating the tables at scale factor {job.scale_factor:g}",
        )
        subprocess.run(
            [
                binary,
                "parquet",
                f"--scale-factor={job.scale_factor}",
                f"--output-dir={directory}",
                "--quiet",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=TPCH_TIMEOUT_SECONDS,
        )
        properties = {
            "lakeport.source": "tpch",
            "lakeport.tpch-scale-factor": f"{job.scale_factor:g}",
        }
        written: dict[str, int] = {}
        tables, namespace = dataset_tables.TPCH_TABLES, dataset_tables.TPCH_NAMESPACE
        for position, name in enumerate(tables, start=1):
            set_fields(
                SampleDataJob,
                job.id,
                step=f"writing {namespace}.{name} ({position} of {len(tables)})",
            )
            schema, pieces = dataset_tables.read_parquet(Path(directory) / f"{name}.parquet")
            written[name] = dataset_tables.replace_table(
                catalog,
                namespace,
                name,
                dataset_tables.iceberg_schema(schema),
                pieces,
                properties,
            )
            set_fields(SampleDataJob, job.id, table_rows=json.dumps(written))


work_registry.pending_source(
    "sample-data",
    work_registry.JOBS + 2,
    lambda: work_registry.live_jobs(SampleDataJob, "sample-data", run_sample_data_job),
)
