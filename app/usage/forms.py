"""The retention form: read and checked (a message per field), and a saved policy's values
as the form shows them; the tables a confirmed preview names."""

from __future__ import annotations

from app.models import RetentionPolicy

RESULTS_MODES = {
    "days": "Keep result tables for N days after their run ended",
    "last": "Keep the result tables of the last N executions of each workflow",
}
MAX_DAYS = 3650
MAX_KEEP_LAST = 10_000
MAX_RETAIN_SNAPSHOTS = 1000


def parse_policy(form) -> tuple[dict, dict[str, str]]:
    """The policy's values from the form, and a message per field that is not valid."""
    values: dict = {}
    errors: dict[str, str] = {}

    def whole_number(key: str, label: str, low: int, high: int) -> None:
        text = (form.get(key) or "").strip()
        values[key] = int(text) if text.isdigit() and low <= int(text) <= high else None
        if values[key] is None:
            errors[key] = f"{label}: a whole number from {low} to {high}."

    mode = form.get("results_mode", "")
    if mode not in RESULTS_MODES:
        errors["results_mode"] = "Choose how result tables are kept."
    else:
        values["results_mode"] = mode
        if mode == "days":
            whole_number("results_value", "Days", 0, MAX_DAYS)
        else:
            whole_number("results_value", "Executions per workflow", 1, MAX_KEEP_LAST)
    if form.get("logs_forever") == "on":
        values["logs_days"] = None
    else:
        whole_number("logs_days", "Days", 0, MAX_DAYS)
    values["snapshots_retain_last"] = None
    if (form.get("snapshots_retain_last") or "").strip():
        whole_number("snapshots_retain_last", "Snapshots", 1, MAX_RETAIN_SNAPSHOTS)
    if (
        not errors
        and values["logs_days"] is not None
        and values["results_mode"] == "days"
        and values["logs_days"] < values["results_value"]
    ):
        errors["logs_days"] = (
            "Keep runtime stats and console logs at least as long as the result tables."
        )
    return values, errors


def form_values(policy: RetentionPolicy | None) -> dict:
    if policy is None:
        return {
            "results_mode": "days",
            "results_value": "30",
            "logs_days": "",
            "logs_forever": "on",
            "snapshots_retain_last": "",
        }
    return {
        "results_mode": policy.results_mode,
        "results_value": str(policy.results_value),
        "logs_days": "" if policy.logs_days is None else str(policy.logs_days),
        "logs_forever": "on" if policy.logs_days is None else "",
        "snapshots_retain_last": ""
        if policy.snapshots_retain_last is None
        else str(policy.snapshots_retain_last),
    }


def confirmed_tables(form) -> set[str]:
    return {name for name in form.getlist("table") if name}
