"""`lakeport`: Lakeport from a terminal, CI or a scheduler.

It reads the portal's URL and a personal access token from LAKEPORT_URL and LAKEPORT_TOKEN, or
from a config file (LAKEPORT_CONFIG, else ~/.config/lakeport/config.toml) holding
`url = "..."` and `token = "..."`; the environment wins.

    lakeport units
    lakeport executions
    lakeport run WORKFLOW --unit UNIT --warehouse WAREHOUSE [--version N] [--wait]
    lakeport results EXECUTION STEP [--csv]
    lakeport sql "SELECT …" --warehouse WAREHOUSE [--unit UNIT] [--write] [--csv]

WORKFLOW, UNIT and WAREHOUSE are ids or names. `run` names the version it runs (the latest as
listed, or --version): a version saved in between is refused, not run. `run --wait` prints the
run's log as it comes and exits 0 only when the execution COMPLETED. `sql` runs one statement
on a running unit of yours (the first, unless --unit; `--unit pool` takes a warm unit of the
pool, `--unit new` starts one, as it does when none of yours runs), waits for it and prints its
rows.
"""

from __future__ import annotations

import csv
import os
import sys
import time
import tomllib
from pathlib import Path

import click

from lakeport_client.client import ApiError, Client

FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED"}
# `run --wait` asks two questions a poll: every 2 s is half the API's default rate limit (120 a
# minute), leaving room for the user's other calls.
POLL_SECONDS = 2.0


def settings() -> tuple[str, str]:
    """(portal URL, token), from the environment or the config file."""
    path = Path(
        os.environ.get("LAKEPORT_CONFIG") or Path.home() / ".config" / "lakeport" / "config.toml"
    )
    stored = {}
    if path.is_file():
        try:
            stored = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as error:
            raise click.ClickException(f"{path}: {error}") from None
    url = os.environ.get("LAKEPORT_URL") or stored.get("url")
    token = os.environ.get("LAKEPORT_TOKEN") or stored.get("token")
    if not url or not token:
        raise click.ClickException(
            f"Set LAKEPORT_URL and LAKEPORT_TOKEN, or url and token in {path}."
        )
    return str(url), str(token)


def make_client() -> Client:
    return Client(*settings())


class _Group(click.Group):
    """Commands whose API refusals are one line on standard error (exit code 1), not a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ApiError as error:
            raise click.ClickException(str(error)) from None


@click.group(cls=_Group)
def main() -> None:
    """Lakeport from the command line."""


def _table(rows: list[list], header: list[str]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    for row in [header, *rows]:
        click.echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def _pick(items: list[dict], wanted: str, what: str) -> dict:
    """The item whose id or name is `wanted`."""
    for item in items:
        if str(item["id"]) == wanted or item["name"] == wanted:
            return item
    raise click.ClickException(f"No {what} of yours is called {wanted!r}.")


@main.command()
def units() -> None:
    """Your compute units."""
    with make_client() as client:
        _table(
            [[unit["id"], unit["name"], unit["kind"], unit["state"]] for unit in client.units()],
            ["ID", "NAME", "KIND", "STATE"],
        )


@main.command()
def executions() -> None:
    """Your executions, newest first."""
    with make_client() as client:
        names = {workflow["id"]: workflow["name"] for workflow in client.workflows()}
        _table(
            [
                [
                    run["id"],
                    names.get(run["workflow_id"], run["workflow_id"]),
                    run["workflow_version"],
                    run["state"],
                    run["warehouse_name"],
                    run["created_at"][:19],
                ]
                for run in client.executions()
            ],
            ["ID", "WORKFLOW", "VERSION", "STATE", "WAREHOUSE", "CREATED"],
        )


@main.command()
@click.argument("workflow")
@click.option("--unit", "unit", required=True, help="The compute unit to run on (id or name).")
@click.option("--warehouse", required=True, help="The warehouse to write into (id or name).")
@click.option(
    "--version",
    type=int,
    help="The version you reviewed; refused if a newer one was saved since "
    "(default: the latest as listed now).",
)
@click.option(
    "--wait/--no-wait", default=False, help="Follow the run; exit 0 only if it COMPLETED."
)
def run(workflow: str, unit: str, warehouse: str, version: int | None, wait: bool) -> None:
    """Run WORKFLOW (id or name) at its latest version. The portal runs only the version named here
    (the one listed, or --version), and refuses if a newer one was saved in between."""
    with make_client() as client:
        chosen = _pick(client.workflows(), workflow, "workflow")
        version = version if version is not None else chosen["latest_version"]
        execution = client.start(
            chosen["id"],
            _pick(client.units(), unit, "compute unit")["id"],
            _pick(client.warehouses(), warehouse, "warehouse")["id"],
            version=version,
        )
        click.echo(
            f"{chosen['name']} version {execution['workflow_version']}"
            + (
                f": code written by {execution['code_author']}"
                if execution.get("code_author")
                else ""
            )
        )
        click.echo(f"execution {execution['id']}: {execution['state']}")
        if not wait:
            return
        final = _follow(client, execution["id"])
    click.echo(
        f"execution {final['id']}: {final['state']}"
        + (f": {final['reason']}" if final["reason"] else "")
    )
    sys.exit(0 if final["state"] == "COMPLETED" else 1)


def _follow(client: Client, execution_id: int) -> dict:
    """Print the run's log lines as they come, until it ends; its final state."""
    printed = 0
    while True:
        execution = client.execution(execution_id)
        lines = client.log_tail(execution_id)
        for line in lines[printed:] if len(lines) >= printed else lines:
            click.echo(f"[{line.get('step') or '-'}] {line.get('message', '')}")
        printed = len(lines)
        if execution["state"] in FINAL_STATES:
            return execution
        time.sleep(POLL_SECONDS)


