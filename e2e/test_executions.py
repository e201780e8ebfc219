"""A workflow run as a person does it, in a real browser: from an uploaded CSV to the results
and logs of its execution on a real local compute unit (Ray + Spark)."""

import csv
import re
import uuid

import pytest
from playwright.sync_api import expect

from e2e.journeys import (
    register_warehouse,
    start_unit,
    terminate_units,
    upload_csv,
    wait_until_unit_runs,
)

CITIES = ("Lisbon", "Oslo", "Quito", "Hanoi", "Perth")
ROWS = 150  # three pages at the default page size of 50

# Step 1 reads the upload; step 2 (the output) derives a column, orders the rows and prints a
# line that should show up in the execution's logs.
FILTER_STEP = "SELECT id, city, amount FROM datasets.{table} WHERE amount > 0"
DERIVE_STEP = """\
from pyspark.sql import functions as F

def run(spark, priced):
    print(f"derive saw {priced.count()} priced orders")
    return priced.withColumn("amount_cents", F.round(F.col("amount") * 100).cast("long")).orderBy("id")"""


def expected_row(number: int) -> list[str]:
    """Row `number` (from 1) of the output, as text: id, city, amount, amount_cents."""
    return [str(number), CITIES[number % len(CITIES)], f"{number}.5", str(number * 100 + 50)]


@pytest.fixture
def units_to_terminate(page, portal):
    """Names of compute units that are terminated through the UI at the end, whatever happened in
    the test (in a page of their own, so a failure's screenshot shows where it failed)."""
    names: list[str] = []
    yield names
    terminate_units(page, portal, names)


