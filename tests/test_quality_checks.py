"""Quality checks: what a named output's rows must pass before the run publishes them
(compute/run/checks.py), the gate before publish (compute/run/pipeline.py), and where the
results show (the run page, the API's execution, lineage).

The validation and display tests are light; the tests that run a pipeline need Spark and run
under the heavy lock."""

from __future__ import annotations

import json
import re
import secrets

from sqlmodel import Session, select

from app.executions import unit_reports
from app.models import WorkflowVersion
from app.workflows.steps import Step, check_steps, loads
from compute.contract import Publish
from tests.catalogs import reader, submit
from tests.catalogs import step as catalog_step
from tests.factories import (
    Api,
    csrf,
    execution_row,
    make_user,
    sign_in_as,
    token_for,
    unit_row,
    warehouse_row,
    workflow_for,
)

SELECT_ONE = "SELECT 1 AS id"
UNIQUE_ID = {"kind": "unique", "columns": ["id"], "severity": "fail"}


def checked(checks) -> list[str]:
    """The messages the editor's check gives a publishing step with these checks."""
    step = Step("daily", "sql", SELECT_ONE, publish=Publish("sales.daily", "append", checks))
    return check_steps([step]).steps.get(0, {}).get("checks", [])


def test_every_kind_of_check_is_accepted_with_its_fields_and_a_severity():
    assert (
        checked(
            (
                {"kind": "not_null", "column": "id", "severity": "fail"},
                UNIQUE_ID,
                {"kind": "accepted_values", "column": "s", "values": ["a", 1], "severity": "warn"},
                {"kind": "row_count", "min": 1, "max": 10, "severity": "fail"},
                {"kind": "row_count", "min": 0, "severity": "warn"},
                {"kind": "row_count_change", "max_percent": 20, "severity": "warn"},
                {"kind": "freshness", "column": "ts", "max_age_hours": 24, "severity": "fail"},
                {"kind": "sql", "condition": "amount >= 0 AND s <> 'x'", "severity": "fail"},
            )
        )
        == []
    )


def test_a_bad_check_gets_a_message_naming_it_and_what_is_wrong():
    cases = [
        ({"kind": "uniq", "severity": "fail"}, "Check 1: kind is one of: not_null, unique"),
        ({"kind": "unique", "columns": ["id"]}, "Check 1 (unique): severity is “warn”"),
        ({"kind": "unique", "columns": [], "severity": "fail"}, "columns is a list of 1–32"),
        ({"kind": "not_null", "severity": "fail"}, "Check 1 (not_null): not_null needs column."),
        ({"kind": "not_null", "column": "id", "severity": "warn", "min": 1}, "unknown field min"),
        ({"kind": "not_null", "column": "a`b", "severity": "warn"}, "without backticks"),
        ({"kind": "row_count", "severity": "fail"}, "row_count needs min, max or both."),
        ({"kind": "row_count", "min": 5, "max": 2, "severity": "fail"}, "min is more than max."),
        ({"kind": "row_count", "min": -1, "severity": "fail"}, "whole numbers of rows"),
        ({"kind": "row_count_change", "max_percent": 0, "severity": "warn"}, "above 0"),
        ({"kind": "freshness", "column": "ts", "max_age_hours": "1", "severity": "warn"}, "hours"),
        ({"kind": "accepted_values", "column": "s", "values": [], "severity": "warn"}, "1–1000"),
        (
            {"kind": "accepted_values", "column": "s", "values": [[1]], "severity": "warn"},
            "strings, numbers or booleans",
        ),
        ({"kind": "sql", "condition": "", "severity": "fail"}, "boolean SQL expression"),
        ({"kind": "sql", "condition": "amount >", "severity": "fail"}, "does not parse"),
        ({"kind": "sql", "condition": "a > 1; DROP TABLE t", "severity": "fail"}, "parse"),
        ({"kind": "sql", "condition": "42", "severity": "fail"}, "is a boolean expression"),
        (
            {"kind": "sql", "condition": "id IN (SELECT id FROM sales.secret)", "severity": "fail"},
            "subqueries are refused",
        ),
        (
            {"kind": "sql", "condition": "EXISTS (SELECT 1 FROM t)", "severity": "fail"},
            "subqueries are refused",
        ),
    ]
    for check, expected in cases:
        (message,) = checked((check,))
        assert expected in message, (check, message)
    assert checked("[{not json") == [
        "Checks must be a JSON list of objects: Expecting property name enclosed in double "
        "quotes: line 1 column 3 (char 2)."
    ]
    assert "JSON list" in checked('{"kind": "unique"}')[0]
    assert checked(tuple([UNIQUE_ID] * 21)) == ["At most 20 checks per published table."]
    # Checks without a table to publish to: the table is asked for.
    lone = Step("daily", "sql", SELECT_ONE, publish=Publish("", "append", (UNIQUE_ID,)))
    assert "namespace.table" in check_steps([lone]).steps[0]["publish"][0]


