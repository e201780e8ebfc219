"""What a run on a compute unit is given: the ExecutionSpec, and its catalog binding with a
token that acts as the run's user for its one warehouse (compute/execution_spec.py reads it on
the unit). Executions, comparisons and dataset maintenance all bind the catalog this way.
"""
from __future__ import annotations

import json

from flask import current_app

from app.extensions import lakekeeper
from app.lakekeeper import LakekeeperError
from app.models import ComputeUnit, Execution, User, Warehouse, Workflow, WorkflowVersion
from compute.contract import ACCESS_DELEGATION, PINNED


class NoCatalogToken(Exception):
    """The catalog gave no token for the run; the message says why, for its user."""


def execution_token(warehouse: Warehouse, owner: User) -> str:
    """A short-lived catalog token acting as the executing user, for this one warehouse: the
    catalog attributes the run's calls to that user and allows what their grants allow (the
    warehouse they own), never the portal's service identity."""
    try:
        return lakekeeper().user_token(owner.subject, warehouse.lakekeeper_id).access_token
    except LakekeeperError as error:
        raise NoCatalogToken(f"no catalog token for the execution: {error.user_message}") from None


def execution_spec(execution: Execution, workflow: Workflow, version: WorkflowVersion, owner: User,
                   cu: ComputeUnit, warehouse: Warehouse, token: str) -> dict:
    """The ExecutionSpec: everything the compute unit needs to run this execution, and no more."""
    return {
        "execution_id": execution.id,
        "workflow": {"id": workflow.id, "name": workflow.name, "version": version.version},
        "user": {"id": owner.id, "email": owner.email},
        "compute_unit": {"id": cu.id, "name": cu.name},
        "warehouse": {"id": warehouse.id, "name": warehouse.name, "lakekeeper_id": warehouse.lakekeeper_id},
        "catalog": catalog_spec(warehouse, token),
        "steps": json.loads(version.steps),
        PINNED: json.loads(execution.pinned_to or "{}").get("tables") or {},
    }


def catalog_spec(warehouse: Warehouse, token: str) -> dict:
    """How a unit reaches `warehouse` through the catalog with `token` (see execution_token)."""
    config = current_app.config
    project_id = config["LAKEKEEPER_PROJECT_ID"]
    return {
        "uri": f"{config['LAKEKEEPER_URL'].rstrip('/')}/catalog",
        # Lakekeeper resolves `<project>/<name>` in a project other than its default one.
        "warehouse": f"{project_id}/{warehouse.lakekeeper_name}" if project_id else warehouse.lakekeeper_name,
        "token": token,
        "access_delegation": ACCESS_DELEGATION,
    }
