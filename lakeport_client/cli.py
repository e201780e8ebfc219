"""`lakeport`: Lakeport from a terminal, CI or a scheduler.

It reads the portal's URL and a personal access token from LAKEPORT_URL and LAKEPORT_TOKEN, or
from a config file (LAKEPORT_CONFIG, else ~/.config/lakeport/config.toml) holding
`url = "..."` and `token = "..."`; the environment wins.

    lakeport units
    lakeport executions
    lakeport run WORKFLOW --unit UNIT --warehouse WAREHOUSE [--version N] [--wait]
    lakeport results EXECUTION STEP [--csv]
    lakeport sql "SELECT …" --warehouse WAREHOUSE [--unit UNIT] [--write] [--csv]
    lakeport tables WAREHOUSE
    lakeport table WAREHOUSE NAMESPACE.TABLE
    lakeport table-policy WAREHOUSE NAMESPACE.TABLE [--small-file-mb N]
        [--compact-small-files N | --never-compact] [--expire-days N | --never-expire]
        [--start-unit | --no-start-unit]
    lakeport maintenance WAREHOUSE NAMESPACE.TABLE

WORKFLOW, UNIT and WAREHOUSE are ids or names (`sql` and the table commands take a warehouse
shared with you by its id). `run` names the version it runs (the latest as listed, or
--version): a version saved in between is refused, not run. `run --wait` prints the
run's log as it comes and exits 0 only when the execution COMPLETED. `sql` runs one statement
on a running unit of yours (the first, unless --unit; `--unit pool` takes a warm unit of the
pool, `--unit new` starts one, as it does when none of yours runs), waits for it and prints its
rows. `table` prints a table's health and its publishes (each snapshot and the run that wrote it),
`table-policy` its maintenance policy, or sets the parts named (the others stay as they are), and
`maintenance` its maintenance jobs.
"""

from __future__ import annotations

import csv
import os
import sys
import time
import tomllib
from datetime import datetime, timezone
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


def _warehouse_id(client: Client, warehouse: str) -> int:
    """An id as given (the API answers 404 for one you may not see), else your warehouse's."""
    if warehouse.isdigit():
        return int(warehouse)
    return _pick(client.warehouses(), warehouse, "warehouse")["id"]


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
        warehouse_id = _warehouse_id(client, warehouse)
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


# --- tables: their health, publishes, maintenance policy and jobs ------------------------------


@main.command()
@click.argument("warehouse")
def tables(warehouse: str) -> None:
    """The tables of WAREHOUSE (id or name), as NAMESPACE.TABLE."""
    with make_client() as client:
        found = client.tables(_warehouse_id(client, warehouse))
    _table([[f"{table['namespace']}.{table['name']}"] for table in found], ["TABLE"])


def _existing_table(client: Client, warehouse: str, name: str) -> int:
    """The warehouse's id, once its catalog has the table: the API keeps a policy and lists jobs
    for any well-formed name, so a mistyped one would otherwise get a policy of its own."""
    warehouse_id = _warehouse_id(client, warehouse)
    client.table_health(warehouse_id, name)
    return warehouse_id


def _fields(pairs: list[tuple[str, object]]) -> None:
    width = max(len(label) for label, _ in pairs)
    for label, value in pairs:
        click.echo(f"{label.ljust(width)}  {value}")


def _when_ms(epoch_ms: int | None) -> str:
    if not epoch_ms:
        return "-"
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _size(count: int | None) -> str:
    if count is None:
        return "-"
    if count < 1024:
        return f"{count} B"
    size = count / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{size:.1f} {unit}"


def _workflow_names(workflows: list[dict]) -> str:
    return ", ".join(workflow["name"] or f"workflow #{workflow['id']}" for workflow in workflows)


@main.command()
@click.argument("warehouse")
@click.argument("name", metavar="NAMESPACE.TABLE")
def table(warehouse: str, name: str) -> None:
    """A table's health (from its metadata) and its publishes: each snapshot, newest first, with
    the execution and step that wrote it."""
    with make_client() as client:
        warehouse_id = _warehouse_id(client, warehouse)
        health = client.table_health(warehouse_id, name)
        story = client.table_publishes(warehouse_id, name)
    _fields(
        [
            ("table", name),
            ("data files", health["data_files"]),
            ("average file", _size(health["average_file_bytes"])),
            (
                "small files",
                f"{health['small_files']} (below {_size(health['small_file_bytes'])})",
            ),
            ("delete files", health["delete_files"]),
            ("records", health["records"]),
            ("snapshots", health["snapshots"]),
            ("last compaction", _when_ms(health["last_compaction_ms"])),
            ("written by", _workflow_names(story["written_by"]) or "-"),
            ("read by", _workflow_names(story["read_by"]) or "-"),
        ]
    )
    click.echo()
    _table(
        [
            [
                _when_ms(entry["committed_at_ms"]),
                str(entry["snapshot_id"]) + (" (expired)" if entry["expired"] else ""),
                "compaction" if entry["operation"] == "replace" else entry["operation"] or "-",
                f"#{entry['execution_id']}" if entry["execution_id"] else "-",
                entry["step"] or "-",
                "-" if entry["added_records"] is None else entry["added_records"],
            ]
            for entry in story["publishes"]
        ],
        ["COMMITTED", "SNAPSHOT", "OPERATION", "EXECUTION", "STEP", "ROWS ADDED"],
    )


