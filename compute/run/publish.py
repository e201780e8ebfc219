"""Named outputs, published by write-audit-publish: a step with a publish target
(`Step.publish`, compute/contract.py) writes its rows on an Iceberg branch of the target table,
never on `main`; when every step has finished, the run publishes every named table in one
multi-table catalog commit (`POST /v1/{prefix}/transactions/commit`, through the run's own
catalog token), so no reader loads some of the run's tables new and others old.

- The branch is `lakeport_run_<execution id>`, made from `main` (the snapshot it starts from is
  the run's *base* of that table), kept `BRANCH_RETENTION_DAYS` days (the ref's max age, which
  snapshot expiry honours). The branches of tables that exist are made as the run starts, beside
  its first steps (`make_branches_ahead`); a table's first publish makes its branch as its step
  writes. Per staged table the run asks the catalog as little as it can: Spark's load (which
  also says whether the table exists), the branch's one commit, the write, one load after it;
  the publish starts from that last load and reads the branches to remove from the metadata it
  committed.
- The table is created on the first publish, with the step's columns, every one nullable.
- Schema rule: a column of the output that the table lacks is added (nullable); anything else (a
  column of the table missing from the output, a type that differs) fails the run, the difference
  spelled out.
- Publishing: per table, `set-snapshot-ref main` to the branch's head and `remove-snapshot-ref`
  of the branch, each table requiring `assert-ref-snapshot-id main` = its base, all in one commit.
- Two runs publishing to one table at once: when the commit is refused because `main` moved, a
  table the run *appends* to is rebased: a new snapshot on the new `main` adds the data files
  the branch added (no row lost, none doubled), and the commit is retried. A table the run
  *overwrites* (whole, or the partitions its rows fall in) or *merges* into is not: the later
  run fails, naming the table and the snapshot that moved it.
- A failed or cancelled run publishes nothing; the branches made ahead for steps that staged
  nothing are removed (`abandon`); its other branches stay for inspection until their
  retention ends, then the next run publishing to that table removes them (`remove_expired`),
  as does the warehouse's snapshot expiry. A branch whose head is still on `main`'s history is
  not removed by a publish: it holds nothing of its run's, and a run writing to a table whose
  `main` is older than the retention has just made it (snapshot expiry removes it in time).
- Checks: whatever must pass before publishing reads the staged branches (`Publisher.staged`)
  and runs before `Publisher.publish`; a failing one fails the run, which then publishes nothing.
"""

from __future__ import annotations

import time
from concurrent.futures import Executor, Future
from dataclasses import dataclass

from compute.contract import LineageWrite, Step, TableProperty
from compute.run.iceberg_rest import commit_together
from compute.run.lineage import int_or_none
from compute.run.runs import RunFailed
from compute.run.step_code import describe

BRANCH_PREFIX = "lakeport_run_"
BRANCH_RETENTION_DAYS = 7
# How often a publish whose tables moved meanwhile is rebased and sent again.
PUBLISH_ATTEMPTS = 5
# What making a branch ahead gives when the step is to make it (`Publisher.make_branches_ahead`).
_NOT_MADE = object()


# How a conflict names what a step does to its table.
_CHANGES = {
    "overwrite": "overwrites",
    "overwrite-partitions": "overwrites partitions of",
    "merge": "merges into",
}


def branch_name(execution_id: int) -> str:
    return f"{BRANCH_PREFIX}{execution_id}"


