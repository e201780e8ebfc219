"""Quality checks: what a named output's rows must pass before the run publishes them.

A step's publish target (`Publish.checks`, compute/contract.py) lists checks, each a JSON object
with a `kind` (KINDS), its fields and a `severity`: a failing `fail` check fails the run before
anything is published (compute/run/publish.py: "before publish, every check passes"), naming the
check and how many rows offend; a failing `warn` check is recorded only.

- `problems` checks the list without Spark (the editor, the API and the unit all use it); a `sql`
  condition is parsed as one boolean expression by sqlglot here, and by Spark's own expression
  parser on the unit (`_condition`), which refuses subqueries: the condition is user SQL and runs
  in the run's own session with its credentials, so it may read only what a step could, and a
  condition with a subquery could read a table, which a check has no business doing.
- `evaluate` runs each check as one Spark aggregation over the rows the run is about to publish
  (the branch's rows for an overwrite or a new table, the rows the branch appended otherwise)
  and returns, per check, the offending rows' count and a sample of at most SAMPLE_ROWS of them,
  each one line of at most SAMPLE_ROW_CHARS (values cut at SAMPLE_VALUE_CHARS): small enough to
  travel in the run's progress and sit on the run page.
- `evaluate_all` runs a publish target's checks together, in one Spark job over the rows: the
  per-row checks (not null, accepted values, a SQL condition) each become a conditional sum, the
  row counts a count and freshness a max, all in one aggregation; with a unique check, that
  aggregation is the second half of the unique key's group-by (each key's group carries its rows'
  sums and maxima, summed again over the groups), so the rows are read and shuffled once, not
  once per check. Its results are those `evaluate` gives check by check; a sample of offending
  rows is still a query of its own, run only for a check that failed. Further unique checks (on
  other keys) run as `evaluate` does, and if the shared job fails at run time every check it
  held runs on its own, so a failure is named by its check as before.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

KINDS = {
    "not_null": "no row has a null in column",
    "unique": "no two rows share the values of columns",
    "accepted_values": "column holds only values (nulls are let through)",
    "row_count": "the number of rows is within min and max",
    "row_count_change": "the rows differ from the last publish's by at most max_percent",
    "freshness": "the newest value of column is at most max_age_hours old",
    "sql": "every row meets condition (a boolean Spark SQL expression)",
}
SEVERITIES = ("warn", "fail")
# Each kind's fields besides kind and severity: the required ones, then the optional ones.
FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "not_null": (("column",), ()),
    "unique": (("columns",), ()),
    "accepted_values": (("column", "values"), ()),
    "row_count": ((), ("min", "max")),
    "row_count_change": (("max_percent",), ()),
    "freshness": (("column", "max_age_hours"), ()),
    "sql": (("condition",), ()),
}
MAX_CHECKS = 20
MAX_VALUES = 1000
MAX_COLUMNS = 32
MAX_NAME_CHARS = 128
MAX_CONDITION_CHARS = 2000
SAMPLE_ROWS = 5
SAMPLE_VALUE_CHARS = 80
SAMPLE_ROW_CHARS = 400


# ------------------------------------------------------------------ the spec, without Spark
def problems(checks: object) -> list[str]:
    """What is wrong with a publish target's checks, one message per problem ("Check 2
    (unique): …"); none for a valid list."""
    if isinstance(checks, str):
        try:
            checks = json.loads(checks)
        except ValueError as error:
            return [f"Checks must be a JSON list of objects: {error}."]
    if not isinstance(checks, (list, tuple)):
        return ['Checks must be a JSON list of objects, e.g. [{"kind": "not_null", …}].']
    if len(checks) > MAX_CHECKS:
        return [f"At most {MAX_CHECKS} checks per published table."]
    found = []
    for number, check in enumerate(checks, start=1):
        if problem := check_problem(check):
            kind = check.get("kind") if isinstance(check, dict) else None
            label = f"Check {number}" + (f" ({kind})" if kind in KINDS else "")
            found.append(f"{label}: {problem}")
    return found


