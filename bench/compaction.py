"""Compaction: TPC-H Q1 over a table of 500 small files (SF 1 `lineitem` written as 500 files),
before and after the worker compacts it by the table's policy.

The table is written once in a plain PySpark session on the unit. Its policy is set through the
table page's route (compact once SMALL_FILES files are below 32 MiB); the policy pass
(app/tables/work.py `apply_policies`, the worker's, called here rather than waited for) queues
the compaction on the owner's idle unit, and the worker runs it there (`rewrite_data_files`,
compute/run/maintenance.py). Its record gives the files before and after and the GB-hours.

Q1 is timed in a plain PySpark session on the unit's Spark host, collected to the driver (the
read is the whole of it): first over the table as written (its figure before, in time), then,
after compaction, over the snapshot before it (`VERSION AS OF`, the same 500 files) and the
compacted table, interleaved, with tpch.lineitem as generated beside them (the same rows in the
generator's files: what the compacted layout is up against). Medians of RUNS. The layout of
each (files, Parquet row groups) is printed. Target (issue 42): Q1 after compaction at least 3×
faster than before (the interleaved figures).
"""

from __future__ import annotations

import time

from sqlmodel import select

from app.models import JobState, MaintenanceJob
from bench.harness import Bench, BenchError, Summary, interleaved, median, spread, verdict
from bench.throughput import Q1

NAME = "compaction"
RUNS = 5
FILES = 500
SMALL_FILES = 100  # the policy's threshold: compact once this many files are small
TARGET_SPEED_UP = 3.0
TABLE = "bench_compaction.lineitem"
JOB_TIMEOUT_S = 1800.0
LAYOUT_FILES = 20  # files whose footers `layout` reads


def q1(bench: Bench, cu_id: int, source: str, repeats: int, warmups: int = 0) -> list[float]:
    return bench.plain_pyspark(
        cu_id,
        Q1.replace("tpch.lineitem", source),
        None,
        TABLE,
        warmups=warmups,
        repeats=repeats,
    )


def data_files(bench: Bench) -> tuple[int, int, int]:
    """(data files, bytes, current snapshot id) of the table."""
    with bench.iceberg_catalog() as catalog:
        snapshot = catalog.load_table(TABLE).current_snapshot()
    summary = snapshot.summary
    return (
        int(summary["total-data-files"]),
        int(summary["total-files-size"]),
        snapshot.snapshot_id,
    )


def layout(bench: Bench, table: str) -> str:
    """How a table's current data files are laid out: their count, size and Parquet row groups
    (a Spark task reads whole row groups: they bound how many tasks read a file)."""
    import pyarrow.parquet as pq

    with bench.iceberg_catalog() as catalog:
        loaded = catalog.load_table(table)
        files = [task.file for task in loaded.scan().plan_files()]
        groups = []
        for data_file in files[:LAYOUT_FILES]:
            with loaded.io.new_input(data_file.file_path).open() as stream:
                metadata = pq.ParquetFile(stream).metadata
                groups += [
                    metadata.row_group(index).total_byte_size / 2**20
                    for index in range(metadata.num_row_groups)
                ]
    size = sum(data_file.file_size_in_bytes for data_file in files) / 2**20
    seen = f" (in the first {LAYOUT_FILES})" if len(files) > LAYOUT_FILES else ""
    return (
        f"{len(files)} files, {size:.0f} MiB; {len(groups)} row groups{seen} of "
        f"{min(groups):.1f}–{max(groups):.1f} MiB uncompressed"
    )


