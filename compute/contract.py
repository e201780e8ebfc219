"""The contract between the portal and a compute unit, written once: the Spark host's API, its
settings, key and run states; what the portal submits (the execution spec, its typed parts and
its steps, one model for both sides: the portal builds it with `ExecutionSpec.to_json`, the unit
reads and checks it again with `ExecutionSpec.from_json`, since what reaches it is only JSON, in
the one wire format portals and units of different versions share); where an execution's tables
land and what they say about themselves.

Both sides import it: `compute/run/pipeline.py` writes by it, the unit's Spark host serves by it,
the portal (`app/executions/`, `app/spark_host/`, `app/iceberg_reader.py`)
submits and reads by it. No Spark or Ray here: the portal imports this module without them.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from enum import StrEnum, nonmember
from typing import NotRequired, TypedDict, TypeVar, get_type_hints

# The Spark host's HTTP API (compute/host/host_http.py) lives under this path.
HOST_API = "/v1"


@dataclass(frozen=True)
class SparkHostSettings:
    port: int
    namespace: str  # the CU's own Ray namespace
    secret_sha256: (
        str  # the host's key: hex SHA-256 of its unit's secret (compute/host/host_auth.py)
    )
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


# How a relaunched Spark host learns its present key, when it is not the one its unit started
# with (a pooled unit's host takes its own at the claim): compute/node/unit_init.py sets it.
HOST_KEY_ENV = "LAKEPORT_SPARK_HOST_KEY"


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


class JobKind(StrEnum):
    """What the portal asks a unit's Spark host to run: a named job, dispatched on the host to
    its function (compute/run/jobs.py), with `args` (a JSON object, sent sealed); the run's
    `result` is what the function returns."""

    # A workflow's run: `args` is the ExecutionSpec, `result` the run's summary
    # (compute/run/pipeline.py). It runs in a process of its own, as its `isolation` says.
    EXECUTION = "execution"
    # Two runs' outputs compared (compute/run/comparison.py; `args` and `result` below).
    COMPARISON = "comparison"
    # A warehouse's snapshot expiry and orphan-file clean-up (compute/run/maintenance.py), with
    # the MaintenanceSpec as `args`.
    MAINTENANCE = "maintenance"
    # One SQL statement of the console (compute/run/query.py, whose docstring has `args` and `result`).
    QUERY = "query"
    # Code of the project's tests and benchmarks, run in the warm host as a step's code is
    # compiled (compute/run/step_code.py `run_probe`): `args` = {"code": source, "args": {...}}.
    # The portal never submits one.
    PROBE = "probe"


class Isolation(StrEnum):
    """Where an execution's code runs on its unit (the spec's `isolation`; compute/host/spark_host.py)."""

    # The unit owner's own workflow: a child forked from the warm host, ended with the run
    # (compute/run/forked_runs.py).
    PROCESS = "process"
    # A workflow another user wrote: a fresh process in a sandbox of its own, with a Spark session
    # of its own, ended with the run; nothing of the warm host is reachable (compute/run/sandboxed_runs.py).
    SANDBOX = "sandbox"


ISOLATION = "isolation"

# The namespaces an execution writes into, in the warehouse chosen for it.
RESULTS, RUNTIME_STATS, CONSOLE_LOGS = "results", "runtime_stats", "console_logs"

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

    RUNNING = "running"  # console_logs while the run goes on
    INCOMPLETE = "incomplete"  # a result table written, its run not finished
    COMPLETE = "complete"
    FAILED = "failed"
    CANCELLED = "cancelled"


# ---------------------------------------------------------------- lineage
# What a run read and wrote: the run's result carries it as `lineage`, `runtime_stats.e<id>`
# has it per step in its `lineage` column (JSON), the portal keeps the run's on the execution.
# Tables are `namespace.table` in the run's warehouse; snapshot times are epoch milliseconds.
class LineageRead(TypedDict):
    table: str
    snapshot_id: int | None  # None: the table was empty (no snapshot)
    snapshot_at_ms: int | None
    total_records: int | None  # the snapshot's summary: the whole table as read
    total_files: int | None
    total_bytes: int | None


class LineageWrite(TypedDict):
    table: str
    step: str
    snapshot_id: int
    snapshot_at_ms: int
    added_records: int | None  # the commit's snapshot summary
    added_files: int | None
    added_bytes: int | None


class LineageChange(TypedDict):
    """An incremental read (`changes('ns.table')`): the rows appended after `from_snapshot_id`
    (exclusive) up to `to_snapshot_id` (inclusive). `from_snapshot_id` None: the first read,
    the whole table at `to_snapshot_id`; `to_snapshot_id` None: the table had no snapshot."""

    table: str
    from_snapshot_id: int | None
    to_snapshot_id: int | None
    to_snapshot_at_ms: int | None
    appends: int  # the append snapshots in the range (0 for a first read)
    rows: int | None  # the rows read: appended in the range, or the whole table at first


class Lineage(TypedDict):
    read: list[LineageRead]
    wrote: list[LineageWrite]
    # The incremental reads, one per table (runs recorded before they existed have none).
    changes: NotRequired[list[LineageChange]]
    collected_in_s: float  # what finding the reads took on the unit (the benchmarks report it)


# A re-run on the same inputs adds `pinned` to the execution spec: table → snapshot id. Every
# read of those tables is made at that snapshot (time travel), or the run fails saying why.
PINNED = "pinned"

# Where each table's increment starts (`changes('ns.table')`, compute/run/lineage.py): the spec's
# `changes`, table → the snapshot this workflow last read it at (exclusive), which the portal finds
# in the lineage of the user's last completed run of the workflow into the warehouse
# (app/executions/run_spec.py). A table not named, or named with None, is read whole. A pinned
# re-run carries the starts its original run read from, and its pins as the ends.
CHANGES = "changes"

# Comparing two runs' outputs on a unit (JobKind.COMPARISON): `args` = {"catalog": <as in the execution spec>,
# "warehouse": {"lakekeeper_id": ...}, "pairs": [{"output": step, "a": table, "b": table}],
# "limit": rows}; `result` = {output: {"only_in_a": [rows], "only_in_b": [rows],
# "only_in_a_count": int, "only_in_b_count": int, "columns": [compared columns]} or {"error": why}}.
COMPARE_LIMIT_MAX = 500


# --- The execution spec and its steps ------------------------------------------------------


class InvalidSpec(ValueError):
    """The spec a unit was given is not one the portal builds; the message says why."""


# A step's name: the editor asks for it, the unit checks it again, its output table is named after it.
STEP_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
# `spark` is a Python step's first parameter; Python keywords cannot be parameter names.
RESERVED_STEP_NAMES = frozenset({"spark", *keyword.kwlist})
STEP_KINDS = {"sql": "Spark SQL", "python": "PySpark function"}


# A named output: the table of the run's warehouse a step publishes to (`namespace.table`),
# and how its rows go there (compute/run/publish.py). The run's own namespaces are not targets.
PUBLISH_TABLE = re.compile(r"[a-z][a-z0-9_]{0,62}\.[a-z][a-z0-9_]{0,62}")
PUBLISH_MODES = {
    "append": "Append its rows",
    "overwrite": "Replace the table's rows",
    "overwrite-partitions": "Replace the partitions its rows fall in",
    "merge": "Merge on key columns",
}
# A key column a merge matches rows on (a Spark column name, quoted when the merge is made).
KEY_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_KEY_COLUMNS = 10
RUN_NAMESPACES = frozenset({RESULTS, RUNTIME_STATS, CONSOLE_LOGS})


@dataclass(frozen=True)
class Publish:
    """Where a step publishes its rows: `table` is `namespace.table`, `mode` a key of PUBLISH_MODES."""

    table: str
    mode: str = "append"
    # Quality checks its rows must pass before they are published (compute/run/checks.py): as
    # given, JSON objects (or the editor's text when it is no JSON list), checked there.
    checks: tuple | str = ()
    # The key columns a merge matches rows on (mode "merge" only): a row of the step whose keys
    # match a row of the table replaces it, any other is added.
    keys: tuple[str, ...] = ()

    def problem(self) -> str | None:
        """Why this is no publish target Lakeport accepts, or None."""
        if not PUBLISH_TABLE.fullmatch(self.table):
            return (
                "Name the table as namespace.table: each part 1–63 lowercase letters, digits "
                "and _, starting with a letter."
            )
        if self.table.split(".")[0] in RUN_NAMESPACES:
            return (
                f"“{self.table.split('.')[0]}” holds each run's own tables; publish to another "
                "namespace."
            )
        if self.mode not in PUBLISH_MODES:
            return f"The mode is one of: {', '.join(PUBLISH_MODES)}."
        if self.mode == "merge" and not self.keys:
            return "Name the key columns a merge matches rows on, e.g. order_id, day."
        if self.keys and self.mode != "merge":
            return "Key columns are for the merge mode only; clear them or choose merge."
        if len(self.keys) > MAX_KEY_COLUMNS:
            return f"At most {MAX_KEY_COLUMNS} key columns."
        for key in self.keys:
            if not KEY_COLUMN.fullmatch(key):
                return (
                    f"“{key}” is no column name: letters, digits and _, not starting with a digit."
                )
        if len({key.lower() for key in self.keys}) < len(self.keys):
            return "A key column is named twice."
        return None


def _checks(value: object) -> tuple | str:
    """A publish target's checks as kept: a list as a tuple, none as (), anything else as given
    (its check says what is wrong)."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value if isinstance(value, str) else json.dumps(value)


