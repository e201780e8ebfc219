"""What the warehouse pages read: a user's warehouses, a warehouse's namespaces and tables as
the table explorer shows them (Lakeport's internal namespaces folded away), and one table's
schema, properties, snapshots and first rows. Tables are read through `app.iceberg_reader`, the
portal's one way into Iceberg; the listing through Lakekeeper's API."""

from __future__ import annotations

import re
from dataclasses import dataclass

from flask import url_for
from sqlmodel import select

from app import iceberg_reader
from app.db import get_db
from app.extensions import lakekeeper
from app.iceberg_catalogs import catalog_for
from app.iceberg_reader import Page, TableOverview
from app.lakekeeper.errors import LakekeeperError
from app.lakekeeper.resources import TableSummary
from app.models import ComputeUnit, Execution, User, Warehouse, Workflow
from app.warehouses.service import WarehouseActionError

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


def user_warehouses(owner: User) -> list[Warehouse]:
    statement = (
        select(Warehouse)
        .where(Warehouse.owner_id == owner.id)
        .order_by(Warehouse.created_at.desc())
    )
    return list(get_db().exec(statement))


@dataclass
class NamespaceListing:
    name: str
    tables: list[TableSummary]


def browse(warehouse: Warehouse) -> list[NamespaceListing]:
    """The warehouse's namespaces (nested ones flattened as a.b) with each table's rows and size."""
    client = lakekeeper()
    try:
        prefix = client.catalog_prefix(warehouse.lakekeeper_name)
        listings = []
        pending = list(client.list_namespaces(prefix))
        while pending:
            namespace = pending.pop(0)
            tables = [
                client.load_table(prefix, table) for table in client.list_tables(prefix, namespace)
            ]
            listings.append(NamespaceListing(".".join(namespace), tables))
            pending.extend(client.list_namespaces(prefix, namespace))
    except LakekeeperError as error:
        raise WarehouseActionError(error.user_message) from error
    return sorted(listings, key=lambda listing: listing.name)
