"""The table policy form: read and checked (a message per field), and a saved policy's values as
the form shows them."""

from __future__ import annotations

import re

from app.models import TablePolicy

# Files below this size count as small when no policy says otherwise.
DEFAULT_SMALL_FILE_MB = 32
MAX_SMALL_FILE_MB = 1024
MIN_SMALL_FILES = 2  # compacting one file into one gains nothing
MAX_SMALL_FILES = 1_000_000
MAX_EXPIRE_DAYS = 3650
# The tables the unit's maintenance takes (compute/run/maintenance.py TABLE_NAME, the same rule).
MAINTAINABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")
# A ticked checkbox ("on"), or the API's true (app/api/tables.py passes it on as text).
CHECKED = ("on", "true", "1")
NOT_MAINTAINABLE = (
    "Lakeport maintains tables named namespace.table, each part letters, digits and underscores."
)


def parse_policy(form, table_name: str) -> tuple[dict, dict[str, str]]:
    """The policy's values from the form, and a message per field that is not valid (`form`: the
    whole form's). An empty threshold or age turns that part off; `start_unit` is a checkbox."""
    values: dict = {}
    errors: dict[str, str] = {}
    if not MAINTAINABLE.fullmatch(table_name):
        errors["form"] = NOT_MAINTAINABLE

    def whole_number(key: str, label: str, low: int, high: int, optional: bool) -> None:
        text = (form.get(key) or "").strip()
        if optional and not text:
            values[key] = None
            return
        number = int(text) if text.isdigit() and len(text) < 10 else None
        if number is None or not low <= number <= high:
            errors[key] = f"{label}: a whole number from {low} to {high:,}."
        else:
            values[key] = number

    whole_number("small_file_mb", "Small file size (MiB)", 1, MAX_SMALL_FILE_MB, optional=False)
    whole_number(
        "compact_small_files", "Small files", MIN_SMALL_FILES, MAX_SMALL_FILES, optional=True
    )
    whole_number("expire_days", "Days", 1, MAX_EXPIRE_DAYS, optional=True)
    values["start_unit"] = (form.get("start_unit") or "").strip().lower() in CHECKED
    return values, errors


def form_values(policy: TablePolicy | None) -> dict[str, str]:
    if policy is None:
        return {
            "small_file_mb": str(DEFAULT_SMALL_FILE_MB),
            "compact_small_files": "",
            "expire_days": "",
            "start_unit": "",
        }

    def shown(value: int | None) -> str:
        return "" if value is None else str(value)

    return {
        "small_file_mb": str(policy.small_file_mb),
        "compact_small_files": shown(policy.compact_small_files),
        "expire_days": shown(policy.expire_days),
        "start_unit": "on" if policy.start_unit else "",
    }