def key_columns(value: object) -> tuple[str, ...]:
    """A merge's key columns: a list, or the editor's text (comma-separated); none as ()."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(key for key in (str(item).strip() for item in value) if key)


@dataclass(frozen=True)
class Step:
    """One step, as a workflow version stores it and the unit runs it. `output`: its rows are
    kept as the run's own result table; `publish`: they are published to a named table."""

    name: str
    kind: str  # a key of STEP_KINDS
    code: str
    output: bool = False
    publish: Publish | None = None

    def to_dict(self) -> dict:
        data = asdict(self)
        if self.publish is None:  # a step without one is stored as before
            del data["publish"]
        elif isinstance(self.publish.checks, tuple):
            data["publish"]["checks"] = list(self.publish.checks)
            if not self.publish.checks:
                del data["publish"]["checks"]
        if self.publish is not None:
            if self.publish.keys:
                data["publish"]["keys"] = list(self.publish.keys)
            else:
                del data["publish"]["keys"]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Step:
        publish = data.get("publish")
        if isinstance(publish, Publish):
            publish = (publish.table, publish.mode, publish.checks, publish.keys)
        elif isinstance(publish, dict):
            publish = (
                publish.get("table"),
                publish.get("mode", "append"),
                publish.get("checks"),
                publish.get("keys"),
            )
        elif publish is not None:
            raise TypeError(f"publish must be an object, not {type(publish).__name__}")
        return cls(
            name=str(data["name"]),
            kind=str(data["kind"]),
            code=str(data["code"]),
            output=bool(data.get("output", False)),
            publish=Publish(
                str(publish[0] or ""),
                str(publish[1] or ""),
                _checks(publish[2]),
                key_columns(publish[3]),
            )
            if publish
            else None,
        )