@dataclass
class StagedOutput:
    """One step's rows on its branch, waiting to be published."""

    step: str
    table: str  # namespace.table
    mode: str  # append | overwrite
    branch: str
    base_snapshot_id: int | None  # main when the branch was made (None: main had none)
    head_snapshot_id: int  # the branch's head once the step wrote it
    rows_added: int | None
    published_snapshot_id: int | None = None
    published_at_ms: int | None = None
    added_files: int | None = None
    added_bytes: int | None = None

    def summary(self) -> dict:
        """What Execution.outputs keeps of it (`published`)."""
        return {
            "table": self.table,
            "mode": self.mode,
            "snapshot_id": self.published_snapshot_id,
            "rows_added": self.rows_added,
        }

    def lineage(self) -> LineageWrite:
        return LineageWrite(
            table=self.table,
            step=self.step,
            snapshot_id=self.published_snapshot_id,
            snapshot_at_ms=self.published_at_ms,
            added_records=self.rows_added,
            added_files=self.added_files,
            added_bytes=self.added_bytes,
        )


class SchemaMismatch(RunFailed):
    pass


def _without_nullability(data_type):
    """The type with every field, element and value nullable (a published table's columns all
    are; Spark's nullability says little about the rows)."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType(
            [
                StructField(field.name, _without_nullability(field.dataType), True)
                for field in data_type.fields
            ]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(_without_nullability(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(
            _without_nullability(data_type.keyType),
            _without_nullability(data_type.valueType),
            True,
        )
    return data_type


def schema_difference(table: str, table_schema, output_schema) -> tuple[list, list[str]]:
    """(the output's columns the table lacks, what else differs): the schema rule. Names are
    compared case-insensitively, as Spark resolves them."""
    present = {field.name.lower(): field for field in table_schema.fields}
    produced = {field.name.lower(): field for field in output_schema.fields}
    added = [field for name, field in produced.items() if name not in present]
    problems = [
        f"column {field.name} ({field.dataType.simpleString()}) of {table} is missing from "
        "the output"
        for name, field in present.items()
        if name not in produced
    ]
    for name, field in produced.items():
        if name in present:
            theirs = _without_nullability(present[name].dataType)
            ours = _without_nullability(field.dataType)
            if theirs != ours:
                problems.append(
                    f"column {field.name} is {theirs.simpleString()} in {table} and "
                    f"{ours.simpleString()} in the output"
                )
    return added, problems


def _quoted(identifier: str) -> str:
    return ".".join(f"`{part}`" for part in identifier.split("."))


def _history(metadata, ref: str) -> set[int]:
    """The ids of the snapshot `ref` points at and of all its ancestors in `metadata`."""
    found, snapshot_id = set(), getattr(metadata.refs.get(ref), "snapshot_id", None)
    while snapshot_id is not None and snapshot_id not in found:
        found.add(snapshot_id)
        snapshot = metadata.snapshot_by_id(snapshot_id)
        snapshot_id = snapshot.parent_snapshot_id if snapshot is not None else None
    return found


class Publisher:
    """The run's named outputs: staged on branches as their steps run (`stage`), published
    together at the end (`publish`)."""

    def __init__(self, spec, session, catalog_name: str, iceberg, log) -> None:
        self.spec, self.session, self.catalog_name = spec, session, catalog_name
        self.iceberg, self.log = iceberg, log
        self.branch = branch_name(spec.execution_id)
        self.staged: list[StagedOutput] = []
        # Each named table's branch, begun as the run starts (`make_branches_ahead`): what
        # making it gave, the snapshot it starts from or _NOT_MADE.
        self._ahead: dict[str, Future] = {}
        # Each staged table as its branch's write left it (pyiceberg's): a publish's first
        # attempt starts from it, a refused one loads the table again.
        self._heads: dict = {}

    # ------------------------------------------------------------ as the run starts
    def make_branches_ahead(self, steps: list[Step], pool: Executor) -> None:
        """Begin making the run's branch of each named table that exists already, in `pool`,
        beside the run's first steps: its load and its commit are then off each step's path
        (`bench publish`). A table still to be created, one without a snapshot, or a failure
        here is left to the step (`_make_branch`), which says what went wrong."""
        for step in steps:
            if step.publish is not None:
                self._ahead[step.publish.table] = pool.submit(self._branch_of_existing, step)

    def _branch_of_existing(self, step: Step):
        table = self._spark_table(f"{self.catalog_name}.{_quoted(step.publish.table)}")
        if table is None or table.currentSnapshot() is None:
            return _NOT_MADE
        return self._branch_from_main(table)

    # ------------------------------------------------------------ as a step runs
    def stage(self, step: Step, frame) -> StagedOutput:
        """Write the step's rows on the run's branch of its target table (created, or its schema
        widened, first); raises RunFailed when the output does not fit the table."""
        target = step.publish.table
        name = f"{self.catalog_name}.{_quoted(target)}"
        base = self._make_branch(step, name, frame.schema)
        self._fit_schema(step, name, frame.schema)
        writer = frame.writeTo(f"{name}.`branch_{self.branch}`")
        for key, value in self._snapshot_properties(step.name).items():
            writer = writer.option(f"snapshot-property.{key}", value)
        if step.publish.mode == "overwrite":
            from pyspark.sql.functions import lit

            writer.overwrite(lit(True))
        elif step.publish.mode == "overwrite-partitions":
            writer.overwritePartitions()  # the partitions its rows fall in (all: unpartitioned)
        elif step.publish.mode == "merge":
            self._merge(step, name, frame)
        else:
            writer.append()
        table = self.iceberg.load_table(target)
        self._heads[target] = table  # the first publish attempt starts from it
        head = table.snapshot_by_id(table.metadata.refs[self.branch].snapshot_id)
        summary = head.summary if head is not None else {}
        rows_added = int_or_none(summary.get("added-records")) or 0
        if step.publish.mode == "merge":  # rewritten files count their unchanged rows too
            rows_added -= int_or_none(summary.get("deleted-records")) or 0
        staged = StagedOutput(
            step=step.name,
            table=target,
            mode=step.publish.mode,
            branch=self.branch,
            base_snapshot_id=base,
            head_snapshot_id=head.snapshot_id,
            rows_added=rows_added,
            added_files=int_or_none(summary.get("added-data-files")),
            added_bytes=int_or_none(summary.get("added-files-size")),
        )
        self.staged.append(staged)
        self.log(
            "INFO",
            step.name,
            f"{staged.rows_added} rows staged on branch {self.branch} of {target} "
            f"({staged.mode}; published when the whole run succeeds)",
        )
        return staged

    def _merge(self, step: Step, name: str, frame) -> None:
        """MERGE the step's rows into the branch on its key columns: a row whose keys match a
        row of the table replaces it, any other is added. Keys are compared with `=` (a null key
        matches nothing), so the step's rows must be unique on them."""
        keys = step.publish.keys
        missing = [key for key in keys if key.lower() not in {c.lower() for c in frame.columns}]
        if missing:
            raise RunFailed(
                f"step {step.name!r} merges into {step.publish.table} on "
                f"{', '.join(missing)}, which its output does not have"
            )
        view = f"lakeport_merge_{step.name}"
        frame.createOrReplaceTempView(view)
        matched = " AND ".join(f"target.`{key}` = source.`{key}`" for key in keys)
        self.session.sql(
            f"MERGE INTO {name}.`branch_{self.branch}` AS target USING {view} AS source "
            f"ON {matched} WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        self.session.catalog.dropTempView(view)

    def _make_branch(self, step: Step, name: str, schema) -> int | None:
        """Make (or make again) the run's branch from `main` of the step's table (created first,
        and its namespace, if it is missing); returns the snapshot it starts from, None for a
        table without one (no rows yet). Made on the table Spark's catalog loads for this
        session, through Iceberg's own API: one load and one commit, the `set-snapshot-ref`
        update `ALTER TABLE … CREATE OR REPLACE BRANCH … RETAIN` sends, without planning that
        statement; Spark's catalog caches that table, branch included, for the schema rule and
        the write that follow."""
        ahead = self._ahead.get(step.publish.table)
        if ahead is not None:
            try:
                base = ahead.result()
            except Exception:  # made again below, where the error is told
                base = _NOT_MADE
            if base is not _NOT_MADE:
                return base
        table = self._spark_table(name)
        if table is None:
            self.iceberg.create_namespace_if_not_exists(step.publish.table.split(".")[0])
            self._create_if_missing(step, name, schema)
            table = self._spark_table(name)
        main = table.currentSnapshot()
        if main is None:  # Spark's statement makes the branch of a table without a snapshot
            self.session.sql(
                f"ALTER TABLE {name} CREATE OR REPLACE BRANCH `{self.branch}` "
                f"RETAIN {BRANCH_RETENTION_DAYS} DAYS"
            )
            return None
        return self._branch_from_main(table)

    def _branch_from_main(self, table) -> int:
        """Make (or make again) the run's branch at the head of `main` of `table` (Spark's, with
        a snapshot) in one commit; returns that snapshot's id."""
        base = table.currentSnapshot().snapshotId()
        manage = table.manageSnapshots()
        if table.refs().containsKey(self.branch):
            manage = manage.replaceBranch(self.branch, base)
        else:
            manage = manage.createBranch(self.branch, base)
        manage.setMaxRefAgeMs(self.branch, BRANCH_RETENTION_DAYS * 86_400_000).commit()
        return base

    def _spark_table(self, name: str):
        """The Iceberg table `name` as Spark's catalog loads it for this session (Java), or None."""
        from pyspark.errors import AnalysisException

        try:
            return self.session._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                self.session._jsparkSession, name
            )
        except AnalysisException as error:  # PySpark's, for Spark's NoSuchTableException
            if error.getErrorClass() == "TABLE_OR_VIEW_NOT_FOUND":
                return None
            raise

    def _create_if_missing(self, step: Step, name: str, schema) -> None:
        from pyspark.sql.types import StructType

        empty = self.session.createDataFrame([], StructType(_without_nullability(schema).fields))
        writer = empty.writeTo(name).using("iceberg")
        for key, value in self._properties(step).items():
            writer = writer.tableProperty(key, value)
        try:
            writer.create()
            self.log("INFO", step.name, f"created table {step.publish.table}")
        except Exception as error:  # another run created it meanwhile: it is used as it is
            if not self.iceberg.table_exists(step.publish.table):
                raise RunFailed(
                    f"table {step.publish.table} could not be created: {describe(error)}"
                ) from None

    def _properties(self, step: Step) -> dict[str, str]:
        return {
            str(TableProperty.WORKFLOW_ID): str(self.spec.workflow.id),
            str(TableProperty.WORKFLOW_NAME): self.spec.workflow.name,
            str(TableProperty.STEP): step.name,
        }

    def _fit_schema(self, step: Step, name: str, output_schema) -> None:
        table_schema = self.session.table(name).schema
        added, problems = schema_difference(step.publish.table, table_schema, output_schema)
        if problems:
            raise SchemaMismatch(
                f"step {step.name!r} cannot publish to {step.publish.table}: "
                + "; ".join(problems)
                + " (new columns are added; any other change of a published table's schema "
                "fails the run)"
            )
        for field in added:
            self.session.sql(
                f"ALTER TABLE {name} ADD COLUMN `{field.name}` "
                f"{_without_nullability(field.dataType).simpleString()}"
            )
            self.log(
                "INFO",
                step.name,
                f"added column {field.name} ({field.dataType.simpleString()}) to "
                f"{step.publish.table}",
            )

    # ------------------------------------------------------------ the end
    def publish(self) -> None:
        """Publish every staged output in one multi-table commit; rebase appends onto a main that
        moved meanwhile and send it again; raises RunFailed when it cannot publish (an overwrite
        whose table moved, the catalog refusing), having published nothing."""
        from pyiceberg.exceptions import CommitFailedException

        if not self.staged:
            return
        for attempt in range(1, PUBLISH_ATTEMPTS + 1):
            try:
                transactions = [
                    self._publishing(staged, fresh=attempt > 1) for staged in self.staged
                ]
                commit_together(self.iceberg, [transaction for transaction, _ in transactions])
            except CommitFailedException as refused:
                if attempt == PUBLISH_ATTEMPTS:
                    raise RunFailed(
                        f"the run's named outputs could not be published after {attempt} "
                        f"attempts, other runs publishing to them meanwhile: {describe(refused)}"
                    ) from None
                self.log(
                    "WARN", None, f"publish refused ({describe(refused)}); rebasing and retrying"
                )
                time.sleep(0.05 * attempt)
                continue
            except RunFailed:
                raise
            except Exception as error:
                raise RunFailed(
                    f"the run's named outputs could not be published: {describe(error)}"
                ) from None
            for staged, (transaction, _) in zip(self.staged, transactions):
                main = transaction.table_metadata.refs["main"].snapshot_id
                snapshot = transaction.table_metadata.snapshot_by_id(main)
                staged.published_snapshot_id = main
                staged.published_at_ms = snapshot.timestamp_ms if snapshot else None
            self.log(
                "INFO",
                None,
                "published "
                + ", ".join(
                    f"{staged.table} (snapshot {staged.published_snapshot_id}, "
                    f"{staged.rows_added} rows {'added' if staged.mode == 'append' else 'now'})"
                    for staged in self.staged
                )
                + " in one catalog commit",
            )
            self._remove_expired([transaction for transaction, _ in transactions])
            return

    def _publishing(self, staged: StagedOutput, fresh: bool):
        """A transaction (not committed) that moves the table's main to what the run wrote: its
        branch's head when main has not moved since the branch was made, otherwise (an append) a
        new snapshot on main adding the branch's data files. Raises RunFailed for an overwrite
        whose table moved. Not `fresh`: from the table as staged (a main that moved since makes
        the commit refuse it, and the next attempt loads the table)."""
        from pyiceberg.table.update import (
            AssertRefSnapshotId,
            RemoveSnapshotRefUpdate,
            SetSnapshotRefUpdate,
        )

        from compute.run.iceberg_rest import MetadataOnceTransaction

        table = self._heads.get(staged.table) if not fresh else None
        if table is None:
            table = self._heads[staged.table] = self.iceberg.load_table(staged.table)
        main = table.metadata.refs.get("main")
        now = main.snapshot_id if main is not None else None
        transaction = MetadataOnceTransaction(table)
        if now == staged.base_snapshot_id:
            transaction._apply(
                (
                    SetSnapshotRefUpdate(
                        ref_name="main", type="branch", snapshot_id=staged.head_snapshot_id
                    ),
                    RemoveSnapshotRefUpdate(ref_name=staged.branch),
                ),
                (AssertRefSnapshotId(ref="main", snapshot_id=staged.base_snapshot_id),),
            )
            return transaction, False
        if staged.mode != "append":  # an overwrite, of the table or of partitions
            moved = table.snapshot_by_id(now)
            by = moved.summary.get("lakeport.execution-id") if moved else None
            by = f"execution {by}" if by else "another writer"
            raise RunFailed(
                f"step {staged.step!r} {_CHANGES[staged.mode]} {staged.table}, "
                "which changed since this run "
                f"began writing it (main moved from snapshot {staged.base_snapshot_id} to {now}, "
                f"published by {by}): an overwrite is published only over the table it replaced, "
                "so this run publishes nothing; run it again"
            )
        with transaction.update_snapshot(
            snapshot_properties=self._snapshot_properties(staged.step)
        ).fast_append() as append:
            for data_file in self._added_files(table, staged):
                append.append_data_file(data_file)
        transaction._apply((RemoveSnapshotRefUpdate(ref_name=staged.branch),))
        self.log(
            "INFO",
            staged.step,
            f"{staged.table} moved to snapshot {now} meanwhile: its appended files are "
            "rebased onto it",
        )
        return transaction, True

    def _snapshot_properties(self, step: str) -> dict[str, str]:
        """What each snapshot the run writes says of where it comes from (a later run's
        conflict names it)."""
        return {"lakeport.execution-id": str(self.spec.execution_id), "lakeport.step": step}

    def _added_files(self, table, staged: StagedOutput) -> list:
        """The data files the branch holds that its own snapshots added (those after its base)."""
        from pyiceberg.manifest import ManifestContent, ManifestEntryStatus

        own, snapshot_id = set(), staged.head_snapshot_id
        while snapshot_id is not None and snapshot_id != staged.base_snapshot_id:
            own.add(snapshot_id)
            snapshot = table.snapshot_by_id(snapshot_id)
            snapshot_id = snapshot.parent_snapshot_id if snapshot else None
        files = []
        for manifest in table.snapshot_by_id(staged.head_snapshot_id).manifests(table.io):
            if manifest.content != ManifestContent.DATA:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.snapshot_id in own and entry.status != ManifestEntryStatus.DELETED:
                    files.append(entry.data_file)
        return files

    def _remove_expired(self, published: list) -> None:
        """Remove the branches failed runs left on the tables just published, once their
        retention has passed (best effort: a failure is logged, the run stays COMPLETED). Which
        ones is read from the metadata the publish committed (`published`, its transactions): a
        table is loaded again only when it has some to remove."""
        cutoff_ms = (time.time() - BRANCH_RETENTION_DAYS * 86400) * 1000
        for staged, transaction in zip(self.staged, published):
            try:
                metadata = transaction.table_metadata
                old = [
                    (name, ref.snapshot_id)
                    for name, ref in metadata.refs.items()
                    if name.startswith(BRANCH_PREFIX)
                    and (snapshot := metadata.snapshot_by_id(ref.snapshot_id)) is not None
                    and snapshot.timestamp_ms < cutoff_ms
                ]
                # A branch still at a snapshot of main's history holds nothing of its run's: it
                # may be one another run has just made from an old main and is writing to now.
                # It is left to snapshot expiry, which honours its max age.
                on_main = _history(metadata, "main") if old else set()
                expired = [name for name, head in old if head not in on_main]
                if expired:
                    table = self.iceberg.load_table(staged.table)
                    manage = table.manage_snapshots()
                    for name in expired:
                        manage = manage.remove_branch(name)
                    manage.commit()
                    self.log(
                        "INFO",
                        None,
                        f"removed expired branches of failed runs from {staged.table}: "
                        + ", ".join(expired),
                    )
            except Exception as error:
                self.log(
                    "WARN",
                    None,
                    f"could not remove expired branches of {staged.table}: {describe(error)}",
                )

    def abandon(self) -> None:
        """The run failed or was cancelled: nothing is published; say where its rows stay, and
        remove the branches made ahead for steps that staged nothing on them."""
        for staged in self.staged:
            self.log(
                "INFO",
                staged.step,
                f"nothing published to {staged.table}: its rows stay on branch {staged.branch} "
                f"for {BRANCH_RETENTION_DAYS} days, for inspection",
            )
        staged_tables = {staged.table for staged in self.staged}
        for target, ahead in self._ahead.items():
            if target in staged_tables:
                continue
            try:
                base = ahead.result()
                if base is _NOT_MADE:
                    continue
                table = self._spark_table(f"{self.catalog_name}.{_quoted(target)}")
                table.refresh()
                head = table.refs().get(self.branch)
                if head is not None and head.snapshotId() == base:  # nothing written on it
                    table.manageSnapshots().removeBranch(self.branch).commit()
            except Exception as error:
                self.log(
                    "WARN",
                    None,
                    f"could not remove the unused branch {self.branch} of {target}: "
                    f"{describe(error)}",
                )
