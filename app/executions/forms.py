"""Reading the run dialog and the result pager from requests."""
from __future__ import annotations

PAGE_SIZES = (25, 50, 100, 500)
DEFAULT_PAGE_SIZE = 50


def _positive_int(value) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def parse_run_form(data) -> tuple[dict, dict[str, str]]:
    """({"compute_unit_id", "warehouse_id"}, field → error message) from the run dialog."""
    values = {"compute_unit_id": _positive_int(data.get("compute_unit_id")),
              "warehouse_id": _positive_int(data.get("warehouse_id"))}
    errors = {}
    if values["compute_unit_id"] is None:
        errors["compute_unit_id"] = "Choose a running compute unit."
    if values["warehouse_id"] is None:
        errors["warehouse_id"] = "Choose the warehouse to write into."
    return values, errors


def parse_paging(args) -> tuple[int, int]:
    """(page, size): the page from 1 (a bad value means 1), the size one of PAGE_SIZES."""
    size = _positive_int(args.get("size"))
    return _positive_int(args.get("page")) or 1, size if size in PAGE_SIZES else DEFAULT_PAGE_SIZE
