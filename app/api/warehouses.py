"""The API's warehouses: list, get, test a connection, register, archive; their tables."""

from __future__ import annotations

from contextlib import contextmanager

from flask_login import current_user
from spectree import Response

from app.api import bp, schemas
from app.api.openapi import spec
from app.api.paging import ERRORS, page_of, table_read
from app.api.problems import ApiProblem
from app.db import get_owned_or_404
from app.models import Warehouse
from app.warehouses import forms, queries, service, sharing
from app.warehouses.probe_limits import ProbesLimited
from app.warehouses.service import WarehouseActionError


def warehouse_out(row: Warehouse) -> schemas.Warehouse:
    return schemas.Warehouse.model_validate(row, from_attributes=True)


def _storage(body: schemas.StorageIn, fields=forms.CHECKS):
    """The body through the register form's own checks (a refusal names its field)."""
    data = {**body.model_dump(), "path_style_access": "on" if body.path_style_access else ""}
    storage, errors = forms.parse_storage_form(data, fields)
    if errors:
        field, message = next(iter(errors.items()))
        raise ApiProblem(400, message, field)
    return storage


@contextmanager
def _refusals():
    """A refused action as a problem: 400 naming the field at fault, else 409."""
    try:
        yield
    except WarehouseActionError as error:
        raise ApiProblem(400 if error.field else 409, error.message, error.field) from None
    except ProbesLimited as limited:
        raise ApiProblem(
            429, limited.message, headers={"Retry-After": str(limited.retry_after)}
        ) from None


@bp.get("/warehouses")
@spec.validate(
    query=schemas.ListQuery,
    resp=Response(HTTP_200=schemas.WarehousePage, **ERRORS),
    tags=["warehouses"],
)
def list_warehouses(query: schemas.ListQuery):
    """Your warehouses."""
    return page_of(
        queries.user_warehouses(current_user), query, warehouse_out, schemas.WarehousePage
    )


@bp.post("/warehouses")
@spec.validate(
    json=schemas.StorageIn,
    resp=Response(HTTP_201=schemas.Warehouse, HTTP_409=schemas.Problem, **ERRORS),
    tags=["warehouses"],
)
def register_warehouse(json: schemas.StorageIn):
    """Register a warehouse on your bucket: the keys go to the catalog, never into Lakeport."""
    with _refusals():
        return warehouse_out(service.register(current_user, _storage(json))), 201


@bp.post("/warehouses/test-connection")
@spec.validate(
    json=schemas.StorageIn,
    resp=Response(HTTP_200=schemas.StorageReport, **ERRORS),
    tags=["warehouses"],
)
def test_warehouse_connection(json: schemas.StorageIn):
    """Write, read, list and delete a probe object with these keys (nothing is registered)."""
    storage = _storage(json, forms.PROBE_FIELDS)
    with _refusals():
        report = service.test_connection(storage, current_user)
    return schemas.StorageReport(
        ok=report.ok,
        location=str(report.location),
        checks=[
            schemas.StorageCheck(
                name=check.name, outcome=check.outcome.value, message=check.message
            )
            for check in report.checks
        ],
    )


@bp.get("/warehouses/<int:warehouse_id>")
@spec.validate(resp=Response(HTTP_200=schemas.Warehouse, **ERRORS), tags=["warehouses"])
def get_warehouse(warehouse_id: int):
    """One of your warehouses."""
    return warehouse_out(get_owned_or_404(Warehouse, warehouse_id))


@bp.post("/warehouses/<int:warehouse_id>/archive")
@spec.validate(
    resp=Response(HTTP_202=schemas.Warehouse, HTTP_409=schemas.Problem, **ERRORS),
    tags=["warehouses"],
)
def archive_warehouse(warehouse_id: int):
    """No new executions; those writing into it are stopped; what it holds stays readable."""
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    with _refusals():
        service.archive(warehouse)
    return warehouse_out(warehouse), 202


@bp.post("/warehouses/<int:warehouse_id>/purge")
@spec.validate(
    json=schemas.PurgeIn,
    resp=Response(HTTP_200=schemas.Purged, HTTP_409=schemas.Problem, **ERRORS),
    tags=["warehouses"],
)
def purge_warehouse(warehouse_id: int, json: schemas.PurgeIn):
    """Delete an archived warehouse's tables and files, then the warehouse (cannot be undone)."""
    warehouse = get_owned_or_404(Warehouse, warehouse_id)
    with _refusals():
        outcome = service.purge(warehouse, json.confirm_name)
    return schemas.Purged(
        tables_dropped=outcome.tables_dropped,
        namespaces_dropped=outcome.namespaces_dropped,
        pending=outcome.pending,
    )


@bp.get("/warehouses/<int:warehouse_id>/tables")
@spec.validate(
    resp=Response(HTTP_200=list[schemas.TableRef], HTTP_409=schemas.Problem, **ERRORS),
    tags=["warehouses"],
)
def list_tables(warehouse_id: int):
    """Every table of the warehouse, by namespace (its owner's, or one shared with you)."""
    warehouse = sharing.accessible_or_404(warehouse_id)
    with _refusals():
        listings = queries.browse(warehouse)
    return [
        schemas.TableRef(namespace=listing.name, name=table.identifier.name)
        for listing in listings
        for table in listing.tables
    ]


@bp.get("/warehouses/<int:warehouse_id>/tables/<name>")
@spec.validate(
    resp=Response(HTTP_200=schemas.TableOverview, HTTP_409=schemas.Problem, **ERRORS),
    tags=["warehouses"],
)
def get_table(warehouse_id: int, name: str):
    """A table's schema, properties, snapshots (newest first) and size; `name` is `namespace.table`
    (of your warehouse, or of one shared with you)."""
    warehouse = sharing.accessible_or_404(warehouse_id)
    if not queries.valid_table_name(name):
        raise ApiProblem(404, "No such table.")
    found = table_read(lambda: queries.overview(warehouse, name), missing="No such table.")
    return schemas.TableOverview(
        name=found.name,
        location=found.location,
        properties=found.properties,
        total_records=found.total_records,
        total_bytes=found.total_bytes,
        columns=[schemas.Column(**vars(column)) for column in found.columns],
        snapshots=[schemas.Snapshot(**vars(snapshot)) for snapshot in found.snapshots],
    )