def test_checks_are_stored_with_the_step_and_a_step_without_them_as_before():
    with_checks = Step(
        "daily", "sql", SELECT_ONE, publish=Publish("sales.daily", "append", (UNIQUE_ID,))
    )
    assert with_checks.to_dict()["publish"] == {
        "table": "sales.daily",
        "mode": "append",
        "checks": [UNIQUE_ID],
    }
    assert Step.from_dict(json.loads(json.dumps(with_checks.to_dict()))) == with_checks
    plain = Step("daily", "sql", SELECT_ONE, publish=Publish("sales.daily"))
    assert plain.to_dict()["publish"] == {"table": "sales.daily", "mode": "append"}


def saved_steps(db_engine, workflow_id: int) -> list[Step]:
    with Session(db_engine) as db:
        versions = db.exec(
            select(WorkflowVersion)
            .where(WorkflowVersion.workflow_id == workflow_id)
            .order_by(WorkflowVersion.version.desc())
        ).all()
        return loads(versions[0].steps)


def editor_form(checks: str, base_version: int = 1) -> dict:
    return {
        "base_version": str(base_version),
        "steps-0-name": "daily",
        "steps-0-kind": "sql",
        "steps-0-code": SELECT_ONE,
        "steps-0-publish-table": "sales.daily",
        "steps-0-publish-mode": "append",
        "steps-0-publish-checks": checks,
    }


def test_the_editor_saves_checks_and_says_what_is_wrong_with_them(client, db_engine):
    owner = make_user(db_engine)
    workflow = workflow_for(db_engine, owner)
    sign_in_as(client, owner)
    headers = {"X-CSRFToken": csrf(client), "HX-Request": "true"}

    refused = client.post(
        f"/workflows/{workflow.id}/edit",
        data=editor_form('[{"kind": "unique", "columns": ["id"]}]'),
        headers=headers,
    )
    assert refused.status_code == 422
    page = refused.get_data(as_text=True)
    assert "Check 1 (unique): severity is “warn” (recorded only) or “fail”" in page
    assert re.search(r'name="steps-0-publish-checks"[^>]*aria-invalid="true"', page, re.S)
    typed = re.search(r'name="steps-0-publish-checks".*?>(.*?)</textarea>', page, re.S).group(1)
    assert json.loads(typed.replace("&#34;", '"')) == [{"kind": "unique", "columns": ["id"]}]

    saved = client.post(
        f"/workflows/{workflow.id}/edit", data=editor_form(json.dumps([UNIQUE_ID])), headers=headers
    )
    assert saved.status_code in (200, 302), saved.get_data(as_text=True)
    assert saved_steps(db_engine, workflow.id)[0].publish.checks == (UNIQUE_ID,)
    shown = client.get(f"/workflows/{workflow.id}").get_data(as_text=True)
    assert "after 1 quality check: unique (fail)" in shown
    edited = client.get(f"/workflows/{workflow.id}/edit").get_data(as_text=True)
    shown = re.search(r'name="steps-0-publish-checks".*?>(.*?)</textarea>', edited, re.S).group(1)
    assert json.loads(shown.replace("&#34;", '"')) == [UNIQUE_ID]


def test_the_api_saves_checks_and_names_the_field_of_a_bad_one(app, client, db_engine):
    owner = make_user(db_engine)
    api = Api(client, token_for(app, owner))
    workflow = workflow_for(db_engine, owner)
    daily = {
        "name": "daily",
        "kind": "sql",
        "code": SELECT_ONE,
        "output": False,
        "publish": {"table": "sales.daily", "mode": "append", "checks": [UNIQUE_ID]},
    }
    url = f"/api/v1/workflows/{workflow.id}/versions"
    saved = api.call("POST", url, {"base_version": 1, "steps": [daily]})
    assert saved.status_code == 201, saved.get_json()
    assert saved.get_json()["steps"] == [daily]

    bad = {**daily, "publish": {**daily["publish"], "checks": [{**UNIQUE_ID, "severity": "x"}]}}
    refused = api.call("POST", url, {"base_version": 2, "steps": [bad]})
    assert refused.status_code == 400
    assert refused.get_json()["field"] == "steps.0.checks"
    assert "severity is “warn”" in refused.get_json()["detail"]


