"""The schemas of an execution's record tables, `console_logs.e<id>` and
`runtime_stats.e<id>`, their rows as pyiceberg writes them, and a write of both that a run's
process makes before its run comes (`warm_the_record_path`), to tables in a local directory
(`local_table`).
"""

from __future__ import annotations


def timestamp(epoch: float | None):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(epoch, timezone.utc) if epoch else None


def log_rows(entries: list[dict]) -> list[dict]:
    return [{**entry, "ts": timestamp(entry["ts"])} for entry in entries]


def console_logs_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("ts", pa.timestamp("us", tz="UTC")),
            ("level", pa.string()),
            ("step", pa.string()),
            ("message", pa.string()),
        ]
    )


def runtime_stats_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("step", pa.string()),
            ("kind", pa.string()),
            ("output", pa.bool_()),
            ("status", pa.string()),
            ("rows_in", pa.int64()),
            ("rows_out", pa.int64()),
            ("bytes_in", pa.int64()),
            ("bytes_out", pa.int64()),
            ("started_at", pa.timestamp("us", tz="UTC")),
            ("ended_at", pa.timestamp("us", tz="UTC")),
            ("duration_ms", pa.int64()),
            ("spark_jobs", pa.int32()),
            ("spark_tasks", pa.int64()),
            ("executor_run_time_ms", pa.int64()),
            ("shuffle_read_bytes", pa.int64()),
            ("shuffle_write_bytes", pa.int64()),
            ("spark_stages", pa.string()),
            ("lineage", pa.string()),
        ]
    )


def local_table(directory: str, name: str, schema, io):
    """An unpartitioned pyiceberg table of `schema` (Arrow) in `directory`, with no catalog: it
    stages and writes its files through `io`, and nothing commits it."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.catalog.noop import NoopCatalog
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

    metadata = new_table_metadata(
        schema=Catalog._convert_schema_if_needed(schema),
        partition_spec=UNPARTITIONED_PARTITION_SPEC,
        sort_order=UNSORTED_SORT_ORDER,
        location=f"file://{directory}/{name}",
        properties={},
    )
    return Table(
        ("local", name), metadata, f"file://{directory}/{name}.json", io, NoopCatalog("local")
    )


def warm_the_record_path() -> None:
    """Write a run's two records once, to a local directory, never committed: pyiceberg's and
    pyarrow's first use in a process (their executors' threads, lazy imports and caches, and the
    first touch of the pages a forked process shares with its parent) then happens here rather
    than at the end of the run. Called in a run's child while it waits for its run
    (compute/run/forked_runs.py), off the warm path. Best effort: a warm-up that fails costs the
    run its first-use time, nothing else."""
    import tempfile

    import pyarrow as pa
    from pyarrow.fs import S3FileSystem

    from compute.run.iceberg_rest import (
        MetadataOnceTransaction,
        SmallWritesFileIO,
        wait_for_uploads,
    )

    stats_row = {field.name: None for field in runtime_stats_schema()}
    records = {
        "runtime_stats": (
            runtime_stats_schema(),
            [{**stats_row, "step": "warm-up", "rows_out": 0}],
        ),
        "console_logs": (
            console_logs_schema(),
            log_rows([{"ts": 1.0, "level": "INFO", "step": None, "message": "warm-up"}]),
        ),
    }
    try:
        # pyarrow's S3 client, once per process: made, never used (no request leaves).
        S3FileSystem(
            endpoint_override="http://127.0.0.1:9",
            access_key="-",
            secret_key="-",
            region="us-east-1",
        )
        with tempfile.TemporaryDirectory(prefix="lakeport-records-warm-up-") as directory:
            io = SmallWritesFileIO()
            for name, (schema, rows) in records.items():
                table = local_table(directory, name, schema, io)
                transaction = MetadataOnceTransaction(table)
                transaction.append(pa.Table.from_pylist(rows, schema=schema))
                transaction.set_properties({"lakeport.status": "complete"})
            wait_for_uploads(table)
    except Exception:  # noqa: BLE001 - see above
        pass