def check_problem(check: object) -> str | None:
    """Why one check is not one Lakeport runs, or None."""
    if not isinstance(check, dict):
        return "a check is a JSON object with a kind and a severity."
    kind = check.get("kind")
    if kind not in KINDS:
        return f"kind is one of: {', '.join(KINDS)}."
    if check.get("severity") not in SEVERITIES:
        return "severity is “warn” (recorded only) or “fail” (nothing is published)."
    required, optional = FIELDS[kind]
    if unknown := sorted(set(check) - {"kind", "severity", *required, *optional}):
        return f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}."
    if missing := [name for name in required if name not in check]:
        return f"{kind} needs {', '.join(missing)}."
    if "column" in required and (problem := _column_problem(check["column"])):
        return f"column {problem}"
    if kind == "unique":
        columns = check["columns"]
        if not isinstance(columns, list) or not columns or len(columns) > MAX_COLUMNS:
            return f"columns is a list of 1–{MAX_COLUMNS} column names."
        for column in columns:
            if problem := _column_problem(column):
                return f"columns: {problem}"
    if kind == "accepted_values":
        values = check["values"]
        if not isinstance(values, list) or not values or len(values) > MAX_VALUES:
            return f"values is a list of 1–{MAX_VALUES} values."
        if any(not _scalar(value) for value in values):
            return "values holds strings, numbers or booleans only."
    if kind == "row_count":
        bounds = {name: check[name] for name in ("min", "max") if name in check}
        if not bounds:
            return "row_count needs min, max or both."
        if any(not _count(value) for value in bounds.values()):
            return "min and max are whole numbers of rows, 0 or more."
        if len(bounds) == 2 and bounds["min"] > bounds["max"]:
            return "min is more than max."
    if kind == "row_count_change" and not _positive(check["max_percent"]):
        return "max_percent is a number above 0 (e.g. 20 for ±20%)."
    if kind == "freshness" and not _positive(check["max_age_hours"]):
        return "max_age_hours is a number of hours above 0."
    if kind == "sql":
        return condition_problem(check["condition"])
    return None


def condition_problem(condition: object) -> str | None:
    """Why a `sql` condition is not one boolean expression without subqueries (sqlglot's Spark
    dialect; Spark parses it again on the unit)."""
    if not isinstance(condition, str) or not condition.strip():
        return "condition is a boolean SQL expression, e.g. amount >= 0."
    if len(condition) > MAX_CONDITION_CHARS:
        return f"condition has at most {MAX_CONDITION_CHARS} characters."
    try:
        parsed = sqlglot.parse_one(condition, dialect="spark", into=exp.Condition)
        statements = sqlglot.parse(condition, dialect="spark")
    except (ParseError, TokenError) as error:
        first = getattr(error, "errors", None) or [{}]
        return f"condition does not parse: {first[0].get('description') or error}."
    if len(statements) != 1:
        return "condition is one expression, without “;”."
    if isinstance(parsed, exp.Query) or parsed.find(exp.Query, exp.Subquery, exp.Exists):
        return "condition is an expression on the row's columns; subqueries are refused."
    if isinstance(parsed, (exp.Literal, exp.Star)):  # a bare column may be boolean: Spark knows
        return "condition is a boolean expression, e.g. amount >= 0."
    return None


def _column_problem(name: object) -> str | None:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        return f"is a column name of 1–{MAX_NAME_CHARS} characters."
    if "`" in name:
        return "names a column without backticks."
    return None