@main.command()
@click.argument("execution", type=int)
@click.argument("step")
@click.option("--csv", "as_csv", is_flag=True, help="All rows as CSV on standard output.")
@click.option("--page", type=int, default=1, show_default=True)
@click.option("--size", type=int, default=50, show_default=True)
def results(execution: int, step: str, as_csv: bool, page: int, size: int) -> None:
    """The rows of EXECUTION's output STEP."""
    with make_client() as client:
        if as_csv:
            for chunk in client.results_csv(execution, step):
                sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
            return
        found = client.results(execution, step, page=page, size=size)
        _table(found["rows"], found["columns"])
        click.echo(
            f"page {found['page']} of {found['pages']} ({found['total_rows']} rows)", err=True
        )


QUERY_FINAL_STATES = {"completed", "failed", "cancelled"}


@main.command()
@click.argument("statement")
@click.option("--warehouse", required=True, help="The warehouse to query (id or name).")
@click.option(
    "--unit",
    "unit",
    help="The compute unit to run on: a running one of yours (id or name), `pool` (a warm unit "
    "of the pool) or `new` (start one). Default: your first running unit, else `new`.",
)
@click.option(
    "--write", is_flag=True, help="Allow a statement that writes (a warehouse you may write)."
)
@click.option("--csv", "as_csv", is_flag=True, help="The rows as CSV on standard output.")
def sql(statement: str, warehouse: str, unit: str | None, write: bool, as_csv: bool) -> None:
    """Run STATEMENT (Spark SQL) and print its rows once it ends; exit 1 unless it completed."""
    with make_client() as client:
        units = [found for found in client.units() if found["state"] == "RUNNING"]
        if unit in ("pool", "new"):
            cu_id = unit
        elif unit is not None:
            cu_id = _pick(units, unit, "running compute unit")["id"]
        else:
            cu_id = units[0]["id"] if units else "new"
        warehouse_id = (
            int(warehouse)
            if warehouse.isdigit()
            else _pick(client.warehouses(), warehouse, "warehouse")["id"]
        )
        query = client.start_query(statement, warehouse_id, cu_id, "write" if write else "read")
        try:
            while query["state"] not in QUERY_FINAL_STATES:
                time.sleep(POLL_SECONDS / 4 if query["state"] == "queued" else POLL_SECONDS / 2)
                query = client.query(query["id"])
        except KeyboardInterrupt:
            client.cancel_query(query["id"])
            raise click.ClickException(f"query {query['id']} cancelled") from None
        if query["state"] != "completed":
            raise click.ClickException(f"query {query['id']}: {query['state']}: {query['error']}")
        if query["plan"]:
            click.echo(query["plan"])
            return
        rows, page = list(query["result_page"]["rows"]), query["result_page"]
        for number in range(2, page["pages"] + 1):
            rows += client.query(query["id"], page=number)["result_page"]["rows"]
        if as_csv:
            writer = csv.writer(sys.stdout, lineterminator="\n")
            writer.writerows([page["columns"], *rows])
        else:
            _table(rows, page["columns"])
        if query["truncated"]:
            click.echo(
                f"only the first {len(rows)} of {query['row_count']} rows came back: "
                "run it as a workflow for all of them",
                err=True,
            )


def run_main() -> None:
    """The `lakeport` script."""
    main()
