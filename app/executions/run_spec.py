"""What an execution's run is given: its ExecutionSpec (compute/contract.py, the one model of
a spec and its steps), with the catalog binding of its one warehouse, and where its code runs: a
workflow its user did not write (shared with them to run) runs in a sandbox of its own on the unit,
apart from everything the unit's warm host holds (compute/run/sandboxed_runs.py)."""

from __future__ import annotations

import json

from app.compute_units import door
from app.models import ComputeUnit, Execution, User, Warehouse, Workflow, WorkflowVersion
from compute.contract import ExecutionSpec, Isolation, Step


def execution_spec(
    execution: Execution,
    workflow: Workflow,
    version: WorkflowVersion,
    owner: User,
    cu: ComputeUnit,
    warehouse: Warehouse,
    token: str,
) -> ExecutionSpec:
    """Everything the compute unit needs to run this execution, and no more: typed until the
    transport to the unit's Spark host serializes it."""
    return ExecutionSpec(
        execution_id=execution.id,
        workflow={"id": workflow.id, "name": workflow.name, "version": version.version},
        user={"id": owner.id, "email": owner.email},
        compute_unit={"id": cu.id, "name": cu.name},
        warehouse={
            "id": warehouse.id,
            "name": warehouse.name,
            "lakekeeper_id": warehouse.lakekeeper_id,
        },
        catalog=door.catalog_binding(warehouse, token),
        steps=tuple(Step.from_dict(step) for step in json.loads(version.steps)),
        pinned=json.loads(execution.pinned_to or "{}").get("tables") or {},
        isolation=Isolation.PROCESS if workflow.owner_id == owner.id else Isolation.SANDBOX,
    )