def _scalar(value: object) -> bool:
    return isinstance(value, (str, bool, int)) or (
        isinstance(value, float) and math.isfinite(value)
    )


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _positive(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def label(check: dict) -> str:
    """The check in a few words, as a failure names it: `unique(order_id)`."""
    kind = check.get("kind")
    if kind == "unique":
        return f"unique({', '.join(check.get('columns') or [])})"
    if kind in ("not_null", "accepted_values", "freshness"):
        return f"{kind}({check.get('column')})"
    if kind == "row_count":
        return f"row_count({check.get('min', '')}..{check.get('max', '')})"
    if kind == "row_count_change":
        return f"row_count_change(±{check.get('max_percent')}%)"
    if kind == "sql":
        condition = " ".join(str(check.get("condition", "")).split())
        return f"sql({condition[:60]}{'…' if len(condition) > 60 else ''})"
    return str(kind)


# ------------------------------------------------------------------ on the unit, with Spark
class CheckRefused(Exception):
    """The check cannot run as given (a condition that is no boolean expression, a missing
    column): the run fails saying so, whatever the check's severity."""


def evaluate(
    check: dict, frame, *, previous_rows: int | None = None, now_s: float | None = None
) -> dict:
    """Run one check over `frame` (the rows about to be published): {"kind", "severity",
    "check" (its label), "offending", "sample", "detail", "passed"}. `previous_rows`: the rows
    of the table's last publish (row_count_change), None when there was none."""
    from pyspark.sql import functions as F

    kind = check["kind"]
    sample_frame, detail = None, ""
    try:
        if kind == "not_null":
            offends = _column(frame, check["column"]).isNull()
            offending, sample_frame = _count_where(frame, offends)
        elif kind == "accepted_values":
            column = _column(frame, check["column"])
            offends = column.isNotNull() & ~column.isin(list(check["values"]))
            offending, sample_frame = _count_where(frame, offends)
        elif kind == "sql":
            offends = ~F.coalesce(_condition(frame, check["condition"]), F.lit(False))
            offending, sample_frame = _count_where(frame, offends)
        elif kind == "unique":
            columns = [_column(frame, name) for name in check["columns"]]
            groups = frame.groupBy(*columns).agg(F.count(F.lit(1)).alias("rows"))
            duplicated = groups.where(F.col("rows") > 1)
            offending = int(duplicated.agg(F.sum("rows")).first()[0] or 0)
            sample_frame = duplicated.orderBy(F.col("rows").desc())
            detail = f"{offending:,} rows share a key with another row"
        elif kind in ("row_count", "row_count_change"):
            rows = frame.count()
            offending, detail = _row_count(check, rows, previous_rows)
        elif kind == "freshness":
            column = _column(frame, check["column"])
            row = frame.agg(F.max(column).alias("newest"), F.count(F.lit(1)).alias("rows")).first()
            offending, detail = _freshness(check, row["newest"], row["rows"], now_s)
        else:  # problems() refuses any other kind before a run starts
            raise CheckRefused(f"no check of kind {kind!r}")
        sample = _sample(sample_frame) if offending and sample_frame is not None else []
    except CheckRefused:
        raise
    except Exception as error:  # Spark's analysis: a missing column, a condition of wrong type
        from compute.run.step_code import describe

        raise CheckRefused(f"check {label(check)} cannot run: {describe(error)}") from None
    return _result(check, offending, sample, detail)


def evaluate_all(
    checks, frame, *, previous_rows: int | None = None, now_s: float | None = None
) -> list[dict | CheckRefused]:
    """Run `checks` over `frame` in one Spark job (the module's docstring): per check, in order,
    `evaluate`'s result or the CheckRefused it would raise."""
    from pyspark.sql import functions as F

    from compute.run.step_code import describe

    outcomes: list[dict | CheckRefused | None] = [None] * len(checks)
    sums, maxima, samples = {}, {}, {}  # alias -> column; check index -> the offending rows
    shared_key = None  # (check index, key columns) of the unique check the job's group-by serves
    shared_index = None
    for index, check in enumerate(checks):
        kind = check["kind"]
        try:
            if kind in ("not_null", "accepted_values", "sql"):
                if kind == "not_null":
                    offends = _column(frame, check["column"]).isNull()
                elif kind == "accepted_values":
                    column = _column(frame, check["column"])
                    offends = column.isNotNull() & ~column.isin(list(check["values"]))
                else:
                    offends = ~F.coalesce(_condition(frame, check["condition"]), F.lit(False))
                offending = F.when(offends, 1).otherwise(0)
                frame.select(offending.alias("offending")).schema  # analysed now: named by check
                sums[f"__c{index}"], samples[index] = offending, frame.where(offends)
            elif kind == "freshness":
                maxima[f"__m{index}"] = _column(frame, check["column"])
            elif kind == "unique" and shared_key is None:
                shared_key = (index, [_column(frame, name) for name in check["columns"]])
                shared_index = index
            elif kind not in ("unique", "row_count", "row_count_change"):
                raise CheckRefused(f"no check of kind {kind!r}")
        except CheckRefused as refused:
            outcomes[index] = refused
        except Exception as error:  # Spark's analysis: a missing column, a wrong type
            outcomes[index] = CheckRefused(f"check {label(check)} cannot run: {describe(error)}")
    held = [
        index
        for index, check in enumerate(checks)
        if outcomes[index] is None and (check["kind"] != "unique" or index == shared_index)
    ]
    if held:
        try:
            totals = _one_aggregation(frame, shared_key, sums, maxima)
        except Exception:  # a run-time failure (e.g. a cast in a condition): check by check
            totals = None
        for index in held:
            check = checks[index]
            if totals is None:
                continue
            kind = check["kind"]
            sample_frame, detail = samples.get(index), ""
            try:
                if kind in ("not_null", "accepted_values", "sql"):
                    offending = int(totals[f"__c{index}"] or 0)
                elif kind == "unique":
                    offending = int(totals["__duplicated"] or 0)
                    columns = [_column(frame, name) for name in check["columns"]]
                    groups = frame.groupBy(*columns).agg(F.count(F.lit(1)).alias("rows"))
                    sample_frame = groups.where(F.col("rows") > 1).orderBy(F.col("rows").desc())
                    detail = f"{offending:,} rows share a key with another row"
                elif kind in ("row_count", "row_count_change"):
                    rows = int(totals["__rows"] or 0)
                    offending, detail = _row_count(check, rows, previous_rows)
                else:  # freshness
                    offending, detail = _freshness(
                        check, totals[f"__m{index}"], int(totals["__rows"] or 0), now_s
                    )
                sample = _sample(sample_frame) if offending and sample_frame is not None else []
            except CheckRefused as refused:
                outcomes[index] = refused
                continue
            except Exception as error:
                outcomes[index] = CheckRefused(
                    f"check {label(check)} cannot run: {describe(error)}"
                )
                continue
            outcomes[index] = _result(check, offending, sample, detail)
    for index, check in enumerate(checks):  # other unique keys, or the shared job failed
        if outcomes[index] is None:
            try:
                outcomes[index] = evaluate(check, frame, previous_rows=previous_rows, now_s=now_s)
            except CheckRefused as refused:
                outcomes[index] = refused
    return outcomes


def _one_aggregation(frame, shared_key, sums: dict, maxima: dict):
    """The row count, each sum and each maximum over `frame` in one job; with `shared_key`,
    also the rows whose key another row shares (`duplicated`), from the key's group-by."""
    from pyspark.sql import functions as F

    if shared_key is None:
        return frame.agg(
            F.count(F.lit(1)).alias("__rows"),
            *(F.sum(column).alias(alias) for alias, column in sums.items()),
            *(F.max(column).alias(alias) for alias, column in maxima.items()),
        ).first()
    groups = frame.groupBy(*shared_key[1]).agg(
        F.count(F.lit(1)).alias("__rows"),
        *(F.sum(column).alias(alias) for alias, column in sums.items()),
        *(F.max(column).alias(alias) for alias, column in maxima.items()),
    )
    return groups.agg(
        F.sum("__rows").alias("__rows"),
        F.sum(F.when(F.col("__rows") > 1, F.col("__rows")).otherwise(0)).alias("__duplicated"),
        *(F.sum(alias).alias(alias) for alias in sums),
        *(F.max(alias).alias(alias) for alias in maxima),
    ).first()


def _result(check: dict, offending: int, sample: list[str], detail: str) -> dict:
    return {
        "kind": check["kind"],
        "severity": check["severity"],
        "check": label(check),
        "offending": offending,
        "sample": sample,
        "detail": detail or (f"{offending:,} offending rows" if offending else ""),
        "passed": offending == 0,
    }


def _column(frame, name: str):
    from pyspark.sql import functions as F

    if name.lower() not in {field.name.lower() for field in frame.schema.fields}:
        raise CheckRefused(
            f"the output has no column {name!r} (it has: "
            + ", ".join(field.name for field in frame.schema.fields)
            + ")"
        )
    return F.col(f"`{name}`")


def _condition(frame, condition: str):
    """The user's condition as a Spark column: parsed by Spark's expression parser, refused
    with a subquery in it (it would read a table), and refused unless it is boolean."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    parser = frame.sparkSession._jsparkSession.sessionState().sqlParser()
    try:
        parsed = parser.parseExpression(condition)
    except Exception as error:
        from compute.run.step_code import describe

        raise CheckRefused(
            f"the condition {condition!r} does not parse: {describe(error)}"
        ) from None
    if _has_subquery(parsed):
        raise CheckRefused(
            f"the condition {condition!r} holds a subquery; a check reads its rows only"
        )
    column = F.expr(condition)
    data_type = frame.select(column.alias("condition")).schema.fields[0].dataType
    if not isinstance(data_type, BooleanType):
        raise CheckRefused(
            f"the condition {condition!r} is {data_type.simpleString()}, not boolean"
        )
    return column


# Catalyst's expressions that hold a query (a check reads only the rows it checks).
_SUBQUERY_CLASSES = ("Subquery", "Exists", "ListQuery", "InSubquery", "LateralSubquery")


def _has_subquery(expression, budget: list[int] | None = None) -> bool:
    budget = budget if budget is not None else [10_000]  # nodes visited, at most
    budget[0] -= 1
    if budget[0] < 0:
        return True  # an expression this large is refused rather than walked
    name = expression.getClass().getSimpleName()
    if any(part in name for part in _SUBQUERY_CLASSES):
        return True
    children = expression.children()
    return any(_has_subquery(children.apply(i), budget) for i in range(children.size()))


def _count_where(frame, offends) -> tuple[int, Any]:
    """The offending rows' count, in one aggregation, and the frame of them (for a sample)."""
    from pyspark.sql import functions as F

    count = frame.agg(F.sum(F.when(offends, 1).otherwise(0))).first()[0]
    return int(count or 0), frame.where(offends)


def _row_count(check: dict, rows: int, previous_rows: int | None) -> tuple[int, str]:
    if check["kind"] == "row_count":
        low, high = check.get("min"), check.get("max")
        if low is not None and rows < low:
            return rows or 1, f"{rows:,} rows, fewer than the {low:,} required"
        if high is not None and rows > high:
            return rows, f"{rows:,} rows, more than the {high:,} allowed"
        return 0, f"{rows:,} rows"
    if previous_rows is None:
        return 0, f"{rows:,} rows; no earlier publish to compare with"
    limit = float(check["max_percent"])
    if previous_rows == 0:
        change = 0.0 if rows == 0 else math.inf
    else:
        change = abs(rows - previous_rows) * 100.0 / previous_rows
    text = f"{rows:,} rows against {previous_rows:,} at the last publish"
    if change > limit:
        shown = "∞" if math.isinf(change) else f"{change:.1f}"
        return max(abs(rows - previous_rows), 1), f"{text} ({shown}% > {limit:g}%)"
    return 0, f"{text} ({change:.1f}% ≤ {limit:g}%)"


def _freshness(check: dict, newest, rows: int, now_s: float | None) -> tuple[int, str]:
    from datetime import date, datetime, timezone

    now_s = time.time() if now_s is None else now_s
    if newest is None:
        return rows, f"{check['column']} has no value in any of the {rows:,} rows"
    if isinstance(newest, datetime):  # PySpark gives a timestamp as the process's local time
        moment = (newest if newest.tzinfo else newest.astimezone()).astimezone(timezone.utc)
    elif isinstance(newest, date):
        moment = datetime(newest.year, newest.month, newest.day, tzinfo=timezone.utc)
    else:
        raise CheckRefused(f"freshness needs a timestamp or date column, {check['column']} is not")
    age_hours = (now_s - moment.timestamp()) / 3600
    text = f"newest {check['column']} {moment.isoformat()} is {age_hours:.1f} h old"
    if age_hours > float(check["max_age_hours"]):
        return rows, f"{text} (> {check['max_age_hours']} h): none of the {rows:,} rows is fresh"
    return 0, text


def _sample(frame) -> list[str]:
    """At most SAMPLE_ROWS rows, each one line: `col=value, …`, values and lines cut."""
    lines = []
    for row in frame.limit(SAMPLE_ROWS).collect():
        cells = []
        for name, value in row.asDict().items():
            text = "null" if value is None else str(value)
            if len(text) > SAMPLE_VALUE_CHARS:
                text = text[: SAMPLE_VALUE_CHARS - 1] + "…"
            cells.append(f"{name}={text}")
        line = ", ".join(cells)
        lines.append(line if len(line) <= SAMPLE_ROW_CHARS else line[: SAMPLE_ROW_CHARS - 1] + "…")
    return lines


# ------------------------------------------------------------------ the gate
def check_outputs(publisher, steps: dict, log) -> tuple[list[dict], str | None]:
    """Every check of every staged output (`publisher.staged`, compute/run/publish.py), before
    anything is published: the results ({"step", "table", …evaluate's}) and, when a `fail`
    check failed or a check could not run, why the run fails (None: publish)."""
    results, failures = [], []
    for staged in publisher.staged:
        step = steps[staged.step]
        checks = step.publish.checks if step.publish is not None else ()
        if not checks:
            continue
        if found := problems(checks):
            failures.append(f"step {staged.step!r}: checks: " + "; ".join(found))
            continue
        frame = staged_rows(publisher, staged)
        previous = None
        if any(check["kind"] == "row_count_change" for check in checks):
            previous = previous_rows(publisher, staged)
        for check, outcome in zip(checks, evaluate_all(checks, frame, previous_rows=previous)):
            if isinstance(outcome, CheckRefused):
                failures.append(f"step {staged.step!r} publishing to {staged.table}: {outcome}")
                continue
            result = {"step": staged.step, "table": staged.table, **outcome}
            results.append(result)
            verdict = (
                "passed"
                if result["passed"]
                else ("FAILED" if check["severity"] == "fail" else "failed (warn only)")
            )
            log(
                "INFO" if result["passed"] else "WARN" if check["severity"] == "warn" else "ERROR",
                staged.step,
                f"check {result['check']} on {staged.table} {verdict}"
                + (f": {result['detail']}" if result["detail"] else ""),
            )
            if not result["passed"] and check["severity"] == "fail":
                failures.append(
                    f"check {result['check']} on {staged.table} (step {staged.step!r}) failed: "
                    f"{result['offending']:,} offending rows"
                    + (f" ({result['detail']})" if result["kind"] not in ("not_null",) else "")
                )
    if failures:
        return results, "; ".join(failures) + "; nothing was published"
    return results, None


def _quoted(identifier: str) -> str:
    return ".".join(f"`{part}`" for part in identifier.split("."))


def staged_rows(publisher, staged):
    """The rows `staged` publishes: the branch's whole table for an overwrite or a table that had
    no snapshot, the rows the branch appended after its base otherwise (Iceberg's incremental
    append scan: start exclusive, end inclusive)."""
    name = f"{publisher.catalog_name}.{_quoted(staged.table)}"
    reader = publisher.session.read
    if staged.mode == "overwrite" or staged.base_snapshot_id is None:
        return reader.option("snapshot-id", str(staged.head_snapshot_id)).table(name)
    if staged.base_snapshot_id == staged.head_snapshot_id:  # nothing appended
        return reader.option("snapshot-id", str(staged.head_snapshot_id)).table(name).limit(0)
    return (
        reader.option("start-snapshot-id", str(staged.base_snapshot_id))
        .option("end-snapshot-id", str(staged.head_snapshot_id))
        .table(name)
    )


def previous_rows(publisher, staged) -> int | None:
    """The rows of the table's last publish (its main when the run began writing it): the table's
    for an overwrite, the rows that snapshot added for an append; None without one."""
    from compute.run.lineage import int_or_none

    if staged.base_snapshot_id is None:
        return None
    table = publisher.iceberg.load_table(staged.table)
    snapshot = table.snapshot_by_id(staged.base_snapshot_id)
    summary = snapshot.summary if snapshot is not None and snapshot.summary else {}
    key = "total-records" if staged.mode == "overwrite" else "added-records"
    return int_or_none(summary.get(key))
