"""The states of Lakeport's things, each vocabulary defined once.

A compute unit's state is its cluster's: the backends report it and the unit's row stores it
(`UnitState`). An execution's states are its run's (compute/contract.py `RunState`, what
the unit's Spark host says), plus INITIALIZING, which only the portal knows: the unit is being
made ready and nothing was submitted yet. `execution_state_of` maps the one onto the other.
A console query's (`QueryState`) are its own, lower-case as its API shows them.
A member is its stored value (`"RUNNING" == UnitState.RUNNING`).
"""

from __future__ import annotations

from enum import StrEnum, nonmember

from compute.contract import RunState


class UnitState(StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    FAILED = "FAILED"
    FINAL = nonmember((TERMINATED, FAILED))
    LIVE = nonmember((PENDING, STARTING, RUNNING, TERMINATING))


class ExecutionState(StrEnum):
    QUEUED = RunState.QUEUED.value
    INITIALIZING = "INITIALIZING"
    RUNNING = RunState.RUNNING.value
    COMPLETED = RunState.COMPLETED.value
    FAILED = RunState.FAILED.value
    CANCELLED = RunState.CANCELLED.value
    FINAL = nonmember(RunState.FINAL)
    ALL = nonmember((QUEUED, INITIALIZING, RUNNING, COMPLETED, FAILED, CANCELLED))


def execution_state_of(run_state: str) -> ExecutionState:
    """The execution's state for its run's (the words are the same)."""
    return ExecutionState(RunState(run_state).value)


class JobState:
    """The states of a job the worker runs once (sample data, dataset maintenance, a comparison)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    LIVE = (QUEUED, RUNNING)


class QueryState(StrEnum):
    """A console query's states (app/console/): QUEUED until the worker submits it to the unit,
    RUNNING there, then one final state."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    FINAL = nonmember((COMPLETED, FAILED, CANCELLED))
    LIVE = nonmember((QUEUED, RUNNING))
