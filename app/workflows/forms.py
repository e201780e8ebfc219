"""Reading and validating the workflow forms: create, the step editor, and the data-source forms.

The editor keeps no state on the server: every request carries all steps as fields
`steps-<i>-name`, `steps-<i>-kind`, `steps-<i>-code`, `steps-<i>-output`, and the named
output it publishes to, `steps-<i>-publish-table` (empty: none), `steps-<i>-publish-mode` and
`steps-<i>-publish-checks` (its quality checks, a JSON list; empty: none), and
`steps-<i>-publish-keys` (a merge's key columns, comma-separated).
"""

from __future__ import annotations

import json
import math
import re

from app.workflows.service import SCALE_FACTOR_MAX, SCALE_FACTOR_MIN, check_table_name
from app.workflows.steps import MAX_STEPS, Publish, Step, normalized
from compute.contract import key_columns

WORKFLOW_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$")
DESCRIPTION_MAX = 1000
_STEP_FIELD_RE = re.compile(r"^steps-(\d{1,4})-kind$")


def check_workflow_name(value: str) -> str | None:
    if not value:
        return "Give the workflow a name."
    if not WORKFLOW_NAME_RE.match(value):
        return (
            "1–64 characters: letters, digits, spaces, - _ and ., starting with a letter or digit."
        )
    return None


def parse_workflow_form(data) -> tuple[dict, dict[str, str]]:
    values = {
        "name": (data.get("name") or "").strip(),
        "description": (data.get("description") or "").strip(),
    }
    errors = {}
    if message := check_workflow_name(values["name"]):
        errors["name"] = message
    if len(values["description"]) > DESCRIPTION_MAX:
        errors["description"] = f"At most {DESCRIPTION_MAX} characters."
    return values, errors


def read_steps(data) -> list[Step]:
    """The editor's steps in order. Reads at most one step more than a workflow may have:
    enough for the check to say so, without reading an unbounded form."""
    indexes = sorted(
        int(match.group(1)) for key in data.keys() if (match := _STEP_FIELD_RE.match(key))
    )
    return [
        normalized(
            Step(
                name=data.get(f"steps-{index}-name") or "",
                kind=data.get(f"steps-{index}-kind") or "",
                code=data.get(f"steps-{index}-code") or "",
                output=data.get(f"steps-{index}-output") in ("on", "true", "1"),
                publish=Publish(
                    data.get(f"steps-{index}-publish-table") or "",
                    data.get(f"steps-{index}-publish-mode") or "append",
                    _read_checks(data.get(f"steps-{index}-publish-checks") or ""),
                    key_columns(data.get(f"steps-{index}-publish-keys") or ""),
                ),
            )
        )
        for index in indexes[: MAX_STEPS + 1]
    ]


def _read_checks(text: str) -> tuple | str:
    """The checks field (a JSON list, compute/run/checks.py): parsed, or kept as typed when it
    is no JSON list, so the step's check says why."""
    if not text.strip():
        return ()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return tuple(parsed) if isinstance(parsed, list) else text


def read_base_version(data) -> int:
    """The version the editor was opened on (to notice a save made meanwhile elsewhere)."""
    try:
        return int(data.get("base_version") or 0)
    except ValueError:
        return 0


def parse_scale_factor(value: str) -> tuple[float | None, str | None]:
    message = f"A number from {SCALE_FACTOR_MIN:g} to {SCALE_FACTOR_MAX:g}, e.g. 0.1."
    try:
        scale_factor = float((value or "").strip())
    except ValueError:
        return None, message
    if not math.isfinite(scale_factor) or not SCALE_FACTOR_MIN <= scale_factor <= SCALE_FACTOR_MAX:
        return None, message
    return scale_factor, None


def read_warehouse_id(data) -> int | None:
    try:
        return int(data.get("warehouse_id") or "")
    except ValueError:
        return None


def parse_upload_form(data, files) -> tuple[dict, dict[str, str]]:
    """The upload form: which warehouse, which table name, which file."""
    upload = files.get("file")
    values = {
        "warehouse_id": read_warehouse_id(data),
        "table_name": (data.get("table_name") or "").strip(),
        "file": upload if upload is not None and upload.filename else None,
    }
    errors = {}
    if values["warehouse_id"] is None:
        errors["warehouse_id"] = "Choose a warehouse."
    if message := check_table_name(values["table_name"]):
        errors["table_name"] = message
    if values["file"] is None:
        errors["file"] = "Choose a CSV or Parquet file."
    return values, errors


def parse_sample_form(data) -> tuple[dict, dict[str, str]]:
    """The sample-data form: which warehouse, which TPC-H scale factor."""
    scale_factor, message = parse_scale_factor(data.get("scale_factor", ""))
    values = {
        "warehouse_id": read_warehouse_id(data),
        "scale_factor": scale_factor,
        "scale_factor_text": (data.get("scale_factor") or "").strip(),
    }
    errors = {}
    if values["warehouse_id"] is None:
        errors["warehouse_id"] = "Choose a warehouse."
    if message:
        errors["scale_factor"] = message
    return values, errors
