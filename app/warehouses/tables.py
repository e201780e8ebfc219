"""A warehouse's tables as its table explorer shows them: namespaces with Lakeport's internal
ones folded away, and one table's schema, properties, snapshots and first rows. Reading goes
through `app.iceberg_reader`, the portal's one way into Iceberg."""

from __future__ import annotations

import re

from flask import url_for

from app import iceberg_reader
from app.db import get_db
from app.iceberg_catalogs import catalog_for
from app.iceberg_reader import Page, TableOverview
from app.models import ComputeUnit, Execution, User, Warehouse, Workflow

# What every execution writes beside its results: useful, but not what people look for first.
INTERNAL_NAMESPACES = ("runtime_stats", "console_logs")
TABLE_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)+$")
# Properties Lakeport writes on the tables it makes, and the page each id leads to.
_LINKED_PROPERTIES = {
    "lakeport.execution-id": (Execution, "executions.detail", "execution_id"),
    "lakeport.workflow-id": (Workflow, "workflows.detail", "workflow_id"),
    "lakeport.compute-unit-id": (ComputeUnit, "compute_units.detail", "cu_id"),
}


def is_internal(namespace: str) -> bool:
    return namespace.split(".")[0] in INTERNAL_NAMESPACES


def valid_table_name(name: str) -> bool:
    return bool(TABLE_NAME_RE.match(name)) and len(name) <= 512


def overview(warehouse: Warehouse, name: str) -> TableOverview:
    return iceberg_reader.table_overview(catalog_for(warehouse), name)


def preview(warehouse: Warehouse, name: str, page: int, size: int) -> Page:
    return iceberg_reader.read_page(catalog_for(warehouse), name, page, size)


def property_links(properties: dict[str, str], owner: User) -> dict[str, str]:
    """Property → URL for Lakeport's tags that name an execution, workflow or compute unit the
    viewer owns (others are shown as plain text)."""
    links = {}
    for key, (model, endpoint, argument) in _LINKED_PROPERTIES.items():
        value = properties.get(key, "")
        if not value.isdigit():
            continue
        row = get_db().get(model, int(value))
        if row is not None and row.owner_id == owner.id:
            links[key] = url_for(endpoint, **{argument: row.id})
    return links
