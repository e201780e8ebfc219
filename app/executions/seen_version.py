"""A run runs the workflow version its runner saw, and says whose code that is.

The run form and the API's start name the version the runner saw (`version`). A start runs only
if that is still the workflow's latest: a version saved in between refuses it (`VersionChanged`,
nothing queued), and the runner is shown what changed (`changes_between`) before trying again.
A start that names no version (an API client older than this rule) runs the latest only when the
workflow is the runner's own, their own code; someone else's workflow must be named at the
version its runner reviewed. The version chosen here is the one recorded on the execution
(`Execution.workflow_version_id`), and the worker runs that row's steps, never "the latest".

Running someone else's workflow runs its owner's code with the runner's credentials (their unit,
their catalog token, their warehouse): `code_author` names that owner for the run form, the
execution's page and the API.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

from app.db import get_db
from app.executions.service import RunRefused
from app.models import Execution, User, Workflow, WorkflowVersion
from app.workflows.service import latest_version, version_of

# A changed step's diff shows at most this many lines (a step's code may be 100 000 characters).
MAX_DIFF_LINES = 400


class VersionChanged(RunRefused):
    """The runner saw `seen` (None: named no version) but the workflow's latest is `latest`."""

    def __init__(self, seen: int | None, latest: int) -> None:
        message = (
            f"This workflow's latest version is {latest}, not the version {seen} you saw: nothing was started."
            if seen is not None
            else f"Name the version you reviewed: this workflow is someone else's, and its latest is {latest}."
        )
        super().__init__(message, "version")
        self.seen, self.latest = seen, latest


def version_to_run(runner: User, workflow: Workflow, seen: int | None) -> WorkflowVersion | None:
    """The version a start by `runner` runs, having seen version `seen`: the latest, if `seen` is
    it (or names nothing and the workflow is the runner's own). None while nothing is saved."""
    latest = latest_version(workflow)
    if latest is None:
        return None
    if seen == latest.version or (seen is None and workflow.owner_id == runner.id):
        return latest
    raise VersionChanged(seen, latest.version)


@dataclass(frozen=True)
class StepChange:
    """How one step differs between two versions: `change` is added, removed or changed;
    `lines` the unified diff of its code ((mark, text), mark one of " ", "+", "-", "@")."""

    name: str
    change: str
    details: tuple[str, ...]
    lines: tuple[tuple[str, str], ...]
    truncated: bool = False


def _steps(version: WorkflowVersion | None) -> dict[str, dict]:
    return (
        {}
        if version is None
        else {step["name"]: step for step in json.loads(version.steps or "[]")}
    )


def _code_diff(before: str, after: str, name: str) -> tuple[tuple[tuple[str, str], ...], bool]:
    lines = []
    for line in difflib.unified_diff(
        before.splitlines(),
        after.splitlines(),
        f"{name} (before)",
        f"{name} (after)",
        lineterm="",
        n=2,
    ):
        if line.startswith(("---", "+++")):
            continue
        lines.append(("@", line) if line.startswith("@@") else (line[:1] or " ", line[1:]))
    return tuple(lines[:MAX_DIFF_LINES]), len(lines) > MAX_DIFF_LINES


def changes_between(workflow: Workflow, seen: int | None, latest: int) -> list[StepChange]:
    """Each step added, removed or changed from version `seen` to version `latest`, in the latest
    version's order (removed ones last); [] when `seen` is not a version of the workflow."""
    before_version = version_of(workflow, seen) if seen is not None else None
    if before_version is None:
        return []
    before, after = _steps(before_version), _steps(version_of(workflow, latest))
    changes = []
    for name, step in after.items():
        old = before.get(name)
        if old is None:
            lines, truncated = _code_diff("", step.get("code", ""), name)
            changes.append(StepChange(name, "added", (), lines, truncated))
            continue
        details = tuple(
            f"{field}: {old.get(field)} → {step.get(field)}"
            for field in ("kind", "output")
            if old.get(field) != step.get(field)
        )
        if old.get("code") != step.get("code") or details:
            lines, truncated = _code_diff(old.get("code", ""), step.get("code", ""), name)
            changes.append(StepChange(name, "changed", details, lines, truncated))
    for name, old in before.items():
        if name not in after:
            lines, truncated = _code_diff(old.get("code", ""), "", name)
            changes.append(StepChange(name, "removed", (), lines, truncated))
    return changes


def code_author(runner_id: int, workflow: Workflow | None) -> User | None:
    """The workflow's owner, whose code runs, when that is not the runner; None for one's own."""
    if workflow is None or workflow.owner_id == runner_id:
        return None
    return get_db().get(User, workflow.owner_id)


def author_label(author: User) -> str:
    """How a code author is named: their email, else their name."""
    return author.email or author.display_name


def execution_code_author(execution: Execution) -> str | None:
    """Who wrote the code `execution` ran with its owner's credentials (None: its owner did)."""
    author = code_author(execution.owner_id, get_db().get(Workflow, execution.workflow_id))
    return author_label(author) if author else None
