"""What the dashboard shows a user: what runs now, what ran last, where data goes, and the
first steps they have not taken yet."""

from __future__ import annotations

from dataclasses import dataclass

from app.compute_units.queries import user_compute_units
from app.executions.queries import ExecutionRow, user_executions
from app.models import ComputeUnit, UnitState, User, Warehouse
from app.warehouses.queries import user_warehouses
from app.workflows.queries import user_workflows

RECENT_EXECUTIONS = 5


@dataclass(frozen=True)
class FirstStep:
    key: str
    label: str
    endpoint: str  # where to take it
    done: bool


@dataclass(frozen=True)
class Overview:
    live_units: list[ComputeUnit]
    recent_executions: list[ExecutionRow]
    warehouses: list[Warehouse]
    first_steps: list[FirstStep]

    @property
    def getting_started(self) -> bool:
        """The checklist shows until every first step is done."""
        return not all(step.done for step in self.first_steps)


def overview_of(user: User) -> Overview:
    units = user_compute_units(user)
    executions = user_executions(user)
    warehouses = user_warehouses(user)
    workflows = user_workflows(user)
    first_steps = [
        FirstStep("warehouse", "Register a warehouse", "warehouses.new", bool(warehouses)),
        FirstStep("compute-unit", "Start a compute unit", "compute_units.new", bool(units)),
        FirstStep("workflow", "Create a workflow", "workflows.new", bool(workflows)),
        FirstStep("execution", "Run it", "workflows.index", bool(executions)),
    ]
    return Overview(
        live_units=[cu for cu in units if cu.state in UnitState.LIVE],
        recent_executions=executions[:RECENT_EXECUTIONS],
        warehouses=warehouses,
        first_steps=first_steps,
    )
