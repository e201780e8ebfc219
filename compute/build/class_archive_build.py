"""Builds the class archive of compute/build/class_archive.py, at setup: `python -m compute.build.class_archive_build`.

A training run lists the classes a unit's JVMs load; `java -Xshare:dump` writes them into the
archive for RayDP's class path. Never run by a unit: the archive is code the JVMs trust.

The training run is a RayDP session on a Ray node of its own, doing what a unit's Spark host
and an execution do, with its driver (which holds RayDP's app master) and executor each listing
the classes they load. A local-mode session (the training run before) loads none of Ray's Java runtime, RayDP,
Spark's cluster-mode scheduler, Iceberg's REST catalog or S3A's requests: each class left out is
parsed and verified again by every JVM of every unit's start (bench/RESULTS.md has what that
cost). Where Ray cannot start (a build container without shared memory, say), the training falls
back to a local session, and says so.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from compute.build import class_path_jar
from compute.build.class_archive import ARCHIVE_PREFIX, archive_path, raydp_class_path
from compute.host.spark_session import (
    JDK17_JAVA_OPTIONS,
    iceberg_catalog_conf,
    spark_conf,
    unit_jars,
    warm_the_write_path,
)

JVM_KINDS = ("driver", "executor")  # the driver's JVM holds RayDP's app master (spark_session.py)


def build(log=print) -> Path:
    """Build the merged class path (compute/build/class_path_jar.py), then the archive for it, unless
    they exist; returns the archive's path."""
    class_path_jar.build(log)
    class_path = raydp_class_path()
    path = archive_path(class_path)
    if path.is_file():
        log(f"class archive present: {path.name}")
        return path
    with tempfile.TemporaryDirectory(prefix="lakeport-cds-") as work:
        class_list = Path(work) / "classes.lst"
        try:
            _run_training("--train", class_list, Path(work))
        except subprocess.SubprocessError as error:
            log(
                f"warning: the training run on Ray failed ({_last_line(error)}); "
                "the archive holds what a local Spark session loads, and units start slower"
            )
            _run_training("--train-local", class_list, Path(work))
        partial = path.with_suffix(".jsa.partial")
        dumped = subprocess.run(
            [
                "java",
                *JDK17_JAVA_OPTIONS.split(),
                "-Xshare:dump",
                f"-XX:SharedClassListFile={class_list}",
                f"-XX:SharedArchiveFile={partial}",
                "-cp",
                class_path,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if dumped.returncode != 0 or not partial.is_file():
            raise RuntimeError(
                f"java -Xshare:dump failed:\n{dumped.stdout[-2000:]}{dumped.stderr[-2000:]}"
            )
        partial.rename(path)  # whole or not at all: a JVM never maps a half-written archive
    for stale in path.parent.glob(f"{ARCHIVE_PREFIX}*.jsa"):
        if stale != path:
            stale.unlink()
    log(f"built class archive {path.name} ({path.stat().st_size >> 20} MiB)")
    return path


def _run_training(mode: str, class_list: Path, work: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "compute.build.class_archive_build",
            mode,
            str(class_list),
            str(work),
        ],
        check=True,
        timeout=600,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _last_line(error: subprocess.SubprocessError) -> str:
    stderr = getattr(error, "stderr", None) or b""
    lines = stderr.decode(errors="replace").strip().splitlines()
    return lines[-1][:300] if lines else type(error).__name__


def _train(class_list: Path, work: Path) -> None:
    """A RayDP session, started as a unit's host starts it, doing a unit's work; its JVMs' class
    lists merged into one."""
    import ray

    from compute.host.spark_session import start_spark_session

    lists = {kind: work / f"{kind}.lst" for kind in JVM_KINDS}
    conf = spark_conf(jars=unit_jars())
    conf["spark.driver.extraJavaOptions"] += f" -XX:DumpLoadedClassList={lists['driver']}"
    # As a unit's executors start once the archive exists: Spark from the application class
    # loader (class_archive.executor_java_options), the only loader whose classes are listed.
    conf["spark.executor.extraJavaOptions"] += (
        f" -cp {raydp_class_path()} -XX:DumpLoadedClassList={lists['executor']}"
    )
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _temp_dir=str(work / "ray"),
    )
    try:
        spark = start_spark_session(
            "lakeport-class-archive",
            executors=1,
            executor_cores=1,
            executor_memory="1g",
            extra_conf=conf,
        )
        try:
            spark.range(0, 1, 1, 1).selectExpr("sum(id)").collect()  # the host's first job
            _work_like_a_unit(spark, work)
        finally:
            spark.stop()
    finally:
        ray.shutdown()
    merge_class_lists([lists[kind] for kind in JVM_KINDS], class_list)


def _train_local(class_list: Path, work: Path) -> None:
    """The fallback: a local-mode session doing the same work, listing what its one JVM loads."""
    from pyspark.sql import SparkSession

    conf = spark_conf()
    conf["spark.driver.extraJavaOptions"] += f" -XX:DumpLoadedClassList={class_list}"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lakeport-class-archive")
        .config(map=conf)
        .getOrCreate()
    )
    try:
        _work_like_a_unit(spark, work)
    finally:
        spark.stop()


def _work_like_a_unit(spark, work: Path) -> None:
    """The host's write-path warm-up (a REST catalog, a staged create-or-replace, S3A's requests),
    then what executions run: a Parquet scan, an aggregation with a shuffle and a sort, written
    back, and a job in a Python worker."""
    warm_the_write_path(spark, 1)
    session = spark.newSession()
    for key, value in iceberg_catalog_conf(
        "training", warehouse=(work / "warehouse").as_uri()
    ).items():
        session.conf.set(key, value)
    session.sql("CREATE NAMESPACE IF NOT EXISTS training.results")
    session.range(1000).selectExpr(
        "id",
        "id % 7 AS k",
        "CAST(id AS STRING) AS s",
        "CAST(id AS DECIMAL(12,2)) AS d",
        "date_add(DATE'1998-01-01', CAST(id % 90 AS INT)) AS day",
    ).writeTo("training.results.t").create()
    session.sql(
        "SELECT k, count(*) AS n, sum(d) AS total, avg(d) AS mean FROM training.results.t "
        "WHERE day <= DATE'1998-03-01' GROUP BY k ORDER BY k"
    ).writeTo("training.results.agg").create()
    session.table("training.results.agg").collect()
    spark.sparkContext.parallelize(range(10), 1).map(lambda n: n * 2).sum()


def merge_class_lists(lists: list[Path], merged: Path) -> None:
    """One class list from several JVMs' lists: each entry once, in the order first listed."""
    entries: dict[str, None] = {}
    for path in lists:
        if not path.is_file():
            raise RuntimeError(f"a JVM of the training run wrote no class list: {path.name}")
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                entries.setdefault(line)
    merged.write_text("".join(f"{entry}\n" for entry in entries))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--train"]:
        _train(Path(sys.argv[2]), Path(sys.argv[3]))
    elif sys.argv[1:2] == ["--train-local"]:
        _train_local(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        build()
