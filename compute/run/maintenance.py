"""Maintenance of a warehouse's tables on a compute unit: compaction, snapshot expiry and
orphan-file clean-up through Iceberg's Spark procedures.

The portal submits a job of kind `maintenance` (compute/contract.py JobKind) to the unit's Spark
host with `args` = a MaintenanceSpec: the warehouse, its catalog (uri, warehouse, a token acting as the owner,
as for an execution), the tables, `retain_last` and `remove_orphans`. The catalog is bound
like an execution's (compute/host/catalog_cache.py, the same per-warehouse bindings): the token
loads the first table through pyiceberg, which makes the catalog vend the warehouse's storage
credentials, and a Spark session of its own gets the warehouse's catalog as its only one.

`expire_snapshots` keeps the last `retain_last` snapshots of each table and expires all older
ones (`older_than` = now: age alone keeps none); `remove_orphan_files` uses Iceberg's default
age limit (files younger than three days may belong to a write under way). A failing table is
reported and the others still run.

A table's policy job (app/tables/work.py) adds `compact` (rewrite the table's small data files
with `rewrite_data_files`, binpacking groups of two or more) and `expire_before_ms` (expire
snapshots committed before that instant instead of all but the last `retain_last`: the portal
sets it no later than the oldest snapshot a pinned re-run reads), and each table's result
carries its data files before and after.

Compaction sizes its output files for the unit that reads them (`compaction_target_bytes`):
with Iceberg's default target (`write.target-file-size-bytes`, 512 MB: Apache Iceberg 1.10.2,
`core/src/main/java/org/apache/iceberg/TableProperties.java`) a table of a few hundred
MB becomes one file of one or two Parquet row groups, and a Spark scan splits a Parquet file
only at its row groups, so a query over the compacted table ran as at most two tasks however
many cores the unit has. The rewrite's `target-file-size-bytes` option (Apache Iceberg 1.10.2,
`core/src/main/java/org/apache/iceberg/actions/SizeBasedFileRewritePlanner.java`,
TARGET_FILE_SIZE_BYTES) is set so the table's bytes make about two files per core of the unit,
never under 32 MiB a file nor over Iceberg's 512 MB default; the planner's `expectedOutputFiles`
divides a group's input by that target, and files of at least 75% of it (its
MIN_FILE_SIZE_DEFAULT_RATIO) are left alone, so a compacted table is not rewritten again while it
keeps its size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

from compute.host.catalog_cache import CatalogAccess
from compute.host.spare_sessions import warehouse_session
from compute.run.iceberg_rest import rest_catalog
from compute.run.pipeline import CATALOGS
from compute.run.runs import RunFailed, RunProgress
from compute.run.step_code import describe

# Iceberg's TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT (512 MB), the most a
# compacted file is made; the least, so a small table is not cut into files of a few MB.
MOST_FILE_BYTES = 512 * 1024 * 1024
LEAST_FILE_BYTES = 32 * 1024 * 1024
FILES_PER_CORE = 2

TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")


def run_maintenance(spark, args: dict, progress: RunProgress) -> dict:
    """Expire snapshots (and remove orphan files) of `args["tables"]`; returns per table what
    went, or its error."""
    try:
        tables = [str(name) for name in args["tables"]]
        retain_last = int(args["retain_last"])
        remove_orphans = bool(args.get("remove_orphans", False))
        compact = bool(args.get("compact", False))
        expire_before_ms = args.get("expire_before_ms")
        expire_before_ms = None if expire_before_ms is None else int(expire_before_ms)
        catalog, warehouse_id = dict(args["catalog"]), str(args["warehouse"]["lakekeeper_id"])
        uri, warehouse, token = catalog["uri"], catalog["warehouse"], catalog["token"]
    except (KeyError, TypeError, ValueError) as error:
        raise RunFailed(f"invalid maintenance spec: {type(error).__name__}: {error}") from None
    if retain_last < 1:
        raise RunFailed("retain_last must be at least 1")
    if bad := [name for name in tables if not TABLE_NAME.fullmatch(name)]:
        raise RunFailed(f"not a namespace.table name: {bad[0]!r}")
    if not tables:
        return {}

    iceberg = rest_catalog(f"maintenance-{warehouse_id}", uri, warehouse, token)
    access = CatalogAccess.vended(
        uri, warehouse, token, iceberg.load_table(tables[0]).io.properties
    )
    if access is None:
        raise RunFailed(f"the catalog vended no storage credentials for warehouse {warehouse}")
    binding = CATALOGS.binding(warehouse_id, access)
    session = warehouse_session(spark, binding)
    if remove_orphans:
        # remove_orphan_files lists the table's location with the session's Hadoop settings,
        # not the catalog's: this session (the run's own) gets the warehouse's S3A keys too.
        catalog_hadoop = f"spark.sql.catalog.{binding.catalog_name}.hadoop."
        for key, value in binding.conf.items():
            if key.startswith(catalog_hadoop):
                session.conf.set(key.removeprefix(catalog_hadoop), value)
    if "expire_before_ms" in args:  # a table's policy: only what is older (None: no expiry)
        older_than = None if expire_before_ms is None else _timestamp(expire_before_ms / 1000)
    else:
        older_than = _timestamp(datetime.now(timezone.utc).timestamp())
    plan = Plan(binding.catalog_name, retain_last, remove_orphans, compact, older_than)
    outcome = {}
    try:
        for name in tables:
            try:
                outcome[name] = _maintain(session, iceberg, name, plan)
                progress.log("INFO", None, f"{name}: {outcome[name]}")
            except Exception as error:  # one table's failure does not stop the others
                outcome[name] = {"error": describe(error)}
                progress.log("ERROR", None, f"{name}: {outcome[name]['error']}")
    finally:
        spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
    return outcome


@dataclass(frozen=True)
class Plan:
    """What to do to each table: `older_than` a UTC timestamp literal, or None (no expiry)."""

    catalog_name: str
    retain_last: int
    remove_orphans: bool
    compact: bool
    older_than: str | None


def _timestamp(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def compaction_target_bytes(table_bytes: int, cores: int) -> int:
    """The target size of a compacted data file: the table's bytes in `FILES_PER_CORE` files per
    core of the unit, within [LEAST_FILE_BYTES, MOST_FILE_BYTES]."""
    share = int(table_bytes) // (FILES_PER_CORE * max(1, int(cores)))
    return max(LEAST_FILE_BYTES, min(MOST_FILE_BYTES, share))


def _data_bytes(iceberg, name: str) -> int:
    snapshot = iceberg.load_table(name).current_snapshot()
    return int(snapshot.summary.get("total-files-size") or 0) if snapshot else 0


def _data_files(iceberg, name: str) -> int:
    snapshot = iceberg.load_table(name).current_snapshot()
    return int(snapshot.summary.get("total-data-files") or 0) if snapshot else 0


def _maintain(session, iceberg, name: str, plan: Plan) -> dict:
    catalog_name = plan.catalog_name
    result = {
        "snapshots_before": len(iceberg.load_table(name).snapshots()),
        "data_files_before": _data_files(iceberg, name),
    }
    if plan.compact:
        # Groups of two small files or more are rewritten (Iceberg's default asks for five),
        # into files sized for the unit's cores (the module's docstring).
        target = compaction_target_bytes(
            _data_bytes(iceberg, name), session.sparkContext.defaultParallelism
        )
        result["target_file_bytes"] = target
        rewritten = (
            session.sql(
                f"CALL {catalog_name}.system.rewrite_data_files(table => '{name}', "
                f"options => map('min-input-files', '2', 'target-file-size-bytes', '{target}'))"
            )
            .collect()[0]
            .asDict()
        )
        result["rewritten_data_files"] = int(rewritten.get("rewritten_data_files_count") or 0)
        result["added_data_files"] = int(rewritten.get("added_data_files_count") or 0)
        result["rewritten_bytes"] = int(rewritten.get("rewritten_bytes_count") or 0)
    result["deleted_files"] = 0
    if plan.older_than is not None:
        # Session-local UTC: the timestamp literal means the same instant as `older_than`.
        session.conf.set("spark.sql.session.timeZone", "UTC")
        expired = (
            session.sql(
                f"CALL {catalog_name}.system.expire_snapshots(table => '{name}', "
                f"older_than => TIMESTAMP '{plan.older_than}', retain_last => {plan.retain_last})"
            )
            .collect()[0]
            .asDict()
        )
        result["deleted_files"] = sum(
            int(value or 0) for key, value in expired.items() if key.startswith("deleted_")
        )
    result["snapshots_after"] = len(iceberg.load_table(name).snapshots())
    result["data_files_after"] = _data_files(iceberg, name)
    if plan.remove_orphans:
        orphans = session.sql(
            f"CALL {catalog_name}.system.remove_orphan_files(table => '{name}')"
        ).collect()
        result["orphan_files_removed"] = len(orphans)
    return result
