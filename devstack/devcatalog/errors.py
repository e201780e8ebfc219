"""Errors in Lakekeeper's shape: `{"error": {"message", "type", "code"}}` with its type names."""
from __future__ import annotations


class CatalogError(Exception):
    def __init__(self, code: int, error_type: str, message: str, stack: list[str] | None = None) -> None:
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
    return CatalogError(404, "WarehouseNotFound", f"Warehouse '{warehouse}' not found")


def bad_request(message: str, error_type: str = "BadRequest") -> CatalogError:
    return CatalogError(400, error_type, message)


def warehouse_forbidden(message: str) -> CatalogError:
    """Lakekeeper's answer to an action its authorizer refuses on a warehouse."""
    return CatalogError(403, "WarehouseActionForbidden", message)


def project_forbidden(message: str) -> CatalogError:
    """Lakekeeper's answer to a project-level action its authorizer refuses."""
    return CatalogError(403, "ProjectActionForbidden", message)
