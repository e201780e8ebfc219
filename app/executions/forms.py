"""Reading the run dialog from requests (the result pager's paging: `app.table_pages`)."""

from __future__ import annotations

from app.executions import notifications
from app.table_pages import positive_int


def parse_run_form(data) -> tuple[dict, dict[str, str]]:
    """({"version", "compute_unit_id", "warehouse_id", "notify_on", "webhook_url", "notify_email"}, field →
    error message) from the run dialog. `version` is the workflow version the dialog showed (None
    when the post names none)."""
    values = {
        "version": positive_int(data.get("version")),
        "compute_unit_id": positive_int(data.get("compute_unit_id")),
        "warehouse_id": positive_int(data.get("warehouse_id")),
        **{
            field: (data.get(field) or "").strip()
            for field in ("notify_on", "webhook_url", "notify_email")
        },
    }
    errors = notifications.check(values)
    if values["compute_unit_id"] is None:
        errors["compute_unit_id"] = "Choose a running compute unit."
    if values["warehouse_id"] is None:
        errors["warehouse_id"] = "Choose the warehouse to write into."
    return values, errors
