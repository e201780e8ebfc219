"""Maintenance of a warehouse's datasets on a compute unit: snapshot expiry and orphan-file
clean-up through Iceberg's Spark procedures.

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
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from compute.host.catalog_cache import CatalogAccess
from compute.host.spare_sessions import warehouse_session
from compute.run.iceberg_rest import rest_catalog
from compute.run.pipeline import CATALOGS
from compute.run.runs import RunFailed, RunProgress
from compute.run.step_code import describe

TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")


def run_maintenance(spark, args: dict, progress: RunProgress) -> dict:
    """Expire snapshots (and remove orphan files) of `args["tables"]`; returns per table what
    went, or its error."""
    try:
        tables = [str(name) for name in args["tables"]]
        retain_last = int(args["retain_last"])
        remove_orphans = bool(args.get("remove_orphans", False))
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
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    outcome = {}
    try:
        for name in tables:
            try:
                outcome[name] = _maintain(
                    session, iceberg, binding.catalog_name, name, retain_last, remove_orphans, now
                )
                progress.log("INFO", None, f"{name}: {outcome[name]}")
            except Exception as error:  # one table's failure does not stop the others
                outcome[name] = {"error": describe(error)}
                progress.log("ERROR", None, f"{name}: {outcome[name]['error']}")
    finally:
        spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
    return outcome


def _maintain(
    session, iceberg, catalog_name: str, name: str, retain_last: int, remove_orphans: bool, now: str
) -> dict:
    before = len(iceberg.load_table(name).snapshots())
    # Session-local UTC: the timestamp literal means the same instant as `now`.
    session.conf.set("spark.sql.session.timeZone", "UTC")
    expired = (
        session.sql(
            f"CALL {catalog_name}.system.expire_snapshots(table => '{name}', "
            f"older_than => TIMESTAMP '{now}', retain_last => {retain_last})"
        )
        .collect()[0]
        .asDict()
    )
    result = {
        "snapshots_before": before,
        "snapshots_after": len(iceberg.load_table(name).snapshots()),
        "deleted_files": sum(
            int(value or 0) for key, value in expired.items() if key.startswith("deleted_")
        ),
    }
    if remove_orphans:
        orphans = session.sql(
            f"CALL {catalog_name}.system.remove_orphan_files(table => '{name}')"
        ).collect()
        result["orphan_files_removed"] = len(orphans)
    return result
