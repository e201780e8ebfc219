"""What a run reads and writes, from Spark's own plans and Iceberg's commits; and pinning a
re-run's reads to the snapshots an earlier run read (Iceberg time travel).

Reads come from each step's analyzed logical plan (already computed when the step's DataFrame
is made, so walking it costs a few py4j calls, no extra Spark work): every `DataSourceV2Relation`
whose table is an Iceberg `SparkTable`, with the snapshot it reads (a time-travelled one, a
`snapshot-id` read option, or the table's current snapshot when the plan loaded it).

Pinning rewrites how a step's tables resolve, not its meaning: a SQL step is parsed by Spark's
own parser and every relation naming a pinned table gets `VERSION AS OF <snapshot>` inserted
right after its name (at the position the parser reports; CTEs, temp views and earlier steps
are other names and stay as they are). A Python step gets a session whose `sql`, `table` and
`read.table` do the same. Whatever path a step takes, its plan is checked afterwards: a pinned
table read at any other snapshot fails the run, so a re-run never silently reads fresh data.

Incremental reads (`Increments`): `changes('ns.table')` in a Python step, `changes(ns.table)` as a
table function in a SQL step, is the rows appended to the table after the snapshot this workflow
last read it at (the spec's `changes`, which the portal finds in lineage) up to its current
snapshot, or its pin in a re-run. Spark has no such table function: the SQL step is parsed, and
each call is replaced by the name of a temporary view of the increment, in the run's own session.
The increment is Iceberg's incremental append scan; an overwrite or delete after the start fails
the step naming its snapshot (`increment`), since the rows read before were changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from compute.contract import LineageChange, LineageRead

ICEBERG_TABLE = "org.apache.iceberg.spark.source.SparkTable"


def _nodes(plan):
    """Every node of a logical plan, subqueries (in expressions) included."""
    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        for seq in (node.children(), node.subqueries()):
            iterator = seq.iterator()
            while iterator.hasNext():
                stack.append(iterator.next())


def tables_read(frame) -> dict[str, LineageRead]:
    """The Iceberg tables `frame` reads: identifier (`ns.t`) → what was read."""
    found: dict[str, LineageRead] = {}
    for node in _nodes(frame._jdf.queryExecution().analyzed()):
        if node.getClass().getSimpleName() != "DataSourceV2Relation":
            continue
        table = node.table()
        if table.getClass().getName() != ICEBERG_TABLE:
            continue
        identifier = node.identifier()
        if identifier.isEmpty():
            continue
        name = ".".join([*identifier.get().namespace(), identifier.get().name()])
        iceberg = table.table()
        snapshot_id = table.snapshotId()
        # A time-travelled read names its snapshot; an incremental read (`changes`) its end.
        option = node.options().get("snapshot-id") or node.options().get("end-snapshot-id")
        if snapshot_id is None and option is not None:
            snapshot_id = int(option)
        snapshot = (
            iceberg.snapshot(snapshot_id) if snapshot_id is not None else iceberg.currentSnapshot()
        )
        if snapshot is None:  # an empty table: nothing read
            found[name] = LineageRead(
                table=name,
                snapshot_id=None,
                snapshot_at_ms=None,
                total_records=None,
                total_files=None,
                total_bytes=None,
            )
            continue
        summary = snapshot.summary()
        found[name] = LineageRead(
            table=name,
            snapshot_id=int(snapshot.snapshotId()),
            snapshot_at_ms=int(snapshot.timestampMillis()),
            total_records=int_or_none(summary.get("total-records")),
            total_files=int_or_none(summary.get("total-data-files")),
            total_bytes=int_or_none(summary.get("total-files-size")),
        )
    return found


def int_or_none(value) -> int | None:
    return int(value) if value is not None else None


def _unresolved_relations(plan):
    """(name parts, start, stop) of every table the parsed SQL names outside a temporal clause."""
    for node in _nodes(plan):
        kind = node.getClass().getSimpleName()
        if kind == "UnresolvedWith":  # CTE bodies are not children
            relations = node.cteRelations().iterator()
            while relations.hasNext():
                yield from _unresolved_relations(relations.next()._2())
        if kind != "UnresolvedRelation":
            continue
        origin = node.origin()
        if origin.startIndex().isEmpty() or origin.stopIndex().isEmpty():
            raise ValueError("Spark's parser reported no position for a table name")
        parts = list(node.multipartIdentifier().mkString("\u0000").split("\u0000"))
        yield parts, int(origin.startIndex().get()), int(origin.stopIndex().get())


def _time_travelled(plan) -> set[int]:
    """Start positions of relations that already say which version they read."""
    starts = set()
    for node in _nodes(plan):
        if node.getClass().getSimpleName() == "RelationTimeTravel":
            start = node.relation().origin().startIndex()
            if not start.isEmpty():
                starts.add(int(start.get()))
    return starts


def pin_sql(session, sql: str, pins: dict[str, int], catalog_name: str) -> str:
    """`sql` with every relation naming a pinned table read `VERSION AS OF` its pinned snapshot."""
    if not pins:
        return sql
    plan = session._jsparkSession.sessionState().sqlParser().parsePlan(sql)
    already = _time_travelled(plan)
    inserts = []
    for parts, start, stop in _unresolved_relations(plan):
        if start in already:
            continue
        if len(parts) == 3 and parts[0].lower() == catalog_name.lower():
            parts = parts[1:]
        snapshot = pins.get(".".join(parts).lower())
        if snapshot is None:
            continue
        named = "".join(sql[start : stop + 1].split()).replace("`", "").lower()
        if not named.endswith(".".join(parts).lower()):  # the parser's position is not the name
            raise ValueError(
                f"cannot pin {'.'.join(parts)}: Spark's parser placed it at {sql[start : stop + 1]!r}"
            )
        inserts.append((stop + 1, f" VERSION AS OF {int(snapshot)}"))
    for position, text in sorted(set(inserts), reverse=True):
        sql = sql[:position] + text + sql[position:]
    return sql


class PinnedSession:
    """A Python step's `spark` in a pinned re-run: `sql`, `table` and `read.table` read pinned
    tables at their snapshots; everything else is the execution's session."""

    def __init__(self, session, pins: dict[str, int], catalog_name: str) -> None:
        self._session, self._pins, self._catalog_name = session, pins, catalog_name

    def sql(self, sql: str, *args, **kwargs):
        return self._session.sql(
            pin_sql(self._session, sql, self._pins, self._catalog_name), *args, **kwargs
        )

    def table(self, name: str):
        return self.read.table(name)

    @property
    def read(self):
        return _PinnedReader(self._session.read, self._pins, self._catalog_name)

    def __getattr__(self, name: str):
        return getattr(self._session, name)


