"""One SQL statement of the console run on a compute unit, its rows sent back bounded.

The portal submits a job of kind `query` (compute/contract.py JobKind) with `args`:
`sql` (one statement), `mode` ("read" or "write"), `max_rows`, `max_bytes`, `catalog` (uri,
warehouse, a token acting as the query's user for that one warehouse, as an execution's) and
`warehouse` ({"lakekeeper_id"}). The warehouse's catalog is bound as an execution's is
(compute/host/catalog_cache.py, the same per-warehouse bindings) and the statement runs in a Spark
session of its own whose one catalog it is. Nothing is written to the warehouse for a read: the
rows come back in the run's result.

A read-mode statement that would write is refused before it runs, twice: by sqlglot's parser
(`check_statement`, which the portal runs too, at the request) and by Spark's own parse of it
and its analyzed plan (`plan_refusal`: no command but the listed reading ones, no write node).
Statements that change the unit's shared state (SET, ADD JAR, CACHE TABLE, a function) are
refused in either mode. `EXPLAIN <statement>` answers the plan's text.

The result: {"columns": [{"name", "type"}], "rows": [[...]], "row_count", "truncated",
"plan" (EXPLAIN's text, else ""), "snapshots" (the tables and snapshots read, as lineage says),
"statement" (its name, e.g. "SELECT")}. At most `max_rows` rows and `max_bytes` of their JSON
come back; past either bound `truncated` is true and `row_count` says how many rows there were.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import json
import logging
import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

# The most a query may send back: the host's answers are read to 16 MiB at most
# (app/spark_host/client.py), and the run's record carries other fields beside the rows.
MAX_BYTES_CARRIED = 12 * 2**20
MAX_ROWS_CARRIED = 100_000
READ, WRITE = "read", "write"

# Statements a read may be: queries, and the commands that only describe.
_READ_EXPRESSIONS = (exp.Select, exp.SetOperation, exp.Values, exp.Describe, exp.Subquery)
_READ_COMMANDS = {"SHOW", "DESCRIBE", "DESC"}
# Anywhere in a read's tree, these write.
_WRITE_EXPRESSIONS = (
    exp.Insert,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.Merge,
    exp.Delete,
    exp.Update,
    exp.TruncateTable,
)
# What changes the unit's shared state (its session settings, class path, cache, functions): each
# query's session ends with it, but these reach past it.
_SHARED_STATE = (exp.Set, exp.Use, exp.Cache, exp.Uncache)
_SHARED_STATE_COMMANDS = {"ADD", "SET", "RESET", "LIST", "CLEAR", "REFRESH", "MSCK"}
_SECOND_WORDS = {
    "TABLE",
    "VIEW",
    "OVERWRITE",
    "INTO",
    "NAMESPACE",
    "DATABASE",
    "SCHEMA",
    "FUNCTION",
    "TEMPORARY",
    "OR",
    "JAR",
    "FILE",
    "ARCHIVE",
    "CACHE",
}
_EXPLAIN = re.compile(r"^\s*EXPLAIN(?:\s+(?:EXTENDED|CODEGEN|COST|FORMATTED))?\s+", re.IGNORECASE)


class StatementRefused(Exception):
    """The statement may not run (in this mode); the message names it, for its user."""


@dataclass(frozen=True)
class Statement:
    sql: str  # without a trailing semicolon
    name: str  # "SELECT", "INSERT INTO", "CREATE TABLE"…
    writes: bool
    explain: bool
    tables: tuple[str, ...]  # the tables it names, `ns.t`


def statement_name(sql: str) -> str:
    """The statement's keyword(s) as its user wrote them, upper case: "INSERT INTO", "DROP TABLE"."""
    words = [word.upper() for word in re.findall(r"[A-Za-z_]+", _strip_comments(sql))[:4]]
    if not words:
        return "the statement"
    if words[0] == "WITH":
        return "SELECT"
    if words[1:3] == ["OR", "REPLACE"]:  # CREATE OR REPLACE TABLE
        return " ".join(words[:4])
    if len(words) > 1 and words[1] in _SECOND_WORDS:
        return f"{words[0]} {words[1]}"
    return words[0]