def reported_check(**fields) -> dict:
    return {
        "step": "daily",
        "table": "sales.daily",
        "kind": "unique",
        "check": "unique(id)",
        "severity": "fail",
        "offending": 4,
        "passed": False,
        "detail": "4 rows share a key with another row",
        "sample": ["id=1, rows=2", "id=7, rows=2"],
        **fields,
    }


def test_the_units_word_on_checks_is_kept_typed_and_bounded():
    kept = unit_reports.reported_checks(
        [
            reported_check(sample=["x" * 5000] + ["row"] * 9, extra="dropped"),
            reported_check(step="no such step!"),  # not a step name
            reported_check(severity="fatal"),
            reported_check(offending="4"),
            reported_check(passed="no"),
            "not an object",
        ]
    )
    assert len(kept) == 1 and "extra" not in kept[0]
    assert len(kept[0]["sample"]) == 5 and len(kept[0]["sample"][0]) <= 400
    assert unit_reports.reported_checks({"not": "a list"}) == []
    result = unit_reports.reported_result(9, {"checks": [reported_check()]}, {})
    assert result["checks"] == [reported_check()]


def test_a_failed_runs_checks_show_on_its_page_with_their_sample_and_in_the_api(
    app, client, db_engine
):
    owner = make_user(db_engine)
    workflow = workflow_for(db_engine, owner)
    warehouse, unit = warehouse_row(db_engine, owner), unit_row(db_engine, owner)
    sign_in_as(client, owner)
    warned = reported_check(kind="not_null", check="not_null(s)", severity="warn", offending=1)
    progress = {"steps": [{"name": "daily", "state": "done", "checks": [reported_check(), warned]}]}
    failed = execution_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        unit,
        state="FAILED",
        run_id="r",
        reason="check unique(id) on sales.daily (step 'daily') failed: 4 offending rows",
        progress=unit_reports.merged_progress({}, progress),
    )
    page = client.get(f"/executions/{failed.id}").get_data(as_text=True)
    shown = re.search(r'data-testid="execution-checks">(.*?)</article>', page, re.S).group(1)
    rows = re.findall(r'<tr data-testid="check-result"(.*?)</tr>', shown, re.S)
    assert len(rows) == 2
    assert 'data-passed="false"' in rows[0] and "unique(id)" in rows[0] and ">failed<" in rows[0]
    assert re.search(r'data-testid="check-offending">4\b', rows[0])
    sample = re.search(r'<details data-testid="check-sample">(.*?)</details>', rows[0], re.S)
    assert "<code>id=1, rows=2</code>" in sample.group(1)
    assert ">warning<" in rows[1]

    api = Api(client, token_for(app, owner))
    answer = api.call("GET", f"/api/v1/executions/{failed.id}").get_json()
    assert [check["check"] for check in answer["checks"]] == ["unique(id)", "not_null(s)"]
    assert answer["checks"][0]["sample"] == ["id=1, rows=2", "id=7, rows=2"]

    completed = execution_row(
        db_engine,
        owner,
        workflow,
        warehouse,
        unit,
        state="COMPLETED",
        run_id="r",
        outputs=json.dumps(
            {"outputs": {}, "checks": [reported_check(passed=True, offending=0, sample=[])]}
        ),
        lineage=json.dumps(
            {
                "read": [],
                "wrote": [
                    {
                        "table": "sales.daily",
                        "step": "daily",
                        "snapshot_id": 5,
                        "snapshot_at_ms": None,
                        "added_records": 3,
                        "added_files": 1,
                        "added_bytes": 10,
                        "checks": [{"kind": "unique", "check": "unique(id)", "passed": True}],
                    }
                ],
            }
        ),
    )
    page = client.get(f"/executions/{completed.id}").get_data(as_text=True)
    assert 'data-passed="true"' in page and 'data-testid="check-sample"' not in page
    assert re.search(r'data-testid="lineage-checks">1 of 1 passed<', page)
    answer = api.call("GET", f"/api/v1/executions/{completed.id}").get_json()
    assert [check["passed"] for check in answer["checks"]] == [True]


# ------------------------------------------------------------------ on a unit (heavy)
def published_step(name: str, code: str, table: str, mode: str, checks: list[dict]) -> dict:
    return {
        **catalog_step(name, code),
        "publish": {"table": table, "mode": mode, "checks": checks},
    }