def _print_policy(policy: dict) -> None:
    compact, expire = policy["compact_small_files"], policy["expire_days"]
    _fields(
        [
            ("small files", f"below {policy['small_file_mb']} MiB"),
            ("compact", "never" if compact is None else f"when small files reach {compact}"),
            ("expire snapshots", "never" if expire is None else f"older than {expire} days"),
            (
                "start a unit",
                "yes, when no unit of yours is idle" if policy.get("start_unit") else "no",
            ),
            (
                "updated",
                policy["updated_at"][:19].replace("T", " ")
                if policy["updated_at"]
                else "never set",
            ),
        ]
    )


@main.command("table-policy")
@click.argument("warehouse")
@click.argument("name", metavar="NAMESPACE.TABLE")
@click.option("--small-file-mb", type=int, help="Files below this many MiB are small.")
@click.option("--compact-small-files", type=int, help="Compact when small files reach N.")
@click.option("--never-compact", is_flag=True, help="Compact nothing.")
@click.option("--expire-days", type=int, help="Expire snapshots older than N days.")
@click.option("--never-expire", is_flag=True, help="Expire no snapshot.")
@click.option(
    "--start-unit/--no-start-unit",
    default=None,
    help="With no idle unit of yours, start one for a job (stopped once it ends), or not.",
)
def table_policy(
    warehouse: str,
    name: str,
    small_file_mb: int | None,
    compact_small_files: int | None,
    never_compact: bool,
    expire_days: int | None,
    never_expire: bool,
    start_unit: bool | None,
) -> None:
    """A table's maintenance policy; with options, set the parts named (you may write the
    warehouse; the others stay as they are) and print the policy saved."""
    for number, never, names in (
        (compact_small_files, never_compact, "--compact-small-files and --never-compact"),
        (expire_days, never_expire, "--expire-days and --never-expire"),
    ):
        if number is not None and never:
            raise click.UsageError(f"Give one of {names}.")
    with make_client() as client:
        warehouse_id = _existing_table(client, warehouse, name)
        policy = client.table_policy(warehouse_id, name)
        changes = small_file_mb, compact_small_files, never_compact, expire_days, never_expire
        if any(change not in (None, False) for change in changes) or start_unit is not None:
            policy = client.set_table_policy(
                warehouse_id,
                name,
                small_file_mb=_chosen(small_file_mb, False, policy["small_file_mb"]),
                compact_small_files=_chosen(
                    compact_small_files, never_compact, policy["compact_small_files"]
                ),
                expire_days=_chosen(expire_days, never_expire, policy["expire_days"]),
                start_unit=start_unit,
            )
            click.echo("policy saved: the worker checks the table at its next pass", err=True)
    _print_policy(policy)


def _chosen(number: int | None, never: bool, current: int | None) -> int | None:
    """A policy part as asked: off (`never`), the number given, else as it is."""
    if never:
        return None
    return current if number is None else number


@main.command()
@click.argument("warehouse")
@click.argument("name", metavar="NAMESPACE.TABLE")
def maintenance(warehouse: str, name: str) -> None:
    """A table's maintenance jobs, newest first: what each did, its outcome (or why it was
    skipped), data files before and after, and the GB-hours it held the unit."""
    with make_client() as client:
        jobs = client.table_maintenance(_existing_table(client, warehouse, name), name)
    _table(
        [
            [
                job["id"],
                job["created_at"][:16].replace("T", " "),
                " and ".join(
                    part
                    for part, done in (
                        ("compaction", job["compact"]),
                        ("snapshot expiry", job["expire_before"]),
                    )
                    if done
                )
                or "-",
                f"skipped: {job['skipped']}"
                if job["skipped"]
                else f"{job['state']}: {job['error']}"
                if job["error"]
                else job["state"],
                f"{_or_dash(job['data_files_before'])} -> {_or_dash(job['data_files_after'])}",
                _or_dash(None if job["gb_hours"] is None else f"{job['gb_hours']:.4f}"),
            ]
            for job in jobs
        ],
        ["ID", "ASKED", "WHAT", "OUTCOME", "DATA FILES", "GB-HOURS"],
    )


def _or_dash(value) -> str:
    return "-" if value is None else str(value)


def run_main() -> None:
    """The `lakeport` script."""
    main()
