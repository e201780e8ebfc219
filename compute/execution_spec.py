"""The execution spec and its steps, one model for both sides: the portal stores a workflow's
steps as `Step`s and builds the spec (`ExecutionSpec.to_json`) that it submits with `SUBMIT_CODE`
(compute/contract.py) as a run's `args`; the unit parses and checks it again
(`ExecutionSpec.from_json`), since what reaches it is only JSON. No Spark or Ray here.
"""
from __future__ import annotations

import keyword
import re
from dataclasses import asdict, dataclass

from compute.contract import (
    ACCESS_DELEGATION,
    PINNED,
    TableProperty,
    TableStatus,
    table_name,
)
from compute.runs import RunFailed


# A step's name: the editor asks for it, the unit checks it again, its output table is named after it.
STEP_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
# `spark` is a Python step's first parameter; Python keywords cannot be parameter names.
RESERVED_STEP_NAMES = frozenset({"spark", *keyword.kwlist})
STEP_KINDS = {"sql": "Spark SQL", "python": "PySpark function"}


@dataclass(frozen=True)
class Step:
    """One step, as a workflow version stores it and the unit runs it."""

    name: str
    kind: str  # a key of STEP_KINDS
    code: str
    output: bool = False

    @property
    def table_name(self) -> str:
        return self.name

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Step:
        return cls(name=str(data["name"]), kind=str(data["kind"]), code=str(data["code"]),
                   output=bool(data.get("output", False)))


@dataclass(frozen=True)
class ExecutionSpec:
    execution_id: int
    workflow: dict
    user: dict
    compute_unit: dict
    warehouse: dict
    catalog: dict
    steps: tuple[Step, ...]
    pinned: dict[str, int]  # a re-run's inputs: table → snapshot id (compute/contract.py PINNED)

    @classmethod
    def from_json(cls, args: dict) -> ExecutionSpec:
        try:
            steps = tuple(Step.from_dict(step) for step in args["steps"])
            pinned = {str(table).lower(): int(snapshot) for table, snapshot in dict(args.get(PINNED) or {}).items()}
            spec = cls(int(args["execution_id"]), dict(args["workflow"]), dict(args["user"]),
                       dict(args["compute_unit"]), dict(args["warehouse"]), dict(args["catalog"]), steps, pinned)
            for key in ("uri", "warehouse", "token"):
                if not spec.catalog.get(key):
                    raise ValueError(f"catalog.{key} is missing")
            if not spec.warehouse.get("lakekeeper_id"):
                raise ValueError("warehouse.lakekeeper_id is missing")
        except (KeyError, TypeError, ValueError) as error:
            raise RunFailed(f"invalid execution spec: {type(error).__name__}: {error}") from None
        if spec.catalog.get("access_delegation", ACCESS_DELEGATION) != ACCESS_DELEGATION:
            raise RunFailed(f"the catalog must vend storage credentials (access_delegation={ACCESS_DELEGATION!r})")
        if not steps:
            raise RunFailed("the workflow has no steps")
        names = [step.name for step in steps]
        for step in steps:
            if not STEP_NAME.fullmatch(step.name) or step.name in RESERVED_STEP_NAMES:
                raise RunFailed(f"step name {step.name!r} is not a step name (lowercase letters, digits, _)")
            if step.kind not in STEP_KINDS:
                raise RunFailed(f"step {step.name!r}: kind must be 'sql' or 'python', not {step.kind!r}")
            if names.count(step.name) > 1:
                raise RunFailed(f"step name {step.name!r} is used twice")
        return spec

    def to_json(self) -> dict:
        """The spec as the portal submits it (what `from_json` reads back)."""
        return {"execution_id": self.execution_id, "workflow": self.workflow, "user": self.user,
                "compute_unit": self.compute_unit, "warehouse": self.warehouse, "catalog": self.catalog,
                "steps": [step.to_dict() for step in self.steps], PINNED: self.pinned}

    def table(self, namespace: str, step: Step | None = None) -> str:
        return table_name(namespace, self.execution_id, step.name if step else None)

    def properties(self, status: TableStatus, step: Step | None = None) -> dict[str, str]:
        """What every table of this execution says about where it comes from."""
        properties = {
            TableProperty.EXECUTION_ID: str(self.execution_id),
            TableProperty.WORKFLOW_ID: str(self.workflow.get("id", "")),
            TableProperty.WORKFLOW_NAME: str(self.workflow.get("name", "")),
            TableProperty.WORKFLOW_VERSION: str(self.workflow.get("version", "")),
            TableProperty.USER: str(self.user.get("email", "")),
            TableProperty.USER_ID: str(self.user.get("id", "")),
            TableProperty.COMPUTE_UNIT: str(self.compute_unit.get("name", "")),
            TableProperty.COMPUTE_UNIT_ID: str(self.compute_unit.get("id", "")),
            TableProperty.STATUS: status,
        }
        if step is not None:
            properties[TableProperty.STEP] = step.name
        return {str(key): str(value) for key, value in properties.items()}
