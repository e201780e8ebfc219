"""The schemas of an execution's record tables, `console_logs.e<id>` and
`runtime_stats.e<id>`, and their rows as pyiceberg writes them.
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