def test_alice_runs_a_two_step_workflow_on_an_uploaded_csv_and_reads_its_results(
    page,
    sign_in,
    portal,
    fill_warehouse_form,
    units_to_terminate,
    tmp_path,
    check_page,
    write_code,
    target,
):
    suffix = uuid.uuid4().hex[:8]
    warehouse, unit, workflow = (
        target.name("runs"),
        target.name("runner"),
        target.name("city orders"),
    )
    table = f"orders_{suffix}"
    csv_file = tmp_path / "orders.csv"
    with csv_file.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "city", "amount"])
        writer.writerows(
            [number, CITIES[number % len(CITIES)], number + 0.5] for number in range(1, ROWS + 1)
        )

    sign_in("alice")

    # A warehouse of her own, in her SeaweedFS bucket.
    register_warehouse(page, fill_warehouse_form, warehouse)

    # A compute unit: it comes up while she writes the workflow.
    units_to_terminate.append(unit)
    unit_url = start_unit(page, unit)

    # The workflow: a SQL step reading the upload, then a PySpark step that is the output.
    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_test_id("new-workflow").click()
    page.get_by_label("Name").fill(workflow)
    page.get_by_test_id("create-workflow").click()
    first = page.get_by_test_id("step-editor").nth(0)
    first.get_by_label("Name").fill("priced")
    write_code(first, FILTER_STEP.format(table=table))
    page.get_by_test_id("add-python-step").click()
    expect(page.get_by_test_id("step-editor")).to_have_count(2)
    second = page.get_by_test_id("step-editor").nth(1)
    expect(second.get_by_label("Kind")).to_have_value("python")
    second.get_by_label("Name").fill("derive")
    write_code(second, DERIVE_STEP)
    second.get_by_label("Output").check()
    check_page("editor")
    page.get_by_test_id("save-workflow").click()
    expect(page.get_by_text(f"Saved {workflow} as version 1.")).to_be_visible()
    expect(page.get_by_test_id("step-view")).to_have_count(2)

    # The data it reads: the CSV, uploaded into the warehouse.
    upload_csv(page, warehouse, table, csv_file, ROWS)
    expect(page.get_by_test_id("upload-result")).to_contain_text(
        f"Imported {ROWS} rows (CSV, 3 columns: id, city, amount) as datasets.{table}"
    )

    # The unit is up (its page polls itself; WARMING while its Spark session starts)...
    wait_until_unit_runs(page, unit_url, warming=True)

    # ... so the run dialog offers it.
    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_role("link", name=workflow).click()
    page.get_by_test_id("run-workflow").click()
    unit_select = page.get_by_label("Compute unit")
    unit_select.select_option(unit_select.locator("option", has_text=unit).get_attribute("value"))
    page.get_by_label("Warehouse to write into").select_option(label=warehouse)
    page.get_by_test_id("run").click()
    expect(page).to_have_url(re.compile(r"/executions/\d+$"))
    execution_id = int(page.url.rsplit("/", 1)[1])
    expect(page.get_by_test_id("execution-title")).to_have_text(f"Execution #{execution_id}")

    # She watches it: the page updates itself until the execution completes (no reload). The
    # first execution on a unit also starts Spark there.
    page.evaluate("window.stillTheSamePage = true")
    state = page.get_by_test_id("execution-state")
    expect(state).to_have_text(re.compile("COMPLETED|FAILED|CANCELLED"), timeout=240_000)
    assert state.inner_text() == "COMPLETED", page.get_by_test_id("execution-live").inner_text()
    check_page("execution")
    assert page.evaluate("window.stillTheSamePage === true"), "the page was reloaded"
    for step in ("priced", "derive"):
        expect(page.locator(f'[data-testid="step-progress"][data-step="{step}"]')).to_contain_text(
            "done"
        )
    # Only an output step is counted (the others are not materialised).
    expect(page.locator('[data-testid="step-progress"][data-step="derive"]')).to_contain_text(
        f"{ROWS} rows"
    )

    # The output's results, 50 rows a page: page 2 holds rows 51 to 100.
    output_link = page.get_by_test_id("output-link")
    expect(output_link).to_have_count(1)
    expect(output_link).to_have_text("derive")
    output_link.click()
    expect(page.get_by_test_id("results-title")).to_have_text("derive")
    expect(page.get_by_test_id("page-summary")).to_contain_text(f"Rows 1–50 of {ROWS}")
    results = page.get_by_test_id("result-table")
    expect(results.locator("thead th")).to_have_text(
        ["id long", "city string", "amount double", "amount_cents long"]
    )  # name, then type
    page.get_by_test_id("next-page").click()
    expect(page.get_by_test_id("page-summary")).to_contain_text(
        f"Rows 51–100 of {ROWS} · page 2 of 3"
    )
    expect(page.get_by_test_id("page-number")).to_have_value("2")
    body = results.locator("tbody tr")
    expect(body).to_have_count(50)
    expect(body.first.locator("td")).to_have_text(expected_row(51))
    expect(body.last.locator("td")).to_have_text(expected_row(100))
    assert [
        int(text) for text in results.locator("tbody tr td:first-child").all_inner_texts()
    ] == list(range(51, 101))

    # The whole output as CSV.
    with page.expect_download() as download_info:
        page.get_by_test_id("download-csv").click()
    download = download_info.value
    assert download.suggested_filename == f"results-e{execution_id}_derive.csv"
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    with saved.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["id", "city", "amount", "amount_cents"]
    assert len(rows) - 1 == ROWS
    # Every row, in the order the pages show them.
    assert rows[1:] == [expected_row(number) for number in range(1, ROWS + 1)]

    # The output in the warehouse's table explorer: its page links back to this execution.
    page.goto(portal + "/warehouses/")
    page.get_by_role("link", name=warehouse).click()
    page.locator('[data-namespace="results"]').get_by_role(
        "link", name=f"e{execution_id}_derive"
    ).click()
    expect(page.get_by_test_id("table-title")).to_have_text(f"results.e{execution_id}_derive")
    expect(page.get_by_test_id("made-by")).to_contain_text(f"execution #{execution_id}")
    check_page("table")
    page.goto(portal + f"/executions/{execution_id}/results/derive")

    # The logs, with what the PySpark step printed.
    page.get_by_role("link", name=f"#{execution_id}", exact=True).click()
    page.get_by_test_id("logs-link").click()
    expect(page.get_by_role("heading", name=f"Logs of execution #{execution_id}")).to_be_visible()
    printed = page.get_by_test_id("result-table").locator(
        "tbody tr", has_text=f"derive saw {ROWS} priced orders"
    )
    expect(printed).to_have_count(1, timeout=30_000)
    expect(printed.locator("td")).to_contain_text(["INFO", "derive"])
    # Its time in her time zone (the page's script turns the UTC time into local time).
    expect(printed.locator("time[data-local]")).not_to_contain_text("UTC")
    # She narrows the logs to the step, then searches them: the server filters, the URL keeps it.
    page.get_by_test_id("log-step").select_option("derive")
    expect(page).to_have_url(re.compile(r"/logs\?page=1&size=50&step=derive$"))
    steps = page.get_by_test_id("result-table").locator("tbody tr td:nth-child(3)")
    expect(steps.first).to_have_text("derive")
    assert set(steps.all_inner_texts()) == {"derive"}
    page.get_by_test_id("log-search").fill("PRICED ORDERS")
    expect(page).to_have_url(re.compile(r"/logs\?page=1&size=50&step=derive&q=PRICED\+ORDERS$"))
    expect(page.get_by_test_id("result-table").locator("tbody tr")).to_have_count(1)
    expect(page.get_by_test_id("result-table")).to_contain_text(f"derive saw {ROWS} priced orders")
    check_page("logs")
    page.reload()  # a shared link shows the same lines, with the filters filled in
    expect(page.get_by_test_id("log-search")).to_have_value("PRICED ORDERS")
    expect(page.get_by_test_id("log-step")).to_have_value("derive")
    expect(page.get_by_test_id("result-table").locator("tbody tr")).to_have_count(1)

    # What it read and wrote: the upload at its snapshot, the output's commit.
    page.get_by_role("link", name=f"#{execution_id}", exact=True).click()
    read = page.get_by_test_id("lineage-read").locator(f'tr[data-table="datasets.{table}"]')
    expect(read).to_have_count(1)
    read_snapshot = read.get_by_test_id("snapshot-id").inner_text()
    expect(read.locator("td").nth(3)).to_have_text(str(ROWS))
    expect(
        page.get_by_test_id("lineage-wrote")
        .locator("tr", has_text=f"results.e{execution_id}_derive")
        .locator("td")
        .nth(3)
    ).to_have_text(str(ROWS))

    # She runs it again on the same inputs (confirmed in the page): pinned to that snapshot.
    page.get_by_test_id("rerun").locator("summary").click()
    page.get_by_test_id("rerun-confirm").click()
    expect(page.get_by_test_id("pinned-to")).to_contain_text(
        f"datasets.{table} at snapshot {read_snapshot}"
    )
    rerun_id = int(page.url.rsplit("/", 1)[1])
    expect(state).to_have_text(re.compile("COMPLETED|FAILED|CANCELLED"), timeout=240_000)
    assert state.inner_text() == "COMPLETED", page.get_by_test_id("execution-live").inner_text()

    # And compares the two runs: same counts, same schema, no row in one and not the other.
    page.get_by_test_id("compare-form").get_by_label("Compare with").select_option(
        str(execution_id)
    )
    page.get_by_test_id("compare-form").get_by_role("button", name="Compare").click()
    expect(page).to_have_url(re.compile(rf"/executions/compare\?a={rerun_id}&b={execution_id}$"))
    output = page.get_by_test_id("compare-outputs").locator('tr[data-output="derive"]')
    expect(output.get_by_test_id("rows-a")).to_have_text(str(ROWS))
    expect(output.get_by_test_id("rows-b")).to_have_text(str(ROWS))
    expect(output.get_by_test_id("schema")).to_have_text("same")
    expect(page.get_by_test_id("only-in-a-count")).to_have_attribute(
        "data-count", "0", timeout=120_000
    )
    expect(page.get_by_test_id("only-in-b-count")).to_have_attribute("data-count", "0")
    # Everything a first run takes is done: the dashboard drops its checklist and shows the run.
    page.get_by_role("link", name="Lakeport").click()
    expect(page.get_by_test_id("getting-started")).to_have_count(0)
    recent = page.get_by_test_id("dashboard-executions").locator(f"#execution-row-{execution_id}")
    expect(recent).to_contain_text("COMPLETED")
    expect(recent).to_contain_text(workflow)
    expect(recent.get_by_test_id("execution-duration")).to_have_text(
        re.compile(r"^\d+ (s|min \d\d s)$")
    )
    check_page("dashboard-after-a-run")

    # A run that fails says why first, and takes her to the step that failed.
    page.get_by_role("link", name="Workflows").first.click()
    page.get_by_test_id("new-workflow").click()
    page.get_by_label("Name").fill(target.name("broken"))
    page.get_by_test_id("create-workflow").click()
    step = page.get_by_test_id("step-editor").nth(0)
    step.get_by_label("Name").fill("broken")
    step.get_by_label("Kind").select_option("python")
    write_code(step, "def run(spark):\n    raise ValueError('no good')")
    step.get_by_label("Output").check()
    page.get_by_test_id("save-workflow").click()
    expect(page.get_by_test_id("step-view")).to_have_count(1)
    page.get_by_test_id("run-workflow").click()
    unit_select = page.get_by_label("Compute unit")
    unit_select.select_option(unit_select.locator("option", has_text=unit).get_attribute("value"))
    page.get_by_label("Warehouse to write into").select_option(label=warehouse)
    page.get_by_test_id("run").click()
    expect(state).to_have_text(re.compile("COMPLETED|FAILED|CANCELLED"), timeout=240_000)
    failure = page.get_by_test_id("failure-box")
    expect(failure).to_have_attribute("role", "alert")
    expect(failure).to_contain_text("step 'broken' failed: ValueError: no good")
    expect(page.get_by_test_id("runtime-stats")).not_to_contain_text("does not exist")
    check_page("execution-failed")
    failure.get_by_test_id("failing-step-link").click()
    expect(page).to_have_url(re.compile(r"/edit#step-broken$"))
    expect(page.locator("#step-broken")).to_be_in_viewport()
