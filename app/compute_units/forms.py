"""Validation of the compute-unit form against the limits from configuration."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{1,46}[a-z0-9]$")


def limits(config) -> dict:
    return {
        "cpus": config["CU_MAX_CPUS"],
        "memory_gb": config["CU_MAX_MEMORY_GB"],
        "workers": config["CU_MAX_WORKERS"],
        "running": config["CU_MAX_RUNNING_PER_USER"],
    }


def defaults(kinds: list[str], clusters: list[str], pooled: dict | None = None) -> dict:
    """The form's first values; with a warm pool (`pooled`: its unit's size), the pool's size, so
    a new unit is one of its ready ones unless its user asks otherwise."""
    values = {
        "name": "",
        "kind": kinds[0] if kinds else "local",
        "cpus": "1",
        "memory_gb": "2",
        "worker_nodes": "0",
        "ray_cluster": clusters[0] if clusters else "",
    }
    if pooled and pooled["kind"] in kinds:
        values.update(
            kind=pooled["kind"], cpus=str(pooled["cpus"]), memory_gb=f"{pooled['memory_gb']:g}"
        )
    return values


def _number(raw: str, cast, label: str, low, high) -> tuple[float | int | None, str | None]:
    try:
        value = cast(raw)
    except (TypeError, ValueError):
        return None, f"{label} must be a {'whole ' if cast is int else ''}number."
    if not low <= value <= high:
        return None, f"{label} must be between {low:g} and {high:g} (the limit here)."
    return value, None


def parse(data, config, kinds: list[str], clusters: list[str]) -> tuple[dict, dict[str, str]]:
    """(values for a ComputeUnit row, field → error message). `clusters`: the names of the
    listed Ray clusters this user may attach to; any other name is refused like a missing one."""
    caps = limits(config)
    raw = {key: (data.get(key) or "").strip() for key in defaults(kinds, clusters)}
    errors: dict[str, str] = {}
    values: dict = {"name": raw["name"], "kind": raw["kind"], "ray_cluster": ""}
    if not NAME_RE.match(raw["name"]):
        errors["name"] = (
            "3–48 characters: lowercase letters, digits and hyphens, starting with a letter."
        )
    if raw["kind"] not in kinds:
        errors["kind"] = "Choose one of the kinds offered here."
    for field, cast, label, low, high in (
        ("cpus", int, "CPUs per node", 1, caps["cpus"]),
        ("memory_gb", float, "Memory per node (GiB)", 0.5, caps["memory_gb"]),
        ("worker_nodes", int, "Worker nodes", 0, caps["workers"]),
    ):
        values[field], message = _number(raw[field], cast, label, low, high)
        if message:
            errors[field] = message
    if raw["kind"] == "existing":
        if raw["ray_cluster"] not in clusters:
            errors["ray_cluster"] = "Choose one of the Ray clusters offered here."
        values["ray_cluster"] = raw["ray_cluster"]
    return values, errors