# The spec's parts: what the portal says of the run (app/executions/run_spec.py), each a JSON object
# on the wire with exactly these members. `ExecutionSpec.from_json` checks that each is there, of
# its type (`_spec_part`); members a unit does not know are passed over.


@dataclass(frozen=True)
class SpecWorkflow:
    """The workflow version the run is of."""

    id: int
    name: str
    version: int


@dataclass(frozen=True)
class SpecUser:
    """The user the run acts as."""

    id: int
    email: str


@dataclass(frozen=True)
class SpecComputeUnit:
    """The compute unit the run is on."""

    id: int
    name: str


@dataclass(frozen=True)
class SpecWarehouse:
    """The portal's warehouse the run reads and writes: `lakekeeper_id` is the catalog's id of it,
    which the unit keeps the warehouse's binding under (compute/host/catalog_cache.py)."""

    id: int
    name: str
    lakekeeper_id: str


@dataclass(frozen=True)
class SpecCatalog:
    """How the run reaches its warehouse through the catalog (app/compute_units/door.py
    `catalog_binding`): the catalog's `uri`, its name of the warehouse (`<project>/<name>` in a
    project other than the default one), the run's catalog token (never in a repr) and how storage
    credentials are asked for."""

    uri: str
    warehouse: str
    token: str = field(repr=False)
    access_delegation: str = ACCESS_DELEGATION


_Part = TypeVar("_Part")


def _spec_part(kind: type[_Part], args: dict, part: str) -> _Part:
    """The spec's member `part`, a JSON object, as a `kind`: each member of `kind` without a
    default there, each there of its type (an integer is no boolean). Raises KeyError, TypeError
    or ValueError naming what is wrong, never a value (one of them is the token)."""
    data = args[part]
    if not isinstance(data, dict):
        raise TypeError(f"{part} must be an object, not {type(data).__name__}")
    types, values = get_type_hints(kind), {}
    for member in fields(kind):
        if member.name not in data:
            if member.default is MISSING:
                raise ValueError(f"{part}.{member.name} is missing")
            continue
        value, expected = data[member.name], types[member.name]
        if not isinstance(value, expected) or isinstance(value, bool):
            named = "a string" if expected is str else "an integer"
            raise TypeError(f"{part}.{member.name} must be {named}, not {type(value).__name__}")
        values[member.name] = value
    return kind(**values)


