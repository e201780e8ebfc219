"""Comparing two runs' outputs on a compute unit: for each output, a bounded sample of the rows
present in one table and not the other (multiset difference, `EXCEPT ALL`), with their counts.

Submitted by the portal as a job of kind `comparison` (compute/contract.py JobKind, beside which
`args` and the result are documented). It reaches the warehouse like an execution does: the user's catalog token, storage
credentials vended by the catalog, a Spark session of its own holding only that catalog.
Only the columns both tables have (by name) are compared; the portal shows schema differences.
"""

from __future__ import annotations

import datetime
import decimal

from compute.contract import COMPARE_LIMIT_MAX
from compute.host.catalog_cache import CatalogAccess
from compute.host.spare_sessions import warehouse_session
from compute.run.iceberg_rest import rest_catalog
from compute.run.pipeline import CATALOGS
from compute.run.runs import RunFailed
from compute.run.step_code import describe


def run_comparison(spark, args: dict, progress) -> dict:
    try:
        catalog, pairs = dict(args["catalog"]), [dict(pair) for pair in args["pairs"]]
        lakekeeper_id = str(args["warehouse"]["lakekeeper_id"])
        limit = max(1, min(int(args.get("limit", 50)), COMPARE_LIMIT_MAX))
    except (KeyError, TypeError, ValueError) as error:
        raise RunFailed(f"invalid comparison: {type(error).__name__}: {error}") from None
    if not pairs:
        return {}
    iceberg = rest_catalog("comparison", catalog["uri"], catalog["warehouse"], catalog["token"])
    tables = {}
    for pair in pairs:
        for side in ("a", "b"):
            try:
                tables[pair[side]] = iceberg.load_table(pair[side])
            except Exception as error:
                tables[pair[side]] = error
    loaded = [table for table in tables.values() if not isinstance(table, Exception)]
    access = (
        CatalogAccess.vended(
            catalog["uri"], catalog["warehouse"], catalog["token"], loaded[0].io.properties
        )
        if loaded
        else None
    )
    if access is None:
        raise RunFailed("the catalog vended no storage credentials for the compared tables")
    binding = CATALOGS.binding(lakekeeper_id, access)
    try:
        session = warehouse_session(spark, binding)
        result = {}
        for pair in pairs:
            missing = [
                pair[side] for side in ("a", "b") if isinstance(tables[pair[side]], Exception)
            ]
            if missing:
                result[pair["output"]] = {
                    "error": f"{missing[0]} cannot be read: {describe(tables[missing[0]])}"
                }
                continue
            with progress.interruptible():
                result[pair["output"]] = _difference(
                    session, binding.catalog_name, pair["a"], pair["b"], limit
                )
        return result
    finally:
        spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.clearActiveSession()


def _difference(session, catalog_name: str, a: str, b: str, limit: int) -> dict:
    first, second = session.table(f"{catalog_name}.{a}"), session.table(f"{catalog_name}.{b}")
    theirs = set(second.columns)
    columns = [column for column in first.columns if column in theirs]
    if not columns:
        return {"error": "the two tables have no column in common", "columns": []}
    first, second = first.select(*columns), second.select(*columns)
    only_a, only_b = first.exceptAll(second), second.exceptAll(first)
    return {
        "columns": columns,
        "only_in_a_count": only_a.count(),
        "only_in_b_count": only_b.count(),
        "only_in_a": [_row(row) for row in only_a.limit(limit).collect()],
        "only_in_b": [_row(row) for row in only_b.limit(limit).collect()],
    }


def _row(row) -> dict:
    return {key: _plain(value) for key, value in row.asDict().items()}


def _plain(value):
    if isinstance(value, (datetime.date, datetime.datetime, decimal.Decimal, bytes, bytearray)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value