def rows_of(catalog, table: str) -> list[dict]:
    return sorted(catalog.load_table(table).scan().to_arrow().to_pylist(), key=str)


def test_a_failing_fail_check_publishes_nothing_and_a_warn_check_is_recorded(
    app, client, db_engine, host, lakehouse, warehouses
):
    warehouse, table = warehouses[0], f"qc_{secrets.token_hex(3)}.orders"
    catalog = reader(lakehouse, warehouse)
    rows = (
        "SELECT id, IF(id = 2, NULL, 'open') AS status, id * 10 AS amount, "
        "current_timestamp() - INTERVAL 5 MINUTES AS placed_at FROM range(4)"
    )
    run_id, _ = submit(
        host, lakehouse, warehouse, [published_step("orders", rows, table, "append", [UNIQUE_ID])]
    )
    first = host.wait(run_id, timeout_s=300)
    assert first["state"] == "COMPLETED", first["error"]
    before = catalog.load_table(table).current_snapshot().snapshot_id
    assert len(rows_of(catalog, table)) == 4

    # The next rows repeat ids 1 and 3 (twice each): the unique check fails with 4 offending rows.
    duplicated = f"{rows} UNION ALL SELECT * FROM ({rows}) WHERE id IN (1, 3)"
    run_id, spec = submit(
        host,
        lakehouse,
        warehouse,
        [published_step("orders", duplicated, table, "append", [UNIQUE_ID])],
    )
    failed = host.wait(run_id, timeout_s=300)
    assert failed["state"] == "FAILED"
    assert (
        f"check unique(id) on {table} (step 'orders') failed: 4 offending rows" in (failed["error"])
    )
    assert "nothing was published" in failed["error"]
    again = reader(lakehouse, warehouse).load_table(table)  # an independent read
    assert again.current_snapshot().snapshot_id == before
    assert len(rows_of(catalog, table)) == 4

    # The run page shows the failed check and its sample rows.
    owner = make_user(db_engine)
    workflow = workflow_for(db_engine, owner)
    sign_in_as(client, owner)
    execution = execution_row(
        db_engine,
        owner,
        workflow,
        warehouse_row(db_engine, owner),
        unit_row(db_engine, owner),
        state="FAILED",
        run_id=run_id,
        reason=failed["error"][:1000],
        progress=unit_reports.merged_progress({}, failed["progress"]),
    )
    page = client.get(f"/executions/{execution.id}").get_data(as_text=True)
    shown = re.search(r'data-testid="execution-checks">(.*?)</article>', page, re.S).group(1)
    assert "unique(id)" in shown and re.search(r'data-testid="check-offending">4\b', shown)
    sample = re.search(r'data-testid="check-sample">(.*?)</details>', shown, re.S).group(1)
    assert "id=1, rows=2" in sample and "id=3, rows=2" in sample

    # Warn checks that fail are recorded, and the rows are published; every kind runs.
    warnings = [
        {**UNIQUE_ID, "severity": "warn"},
        {"kind": "not_null", "column": "status", "severity": "warn"},
        {"kind": "accepted_values", "column": "status", "values": ["closed"], "severity": "warn"},
        {"kind": "row_count", "min": 1, "max": 100, "severity": "fail"},
        {"kind": "row_count_change", "max_percent": 10, "severity": "warn"},
        {"kind": "freshness", "column": "placed_at", "max_age_hours": 1, "severity": "fail"},
        {"kind": "sql", "condition": "amount >= 0 AND amount < 1000", "severity": "fail"},
    ]
    run_id, _ = submit(
        host,
        lakehouse,
        warehouse,
        [published_step("orders", duplicated, table, "append", warnings)],
    )
    warned = host.wait(run_id, timeout_s=300)
    assert warned["state"] == "COMPLETED", warned["error"]
    results = {check["check"]: check for check in warned["result"]["checks"]}
    assert (results["unique(id)"]["offending"], results["unique(id)"]["passed"]) == (4, False)
    assert results["not_null(status)"]["offending"] == 1
    assert results["not_null(status)"]["sample"][0].startswith("id=2, status=null")
    assert results["accepted_values(status)"]["offending"] == 5  # nulls are let through
    assert results["row_count(1..100)"]["passed"]
    assert results["row_count_change(±10%)"]["offending"] == 2  # 6 rows against 4: 50%
    assert results["freshness(placed_at)"]["passed"]
    assert results["sql(amount >= 0 AND amount < 1000)"]["passed"]
    assert len(rows_of(catalog, table)) == 10
    wrote = {entry["table"]: entry for entry in warned["result"]["lineage"]["wrote"]}
    assert len(wrote[table]["checks"]) == len(warnings)


