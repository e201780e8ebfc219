"""Reading the console's form: the warehouse, the unit, the mode and the statement."""

from __future__ import annotations

from app.console.service import MODES, NEW_UNITS
from app.table_pages import positive_int
from compute.run.query import READ

# The statement's field: the code editor (app/static/vendor/editor.js) enhances textareas whose
# name ends in "-code".
SQL_FIELD = "sql-code"


def parse_query_form(data) -> tuple[dict, dict[str, str]]:
    """({"warehouse_id", "compute_unit_id", "new_unit", "mode", "sql"}, field → error message).
    The unit is one of the user's (its id) or a unit made for the query: `new_unit` is then
    "pool" (a warm one of the pool) or "new" (start one, from the pool when one is ready)."""
    unit = data.get("compute_unit_id")
    values = {
        "warehouse_id": positive_int(data.get("warehouse_id")),
        "compute_unit_id": positive_int(unit),
        "new_unit": unit if unit in NEW_UNITS else None,
        "mode": data.get("mode") or READ,
        "sql": (data.get(SQL_FIELD) or data.get("sql") or "").strip(),
    }
    errors = {}
    if values["warehouse_id"] is None:
        errors["warehouse_id"] = "Choose a warehouse."
    if values["compute_unit_id"] is None and values["new_unit"] is None:
        errors["compute_unit_id"] = (
            "Choose one of your running compute units, a warm one from the pool, or "
            "“Start one for me”."
        )
    if values["mode"] not in MODES:
        errors["mode"] = "Choose read only or writing."
    if not values["sql"]:
        errors["sql"] = "Write a statement to run."
    return values, errors