def _strip_comments(sql: str) -> str:
    sql = re.sub(r"/\*.*?\*/", " ", sql, flags=re.DOTALL)
    return re.sub(r"--[^\n]*", " ", sql)


def check_statement(sql: str, mode: str) -> Statement:
    """The one statement in `sql`, checked for `mode` by sqlglot's Spark grammar. Raises
    StatementRefused: not one statement, a grammar error, a write in read mode, or a statement
    that changes the unit's shared state."""
    if mode not in (READ, WRITE):
        raise StatementRefused(f"the mode is read or write, not {mode!r}")
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise StatementRefused("there is no statement to run")
    explain = _EXPLAIN.match(text)
    inner = text[explain.end() :] if explain else text
    trees = [tree for tree in _parse(inner) if tree is not None]
    if len(trees) != 1:
        raise StatementRefused("run one statement at a time")
    tree = trees[0]
    name = statement_name(inner)
    if isinstance(tree, _SHARED_STATE) or (
        isinstance(tree, exp.Command)
        and str(tree.this).split()[0].upper() in _SHARED_STATE_COMMANDS
    ):
        raise StatementRefused(
            f"{name} is not run by the console: it would change the unit's session for later runs"
        )
    if isinstance(tree, exp.Create) and str(tree.args.get("kind") or "").upper() == "FUNCTION":
        raise StatementRefused(f"{name} is not run by the console: functions reach past the query")
    reads = (
        isinstance(tree, _READ_EXPRESSIONS)
        or (isinstance(tree, exp.Command) and str(tree.this).upper() in _READ_COMMANDS)
    ) and tree.find(*_WRITE_EXPRESSIONS) is None
    if not reads and mode == READ:
        raise StatementRefused(
            f"{name} writes, and this console is read-only: switch it to writing "
            "for a warehouse you may write"
        )
    tables = tuple(
        dict.fromkeys(f"{table.db}.{table.name}" for table in tree.find_all(exp.Table) if table.db)
    )
    return Statement(
        sql=text,
        name=f"EXPLAIN {name}" if explain else name,
        writes=not reads,
        explain=bool(explain),
        tables=tables,
    )


def _parse(sql: str) -> list:
    # sqlglot warns (logs) when it falls back to a Command; the fallback is what is checked here.
    logger = logging.getLogger("sqlglot")
    level, logger.level = logger.level, logging.ERROR
    try:
        return sqlglot.parse(sql, dialect="spark")
    except (ParseError, TokenError) as error:
        detail = error.errors[0] if isinstance(error, ParseError) and error.errors else {}
        where = (
            f"line {detail['line']}, column {detail['col']}: "
            if detail.get("line") is not None
            else ""
        )
        description = detail.get("description") or str(error).splitlines()[0]
        raise StatementRefused(f"not Spark SQL: {where}{description}") from None
    finally:
        logger.level = level


# --- Spark's plans ---------------------------------------------------------------------------

LOGICAL = "org.apache.spark.sql.catalyst.plans.logical"
# Commands that only describe what is there.
READ_COMMANDS = {
    "ShowTables",
    "ShowTablesExtended",
    "ShowNamespaces",
    "ShowColumns",
    "ShowTableProperties",
    "ShowCreateTable",
    "ShowPartitions",
    "ShowViews",
    "ShowFunctions",
    "DescribeRelation",
    "DescribeColumn",
    "DescribeNamespace",
    "DescribeTableCommand",
    "DescribeColumnCommand",
    "ShowTablesCommand",
    "ShowColumnsCommand",
    "ShowTablePropertiesCommand",
    "ShowCreateTableCommand",
    "ShowNamespacesCommand",
    "ExplainCommand",
}
# Nodes that write, whether or not Spark counts them as commands.
WRITE_NODES = {
    "InsertIntoStatement",
    "AppendData",
    "OverwriteByExpression",
    "OverwritePartitionsDynamic",
    "CreateTable",
    "CreateTableAsSelect",
    "ReplaceTable",
    "ReplaceTableAsSelect",
    "DropTable",
    "MergeIntoTable",
    "DeleteFromTable",
    "UpdateTable",
    "TruncateTable",
    "CallStatement",
    "Call",
    "CreateView",
    "CreateViewCommand",
    "DropView",
    "CreateNamespace",
    "DropNamespace",
}
# Commands that change the unit's shared state, refused in either mode.
SHARED_STATE_NODES = {
    "SetCommand",
    "ResetCommand",
    "AddJarsCommand",
    "AddFilesCommand",
    "AddArchivesCommand",
    "CreateFunction",
    "CreateFunctionCommand",
    "CacheTable",
    "CacheTableAsSelect",
    "UncacheTable",
    "ClearCacheCommand",
    "SetCatalogAndNamespace",
    "SetNamespaceCommand",
}


