"""Errors in Lakekeeper's shape: `{"error": {"message", "type", "code"}}` with its type names."""

from __future__ import annotations

import uuid


class CatalogError(Exception):
    def __init__(
        self, code: int, error_type: str, message: str, stack: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.error_type = error_type
        self.message = message
        self.stack = stack or []

    def body(self) -> dict:
        error = {"message": self.message, "type": self.error_type, "code": self.code}
        if self.stack:
            error["stack"] = self.stack
        return {"error": error}


def warehouse_not_found(warehouse: object) -> CatalogError:
    # Lakekeeper v0.13.3 `WarehouseIdNotFound` / `WarehouseNameNotFound`
    # (crates/lakekeeper/src/service/catalog_store/warehouse.rs): type `NoSuchWarehouseException`,
    # also for a warehouse the caller may not see (`AuthZCannotUseWarehouseId`, service/authz/warehouse.rs).
    if isinstance(warehouse, uuid.UUID):
        return CatalogError(
            404, "NoSuchWarehouseException", f"A warehouse with id '{warehouse}' does not exist"
        )
    return CatalogError(
        404, "NoSuchWarehouseException", f"A warehouse '{warehouse}' does not exist"
    )


def bad_request(message: str, error_type: str = "BadRequest") -> CatalogError:
    return CatalogError(400, error_type, message)


def warehouse_hidden(warehouse_id: uuid.UUID) -> CatalogError:
    """Lakekeeper v0.13.3's answer to a caller who cannot see a warehouse, whether it exists or
    not: `AuthZCannotUseWarehouseId` (crates/lakekeeper/src/service/authz/warehouse.rs) answers
    `WarehouseIdNotFound` with the detail "Warehouse not found or access denied" in its stack."""
    hidden = warehouse_not_found(warehouse_id)
    hidden.stack = ["Warehouse not found or access denied"]
    return hidden


def warehouse_forbidden(message: str) -> CatalogError:
    """Lakekeeper's answer to an action its authorizer refuses on a warehouse the caller sees."""
    return CatalogError(403, "WarehouseActionForbidden", message)


def project_forbidden(message: str) -> CatalogError:
    """Lakekeeper's answer to a project-level action its authorizer refuses."""
    return CatalogError(403, "ProjectActionForbidden", message)


# Query parameters Lakekeeper 0.13.3 declares as `Option<Vec<_>>` (`ListWarehousesRequest` in
# crates/lakekeeper/src/api/management/v1/warehouse/mod.rs, `Get{Warehouse,Role}AssignmentsQuery`
# in crates/authz-openfga/src/api.rs) and reads with axum's `Query` (serde_urlencoded), which
# cannot fill a `Vec` from any query-string form: every value answers 400 before the handler runs.
# Fixed on Lakekeeper's main only (axum_extra's Query, tests/management_query_arrays.rs).
ARRAY_QUERY_PARAMETERS = {
    "management.list_warehouses": ("warehouseStatus",),
    "permissions.warehouse_assignments": ("relations",),
    "permissions.role_assignments": ("relations",),
}


class QueryRejection(Exception):
    """axum's `FailedToDeserializeQueryString` (tokio-rs/axum, axum/src/extract/rejection.rs):
    400 with a plain-text body, not Lakekeeper's JSON envelope, which Lakekeeper 0.13.3 does not
    put around extractor rejections."""

    def body(self) -> str:
        return f"Failed to deserialize query string: {self}"


def refuse_array_query_parameters(endpoint: str | None, args) -> None:
    for name in ARRAY_QUERY_PARAMETERS.get(endpoint or "", ()):
        values = args.getlist(name)
        if values:
            # serde_urlencoded's message for the first value of a `Vec` field.
            raise QueryRejection(f'invalid type: string "{values[0]}", expected a sequence')
