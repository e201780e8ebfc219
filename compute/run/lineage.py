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
"""

from __future__ import annotations

from compute.contract import LineageRead

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
        option = node.options().get("snapshot-id")
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