@dataclass(frozen=True)
class ExecutionSpec:
    """What a unit is given to run one execution. On the wire (`to_json`, `from_json`) each part
    is a JSON object of its members, as the portal has always sent it."""

    execution_id: int
    workflow: SpecWorkflow
    user: SpecUser
    compute_unit: SpecComputeUnit
    warehouse: SpecWarehouse
    catalog: SpecCatalog
    steps: tuple[Step, ...]
    pinned: dict[str, int]  # a re-run's inputs: table → snapshot id (compute/contract.py PINNED)
    isolation: str = Isolation.PROCESS  # where its code runs (Isolation)
    # Incremental reads' starts: table → snapshot id, None for the whole table (CHANGES).
    changes: dict[str, int | None] = field(default_factory=dict)

    @classmethod
    def from_json(cls, args: dict) -> ExecutionSpec:
        try:
            steps = tuple(Step.from_dict(step) for step in args["steps"])
            pinned = {
                str(table).lower(): int(snapshot)
                for table, snapshot in dict(args.get(PINNED) or {}).items()
            }
            spec = cls(
                int(args["execution_id"]),
                _spec_part(SpecWorkflow, args, "workflow"),
                _spec_part(SpecUser, args, "user"),
                _spec_part(SpecComputeUnit, args, "compute_unit"),
                _spec_part(SpecWarehouse, args, "warehouse"),
                _spec_part(SpecCatalog, args, "catalog"),
                steps,
                pinned,
                Isolation(args.get(ISOLATION, Isolation.PROCESS)),
                {
                    str(table).lower(): None if snapshot is None else int(snapshot)
                    for table, snapshot in dict(args.get(CHANGES) or {}).items()
                },
            )
            for key in ("uri", "warehouse", "token"):
                if not getattr(spec.catalog, key):
                    raise ValueError(f"catalog.{key} is missing")
            if not spec.warehouse.lakekeeper_id:
                raise ValueError("warehouse.lakekeeper_id is missing")
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidSpec(f"invalid execution spec: {type(error).__name__}: {error}") from None
        if spec.catalog.access_delegation != ACCESS_DELEGATION:
            raise InvalidSpec(
                f"the catalog must vend storage credentials (access_delegation={ACCESS_DELEGATION!r})"
            )
        if not steps:
            raise InvalidSpec("the workflow has no steps")
        names = [step.name for step in steps]
        for step in steps:
            if not STEP_NAME.fullmatch(step.name) or step.name in RESERVED_STEP_NAMES:
                raise InvalidSpec(
                    f"step name {step.name!r} is not a step name (lowercase letters, digits, _)"
                )
            if step.kind not in STEP_KINDS:
                raise InvalidSpec(
                    f"step {step.name!r}: kind must be 'sql' or 'python', not {step.kind!r}"
                )
            if names.count(step.name) > 1:
                raise InvalidSpec(f"step name {step.name!r} is used twice")
            if step.publish is not None and (problem := step.publish.problem()):
                raise InvalidSpec(f"step {step.name!r}: publish: {problem}")
        published = [step.publish.table for step in steps if step.publish]
        if len(set(published)) < len(published):
            raise InvalidSpec("two steps publish to one table")
        return spec

    def to_json(self) -> dict:
        """The spec as the portal submits it (what `from_json` reads back)."""
        return {
            "execution_id": self.execution_id,
            "workflow": asdict(self.workflow),
            "user": asdict(self.user),
            "compute_unit": asdict(self.compute_unit),
            "warehouse": asdict(self.warehouse),
            "catalog": asdict(self.catalog),
            "steps": [step.to_dict() for step in self.steps],
            PINNED: self.pinned,
            ISOLATION: str(self.isolation),
            CHANGES: self.changes,
        }

    def table(self, namespace: str, step: Step | None = None) -> str:
        return table_name(namespace, self.execution_id, step.name if step else None)

    def properties(self, status: TableStatus, step: Step | None = None) -> dict[str, str]:
        """What every table of this execution says about where it comes from."""
        properties = {
            TableProperty.EXECUTION_ID: str(self.execution_id),
            TableProperty.WORKFLOW_ID: str(self.workflow.id),
            TableProperty.WORKFLOW_NAME: self.workflow.name,
            TableProperty.WORKFLOW_VERSION: str(self.workflow.version),
            TableProperty.USER: self.user.email,
            TableProperty.USER_ID: str(self.user.id),
            TableProperty.COMPUTE_UNIT: self.compute_unit.name,
            TableProperty.COMPUTE_UNIT_ID: str(self.compute_unit.id),
            TableProperty.STATUS: status,
        }
        if step is not None:
            properties[TableProperty.STEP] = step.name
        return {str(key): str(value) for key, value in properties.items()}