def compact(bench: Bench) -> MaintenanceJob:
    """Set the table's policy through its route, run the policy pass, wait for the job."""
    bench.post(
        f"/warehouses/{bench.warehouse_id}/tables/{TABLE}/policy",
        {"small_file_mb": "32", "compact_small_files": str(SMALL_FILES), "expire_days": ""},
        expect=200,
    )
    from app.tables import work as table_work

    with bench.app.app_context():
        table_work.apply_policies()
    job = bench.first(
        select(MaintenanceJob)
        .where(MaintenanceJob.table_name == TABLE)
        .order_by(MaintenanceJob.id.desc())
    )
    if job is None:
        raise BenchError("the policy pass queued no compaction")
    if job.skipped:
        raise BenchError(f"the policy pass did not compact: {job.skipped}")
    return bench.wait_for_row(
        MaintenanceJob,
        job.id,
        lambda row: row.state not in JobState.LIVE,
        JOB_TIMEOUT_S,
        f"compaction job {job.id}",
        poll_s=0.5,
    )


def run(bench: Bench, options) -> Summary:
    print(
        f"\n== compaction: Q1 over lineitem at SF {options.scale_factor:g} in {FILES} small files, "
        f"before and after the worker compacts it, median of {RUNS}"
    )
    cu_id = bench.compute_unit_id()
    bench.tpch_at(options.scale_factor)
    with bench.iceberg_catalog() as catalog:
        catalog.create_namespace_if_not_exists(TABLE.split(".")[0])
    began = time.monotonic()
    bench.plain_pyspark(
        cu_id,
        f"SELECT /*+ REPARTITION({FILES}) */ * FROM tpch.lineitem",
        TABLE,
        "tpch.lineitem",
        warmups=1,
        repeats=0,
    )
    files, size, before_id = data_files(bench)
    print(
        f"  written in {time.monotonic() - began:.1f} s (untimed): {files} data files, "
        f"{size / files / 2**20:.2f} MiB each on average"
    )
    if files < FILES:
        raise BenchError(f"the table has {files} data files, not {FILES}")
    before_in_time = q1(bench, cu_id, TABLE, RUNS, warmups=1)
    print(f"  Q1 before compaction: {spread(before_in_time)}")
    began = time.monotonic()
    job = compact(bench)
    waited = time.monotonic() - began
    if job.state != JobState.DONE:
        raise BenchError(f"compaction job {job.id} ended {job.state}: {job.error}")
    after_files, after_size, _ = data_files(bench)
    print(
        f"  compacted by the worker in {waited:.1f} s from the policy pass "
        f"(job {job.id}: data files {job.data_files_before} → {job.data_files_after}, "
        f"{job.gb_hours or 0:.4f} GB-hours); now {after_files} files, "
        f"{after_size / after_files / 2**20:.1f} MiB each on average"
    )
    print(
        f"  compacted: {layout(bench, TABLE)}; tpch.lineitem as generated: {layout(bench, 'tpch.lineitem')}"
    )
    old, new, generated = [], [], []
    interleaved(
        RUNS,
        [
            lambda: old.extend(q1(bench, cu_id, f"{TABLE} VERSION AS OF {before_id}", 1)),
            lambda: new.extend(q1(bench, cu_id, TABLE, 1)),
            lambda: generated.extend(q1(bench, cu_id, "tpch.lineitem", 1)),
        ],
    )
    print(f"  Q1 over the snapshot before compaction ({files} files): {spread(old)}")
    print(f"  Q1 over the compacted table ({after_files} files): {spread(new)}")
    print(f"  beside them, Q1 over tpch.lineitem as generated (the same rows): {spread(generated)}")
    speed_up = median(old) / median(new)
    met = speed_up >= TARGET_SPEED_UP
    print(
        f"  before / after: {speed_up:.2f}× (target ≥ {TARGET_SPEED_UP:g}×; before, in time: "
        f"{median(before_in_time) / median(new):.2f}×): {verdict(met)}"
    )
    return Summary(
        NAME,
        f"Q1 over {files} small files {median(old):.2f} s, compacted to {after_files} "
        f"{median(new):.2f} s: {speed_up:.2f}× (target ≥ {TARGET_SPEED_UP:g}×)",
        met,
    )