def _scala_list(seq) -> list:
    items, iterator = [], seq.iterator()
    while iterator.hasNext():
        items.append(iterator.next())
    return items


def _plan_nodes(plan):
    """Every node of a logical plan: children, subqueries, CTE bodies, EXPLAIN's statement."""
    plan_class = plan.getClass().getClassLoader().loadClass(f"{LOGICAL}.LogicalPlan")

    def logical_plan(node) -> bool:
        return plan_class.isInstance(node)

    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        inner = [child for child in _scala_list(node.innerChildren()) if logical_plan(child)]
        stack.extend(inner)
        for seq in (node.children(), node.subqueries()):
            stack.extend(_scala_list(seq))
        kind = node.getClass().getSimpleName()
        if kind == "UnresolvedWith":
            relations = node.cteRelations().iterator()
            while relations.hasNext():
                stack.append(relations.next()._2())
        elif kind == "ExplainCommand":
            stack.append(node.logicalPlan())


def plan_refusal(plan, mode: str, name: str) -> str | None:
    """Why Spark's logical `plan` may not run in `mode`, naming the statement; None if it may."""
    command = plan.getClass().getClassLoader().loadClass(f"{LOGICAL}.Command")
    for node in _plan_nodes(plan):
        kind = node.getClass().getSimpleName()
        if kind in SHARED_STATE_NODES:
            return f"{name} ({kind}) is not run by the console: it would change the unit's session"
        if mode == READ and (
            kind in WRITE_NODES or (command.isInstance(node) and kind not in READ_COMMANDS)
        ):
            return (
                f"{name} writes ({kind} in Spark's plan), and this console is read-only: "
                "switch it to writing for a warehouse you may write"
            )
    return None


# --- The job ---------------------------------------------------------------------------------


def run_query(spark, args: dict, progress) -> dict:
    """Run `args["sql"]` against the warehouse; its rows, bounded (see the module's docstring)."""
    # The Spark side is imported here: the portal imports this module for `check_statement`.
    from compute.host.spare_sessions import warehouse_session
    from compute.host.spark_session import close_session_catalog
    from compute.run.runs import RunFailed
    from compute.run.step_code import describe

    try:
        sql, mode = str(args["sql"]), str(args.get("mode", READ))
        max_rows = max(1, min(int(args.get("max_rows", 10_000)), MAX_ROWS_CARRIED))
        max_bytes = max(1024, min(int(args.get("max_bytes", MAX_BYTES_CARRIED)), MAX_BYTES_CARRIED))
        catalog, warehouse_id = dict(args["catalog"]), str(args["warehouse"]["lakekeeper_id"])
    except (KeyError, TypeError, ValueError) as error:
        raise RunFailed(f"invalid query: {type(error).__name__}: {error}") from None
    try:
        statement = check_statement(sql, mode)
    except StatementRefused as refused:
        raise RunFailed(f"refused: {refused}") from None
    binding = _binding(catalog, warehouse_id, statement.tables)
    session = warehouse_session(spark, binding)
    jvm = spark.sparkContext._jvm
    try:
        try:
            parsed = session._jsparkSession.sessionState().sqlParser().parsePlan(statement.sql)
        except Exception as error:
            raise RunFailed(describe(error)) from None
        if refusal := plan_refusal(parsed, mode, statement.name):
            raise RunFailed(f"refused: {refusal}")
        with progress.interruptible():
            try:
                return _answer(session, statement, mode, max_rows, max_bytes)
            except RunFailed:
                raise
            except Exception as error:
                raise RunFailed(describe(error)) from None
    finally:
        jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
        close_session_catalog(session, binding.catalog_name)


