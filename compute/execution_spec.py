"""The execution spec: what the portal submits with `SUBMIT_CODE` (compute/contract.py) as a
run's `args`, parsed and checked on the unit (`ExecutionSpec.from_json`), and its steps.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


from compute.contract import (
    ACCESS_DELEGATION,
    PINNED,
    TableProperty,
    TableStatus,
    table_name,
)
from compute.runs import RunFailed


STEP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


@dataclass(frozen=True)
class Step:
    name: str
    kind: str  # "sql" or "python"
    code: str
    output: bool

    @property
    def table_name(self) -> str:
        return self.name.lower()


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
            steps = tuple(Step(str(s["name"]), str(s["kind"]), str(s["code"]), bool(s.get("output", False)))
                          for s in args["steps"])
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
        names = [step.name.lower() for step in steps]
        for step in steps:
            if not STEP_NAME.fullmatch(step.name):
                raise RunFailed(f"step name {step.name!r} is not an identifier (letters, digits, _)")
            if step.kind not in ("sql", "python"):
                raise RunFailed(f"step {step.name!r}: kind must be 'sql' or 'python', not {step.kind!r}")
            if names.count(step.name.lower()) > 1:
                raise RunFailed(f"step name {step.name!r} is used twice")
        return spec

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