def test_a_sql_condition_runs_only_as_a_boolean_expression_without_subqueries(
    host, lakehouse, warehouses
):
    warehouse, table = warehouses[0], f"qc_{secrets.token_hex(3)}.orders"
    catalog = reader(lakehouse, warehouse)
    for condition, expected in (
        ("id + 1", "is bigint, not boolean"),
        ("id IN (SELECT id FROM range(3))", "subqueries are refused"),
        ("no_such_column > 1", "cannot run"),
    ):
        check = {"kind": "sql", "condition": condition, "severity": "warn"}
        run_id, _ = submit(
            host,
            lakehouse,
            warehouse,
            [published_step("orders", "SELECT id FROM range(3)", table, "overwrite", [check])],
        )
        failed = host.wait(run_id, timeout_s=300)
        assert failed["state"] == "FAILED", condition
        assert expected in failed["error"], failed["error"]
        assert not catalog.table_exists(table) or rows_of(catalog, table) == []


# ---------------------------------------------------------------------- one job for a target's checks
def jobs_of(spark, group: str, work) -> tuple[object, int]:
    """What `work()` returns and how many Spark jobs it ran (tagged with a job group)."""
    context = spark.sparkContext
    context.setJobGroup(group, group)
    try:
        value = work()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return value, len(context.statusTracker().getJobIdsForGroup(group))


def test_a_targets_checks_run_as_one_job_and_give_what_each_gives_alone(tmp_path):
    """Heavy (a local Spark session). The checks of one target share one aggregation, the unique
    key's group-by: all of them cost the Spark jobs the unique check alone costs, and each result
    (count, sample, detail) is the one `evaluate` gives check by check, failing or passing."""
    from datetime import datetime, timezone

    from pyspark.sql import SparkSession

    from compute.run.checks import CheckRefused, evaluate, evaluate_all

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("checks-one-job")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", str(tmp_path))
        .getOrCreate()
    )
    try:
        now = datetime(2026, 11, 28, 12, tzinfo=timezone.utc)
        rows = [(1, "a", 5.0, now), (2, "b", 7.0, now), (3, "a", 1.0, now)]
        clean = spark.createDataFrame(rows, "id long, region string, amount double, at timestamp")
        checks = [
            {"kind": "not_null", "column": "region", "severity": "fail"},
            UNIQUE_ID,
            {
                "kind": "accepted_values",
                "column": "region",
                "values": ["a", "b"],
                "severity": "fail",
            },
            {"kind": "row_count", "min": 1, "max": 10, "severity": "warn"},
            {"kind": "freshness", "column": "at", "max_age_hours": 24, "severity": "fail"},
            {"kind": "sql", "condition": "amount >= 0", "severity": "fail"},
        ]
        now_s = now.timestamp() + 3600
        together, together_jobs = jobs_of(
            spark, "together", lambda: evaluate_all(checks, clean, now_s=now_s)
        )
        _, unique_jobs = jobs_of(spark, "unique", lambda: evaluate(UNIQUE_ID, clean))
        assert [result["passed"] for result in together] == [True] * len(checks)
        assert together_jobs == unique_jobs, "the checks cost more jobs than the unique key alone"
        assert together == [evaluate(check, clean, now_s=now_s) for check in checks]

        bad = clean.union(
            spark.createDataFrame(
                [(1, None, -2.0, now), (4, "z", 3.0, now)],
                "id long, region string, amount double, at timestamp",
            )
        ).coalesce(1)
        failing = evaluate_all(checks, bad, now_s=now_s)
        assert failing == [evaluate(check, bad, now_s=now_s) for check in checks]
        assert [result["offending"] for result in failing] == [1, 2, 1, 0, 0, 1]
        assert failing[1]["sample"] == ["id=1, rows=2"]

        # A check that cannot run is named alone; the others still run in the shared job.
        wrong = [checks[0], {"kind": "not_null", "column": "nope", "severity": "warn"}, UNIQUE_ID]
        outcome = evaluate_all(wrong, bad)
        assert isinstance(outcome[1], CheckRefused) and "'nope'" in str(outcome[1])
        assert [outcome[0]["offending"], outcome[2]["offending"]] == [1, 2]
    finally:
        spark.stop()
