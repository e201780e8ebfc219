"""The contract between the portal and a compute unit, written once: what the portal submits,
where an execution's tables land and what they say about themselves.

Both sides import it: `compute/pipeline.py` writes by it, the unit's Spark host serves by it,
the portal (`app/executions/`, `app/spark_host/`, `app/iceberg_reader.py`)
submits and reads by it. No Spark or Ray here: the portal imports this module without them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from enum import StrEnum, nonmember
from typing import TypedDict

# The Spark host's HTTP API (compute/host_http.py) lives under this path.
HOST_API = "/v1"


@dataclass(frozen=True)
class SparkHostSettings:
    port: int
    namespace: str      # the CU's own Ray namespace
    secret_sha256: str  # the host's key: hex SHA-256 of its unit's secret (compute/host_auth.py)
    # Loopback when the portal reaches the host on loopback (local CUs, also through a forwarded
    # port); otherwise the head node's own address, which the portal reaches.
    bind_loopback: bool = True
    executors: int = 1
    executor_cores: int = 1
    executor_memory: str = "1g"
    placement_strategy: str | None = "SPREAD"
    app_name: str = "lakeport"
    warm_timeout_s: float = 300.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SparkHostSettings:
        return cls(**json.loads(text))


def secret_digest(secret: str) -> str:
    """The Spark host's key: the SHA-256 of its unit's secret (the host never sees the secret)."""
    return hashlib.sha256(secret.encode()).hexdigest()


class RunState(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    FINAL = nonmember((COMPLETED, FAILED, CANCELLED))

# What the portal submits to the unit's Spark host (compute/spark_host.py), with the
# ExecutionSpec as `args`; `result` is the run's summary (`Pipeline.run`).
SUBMIT_CODE = "from compute.pipeline import run_pipeline\nresult = run_pipeline(spark, args, progress)\n"

# The namespaces an execution writes into, in the warehouse chosen for it.
RESULTS, RUNTIME_STATS, CONSOLE_LOGS = "results", "runtime_stats", "console_logs"
NAMESPACES = (RESULTS, RUNTIME_STATS, CONSOLE_LOGS)

# How the catalog is asked to vend storage credentials (a REST catalog header).
ACCESS_DELEGATION_HEADER = "X-Iceberg-Access-Delegation"
ACCESS_DELEGATION = "vended-credentials"


def table_name(namespace: str, execution_id: int, step: str | None = None) -> str:
    """`results.e42_big` for step `Big` of execution 42, `console_logs.e42` without a step."""
    suffix = f"_{step.lower()}" if step else ""
    return f"{namespace}.e{execution_id}{suffix}"


# The table properties every table of an execution carries.
class TableProperty(StrEnum):
    EXECUTION_ID = "lakeport.execution-id"
    WORKFLOW_ID = "lakeport.workflow-id"
    WORKFLOW_NAME = "lakeport.workflow-name"
    WORKFLOW_VERSION = "lakeport.workflow-version"
    USER = "lakeport.user"
    USER_ID = "lakeport.user-id"
    COMPUTE_UNIT = "lakeport.compute-unit"
    COMPUTE_UNIT_ID = "lakeport.compute-unit-id"
    STATUS = "lakeport.status"
    STEP = "lakeport.step"  # result tables only


class TableStatus(StrEnum):
    """`lakeport.status`: only an execution that COMPLETED has tables saying `complete`."""

    RUNNING = "running"        # console_logs while the run goes on
    INCOMPLETE = "incomplete"  # a result table written, its run not finished
    COMPLETE = "complete"
    FAILED = "failed"
    CANCELLED = "cancelled"

# What the portal submits for a warehouse's maintenance (compute/maintenance.py), with the
# MaintenanceSpec as `args`: snapshot expiry and orphan-file clean-up of its datasets.
MAINTENANCE_CODE = "from compute.maintenance import run_maintenance\nresult = run_maintenance(spark, args, progress)\n"

# ---------------------------------------------------------------- lineage
# What a run read and wrote: the run's result carries it as `lineage`, `runtime_stats.e<id>`
# has it per step in its `lineage` column (JSON), the portal keeps the run's on the execution.
# Tables are `namespace.table` in the run's warehouse; snapshot times are epoch milliseconds.
class LineageRead(TypedDict):
    table: str
    snapshot_id: int | None        # None: the table was empty (no snapshot)
    snapshot_at_ms: int | None
    total_records: int | None      # the snapshot's summary: the whole table as read
    total_files: int | None
    total_bytes: int | None


class LineageWrite(TypedDict):
    table: str
    step: str
    snapshot_id: int
    snapshot_at_ms: int
    added_records: int | None      # the commit's snapshot summary
    added_files: int | None
    added_bytes: int | None


class Lineage(TypedDict):
    read: list[LineageRead]
    wrote: list[LineageWrite]
    collected_in_s: float  # what finding the reads took on the unit (the benchmarks report it)


# A re-run on the same inputs adds `pinned` to the execution spec: table → snapshot id. Every
# read of those tables is made at that snapshot (time travel), or the run fails saying why.
PINNED = "pinned"

# Comparing two runs' outputs on a unit: `args` = {"catalog": <as in the execution spec>,
# "warehouse": {"lakekeeper_id": ...}, "pairs": [{"output": step, "a": table, "b": table}],
# "limit": rows}; `result` = {output: {"only_in_a": [rows], "only_in_b": [rows],
# "only_in_a_count": int, "only_in_b_count": int, "columns": [compared columns]} or {"error": why}}.
COMPARE_CODE = "from compute.comparison import run_comparison\nresult = run_comparison(spark, args, progress)\n"
COMPARE_LIMIT_MAX = 500