class _PinnedReader:
    def __init__(self, reader, pins: dict[str, int], catalog_name: str) -> None:
        self._reader, self._pins, self._catalog_name = reader, pins, catalog_name

    def table(self, name: str):
        parts = name.replace("`", "").split(".")
        if len(parts) == 3 and parts[0].lower() == self._catalog_name.lower():
            parts = parts[1:]
        snapshot = self._pins.get(".".join(parts).lower())
        reader = (
            self._reader.option("snapshot-id", str(snapshot))
            if snapshot is not None
            else self._reader
        )
        return reader.table(name)

    def __getattr__(self, name: str):
        return getattr(self._reader, name)


# ---------------------------------------------------------------- incremental reads
# `changes('ns.table')`: a Python step's function, and in a SQL step a table function that is
# rewritten, before Spark analyses the step, into the name of a temporary view of the increment.
CHANGES_FUNCTION = "changes"
_NAME_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What an increment may pass over: appends (read) and replaces (compactions: the same rows in
# other files, which Iceberg's incremental append scan skips).
APPEND, REPLACE = "append", "replace"


class IncrementUnreadable(ValueError):
    """The rows since the last read cannot be read as appends; the message names the snapshot."""


@dataclass(frozen=True)
class SnapshotFacts:
    """What walking an increment needs of one snapshot of a table's metadata."""

    parent_id: int | None
    operation: str | None
    added_records: int | None
    total_records: int | None
    timestamp_ms: int


def increment(
    table: str, snapshots: dict[int, SnapshotFacts], start: int | None, end: int | None
) -> LineageChange:
    """The increment of `table` after snapshot `start` (exclusive; None: the whole table) up to
    `end` (inclusive; None: the table has no snapshot). Every snapshot between must be an append
    or a replace, and `start` an ancestor of `end`; otherwise IncrementUnreadable says which."""
    facts = snapshots.get(end) if end is not None else None
    change = LineageChange(
        table=table,
        from_snapshot_id=start,
        to_snapshot_id=end,
        to_snapshot_at_ms=facts.timestamp_ms if facts else None,
        appends=0,
        rows=0,
    )
    if start is None:  # the first read: the whole table
        change["rows"] = facts.total_records if facts else 0
        return change
    added: list[int | None] = []
    current = end
    while current != start:
        facts = snapshots.get(current) if current is not None else None
        if facts is None:
            raise IncrementUnreadable(
                f"changes({table!r}): snapshot {start}, where this workflow last read the table, "
                f"is not in the history of its {'current ' if end is not None else ''}snapshot "
                f"{end if end is not None else '(none: the table is empty)'}: the table was "
                "replaced, rolled back or its history expired"
            )
        if facts.operation == APPEND:
            added.append(facts.added_records)
        elif facts.operation != REPLACE:
            raise IncrementUnreadable(
                f"changes({table!r}): snapshot {current} ({facts.operation or 'unknown'}) changed "
                f"or removed rows after snapshot {start}, where this workflow last read the "
                "table; an incremental read takes appended rows only (a run that reads the "
                "table whole starts its increments afresh)"
            )
        current = facts.parent_id
    change["appends"] = len(added)
    change["rows"] = None if None in added else sum(added)
    return change


def snapshot_facts(table) -> dict[int, SnapshotFacts]:
    """A pyiceberg table's snapshots as `increment` walks them."""
    facts = {}
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        facts[snapshot.snapshot_id] = SnapshotFacts(
            parent_id=snapshot.parent_snapshot_id,
            operation=summary.operation.value if summary is not None else None,
            added_records=int_or_none(summary.get("added-records")) if summary else None,
            total_records=int_or_none(summary.get("total-records")) if summary else None,
            timestamp_ms=snapshot.timestamp_ms,
        )
    return facts


def changes_table(name: object, catalog_name: str) -> str:
    """`ns.table` of what a step passed to `changes` (`ns.table` or `<catalog>.ns.table`)."""
    if not isinstance(name, str):
        raise TypeError(f"changes() takes a table's name ('namespace.table'), not {name!r}")
    parts = name.replace("`", "").strip().split(".")
    if len(parts) == 3 and parts[0].lower() == catalog_name.lower():
        parts = parts[1:]
    if len(parts) != 2 or not all(_NAME_PART.fullmatch(part) for part in parts):
        raise ValueError(f"changes({name!r}): name the table as 'namespace.table'")
    return ".".join(parts).lower()


def _parsed_nodes(plan):
    """Every node of a parsed plan, CTE bodies included (they are not children)."""
    for node in _nodes(plan):
        yield node
        if node.getClass().getSimpleName() == "UnresolvedWith":
            relations = node.cteRelations().iterator()
            while relations.hasNext():
                yield from _parsed_nodes(relations.next()._2())


def _closing_parenthesis(sql: str, start: int) -> int:
    """The position of the `)` that closes the first `(` at or after `start`, quotes skipped."""
    depth, quote = 0, None
    for position in range(sql.index("(", start), len(sql)):
        character = sql[position]
        if quote:
            quote = None if character == quote else quote
        elif character in "'\"`":
            quote = character
        elif character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
            if depth == 0:
                return position
    raise ValueError("changes( is not closed")


class Increments:
    """A run's incremental reads: each table's increment found once (from the spec's start to
    its pin, or its current snapshot), read with Iceberg's incremental append scan
    (`start-snapshot-id` exclusive, `end-snapshot-id`), and recorded for lineage. The starts come
    from the portal, never from the step: a step names only a table, resolved in the run's one
    catalog, so its credentials bound what it reads."""

    def __init__(
        self, session, catalog_name: str, starts: dict, pins: dict[str, int], load_table
    ) -> None:
        self._session, self._catalog_name = session, catalog_name
        self._starts, self._pins, self._load_table = starts, pins, load_table
        self._changes: dict[str, LineageChange] = {}
        self._frames: dict[str, object] = {}
        self._views: dict[str, str] = {}

    def changes(self, name: str):
        """The rows appended to table `name` since this workflow last read it (a DataFrame)."""
        table = changes_table(name, self._catalog_name)
        if table not in self._frames:
            self._frames[table] = self._frame(table)
        return self._frames[table]

    def sql(self, sql: str) -> str:
        """`sql` with each `changes(ns.table)` (or `changes('ns.table')`) replaced by the name
        of a temporary view of that table's increment."""
        if CHANGES_FUNCTION not in sql.lower():
            return sql
        plan = self._session._jsparkSession.sessionState().sqlParser().parsePlan(sql)
        edits = {}
        for node in _parsed_nodes(plan):
            if node.getClass().getSimpleName() != "UnresolvedTableValuedFunction":
                continue
            if node.name().mkString(".").lower() != CHANGES_FUNCTION:
                continue
            start = node.origin().startIndex()
            if start.isEmpty():
                raise ValueError("Spark's parser reported no position for changes(…)")
            table = changes_table(self._argument(node), self._catalog_name)
            edits[int(start.get())] = self._view(table)
        for start in sorted(edits, reverse=True):
            stop = _closing_parenthesis(sql, start)
            sql = sql[:start] + edits[start] + sql[stop + 1 :]
        return sql

    def recorded(self) -> list[LineageChange]:
        return list(self._changes.values())

    def _argument(self, node) -> str:
        arguments = node.functionArgs()
        if arguments.size() != 1:
            raise ValueError("changes() takes one table: changes(namespace.table)")
        argument = arguments.apply(0)
        kind = argument.getClass().getSimpleName()
        if kind == "UnresolvedAttribute":
            return str(argument.nameParts().mkString("."))
        if kind == "Literal" and str(argument.dataType().simpleString()) == "string":
            return str(argument.value().toString())
        raise ValueError("changes() takes a table's name: changes(namespace.table)")

    def _view(self, table: str) -> str:
        if table not in self._views:
            view = f"changes_{len(self._views) + 1}_{table.replace('.', '_')}"
            self.changes(table).createOrReplaceTempView(view)
            self._views[table] = view
        return self._views[table]

    def _frame(self, table: str):
        try:
            loaded = self._load_table(table)
        except Exception as error:
            raise ValueError(
                f"changes({table!r}): the table cannot be read: {type(error).__name__}: {error}"
            ) from None
        end = self._pins.get(table, loaded.metadata.current_snapshot_id)
        change = increment(table, snapshot_facts(loaded), self._starts.get(table), end)
        self._changes[table] = change
        reader, name = self._session.read, f"{self._catalog_name}.{table}"
        start = change["from_snapshot_id"]
        if end is None:  # no snapshot: an empty table
            return reader.table(name)
        if start is None:  # the first read: all of it
            return reader.option("snapshot-id", str(end)).table(name)
        if start == end:  # nothing new (Iceberg refuses an empty range)
            return reader.option("snapshot-id", str(end)).table(name).limit(0)
        return (
            reader.option("start-snapshot-id", str(start))
            .option("end-snapshot-id", str(end))
            .table(name)
        )