def _answer(session, statement: Statement, mode: str, max_rows: int, max_bytes: int):
    from compute.run.lineage import tables_read
    from compute.run.runs import RunFailed

    frame = session.sql(statement.sql)  # a command (SHOW, a write) runs here, a query later
    if refusal := plan_refusal(frame._jdf.queryExecution().analyzed(), mode, statement.name):
        raise RunFailed(f"refused: {refusal}")
    if statement.explain:
        plan = "\n".join(str(row[0]) for row in frame.collect())
        return _result(statement, [], [], 0, False, plan, [])
    columns = [
        {"name": field.name, "type": field.dataType.simpleString()} for field in frame.schema
    ]
    snapshots = list(tables_read(frame).values()) if not statement.writes else []
    rows, size, truncated = [], 2, False
    for row in frame.limit(max_rows + 1).collect():
        values = [_plain(value) for value in row]
        size += len(json.dumps(values, default=str)) + 1
        if len(rows) >= max_rows or size > max_bytes:
            truncated = True
            break
        rows.append(values)
    row_count = frame.count() if truncated else len(rows)
    return _result(statement, columns, rows, row_count, truncated, "", snapshots)


def _result(statement, columns, rows, row_count, truncated, plan, snapshots) -> dict:
    return {
        "statement": statement.name,
        "columns": columns,
        "rows": rows,
        "row_count": row_count,
        "truncated": truncated,
        "plan": plan,
        "snapshots": snapshots,
    }


def _binding(catalog: dict, warehouse_id: str, tables: tuple[str, ...]):
    """The warehouse's catalog binding: the unit's, while one stays valid; else one made of the
    storage keys the catalog vends with a table the statement names (or any table of the
    warehouse); a warehouse without tables gets a binding of this query's own, without keys."""
    from compute.host.catalog_cache import CatalogAccess, CatalogCache
    from compute.host.spark_session import S3Keys
    from compute.run.iceberg_rest import rest_catalog
    from compute.run.pipeline import CATALOGS
    from compute.run.runs import RunFailed
    from compute.run.step_code import describe

    if (binding := CATALOGS.current(warehouse_id)) is not None:
        return binding
    uri, warehouse, token = catalog["uri"], catalog["warehouse"], catalog["token"]
    try:
        iceberg = rest_catalog(f"query-{warehouse_id}", uri, warehouse, token)
        # The tables it names first; the warehouse's are listed only when none of those loads.
        for name in itertools.chain(tables, _some_tables(iceberg)):
            try:
                loaded = iceberg.load_table(name)
            except Exception:
                continue
            if (
                access := CatalogAccess.vended(uri, warehouse, token, loaded.io.properties)
            ) is None:
                continue
            return CATALOGS.binding(warehouse_id, access)
    except Exception as error:
        raise RunFailed(f"the catalog did not answer for warehouse {warehouse}: {describe(error)}")
    # Nothing to vend keys for: tables made by this statement get their own keys from the catalog.
    keyless = CatalogAccess(
        uri, warehouse, token, S3Keys(endpoint=None, access_key="", secret_key="")
    )
    return CatalogCache().binding(warehouse_id, keyless)


def _some_tables(iceberg, most: int = 3):
    found = 0
    for namespace in iceberg.list_namespaces():
        for identifier in iceberg.list_tables(namespace):
            yield ".".join(identifier)
            found += 1
            if found >= most:
                return


def _plain(value):
    if isinstance(value, (datetime.date, datetime.datetime, decimal.Decimal, bytes, bytearray)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value
