"""Builds the class archive of compute/class_archive.py, at setup: `python -m compute.class_archive_build`.

A training run (a local Spark session that does what an execution does) lists the classes it
loads; `java -Xshare:dump` writes them into the archive for RayDP's class path. Never run by a
unit: the archive is code the JVMs trust.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from compute.class_archive import ARCHIVE_PREFIX, archive_path, raydp_class_path
from compute.spark_session import JDK17_JAVA_OPTIONS, iceberg_catalog_conf, spark_conf


def build(log=print) -> Path:
    """Build the archive unless it exists; returns its path."""
    class_path = raydp_class_path()
    path = archive_path(class_path)
    if path.is_file():
        log(f"class archive present: {path.name}")
        return path
    with tempfile.TemporaryDirectory(prefix="lakeport-cds-") as work:
        class_list = Path(work) / "classes.lst"
        subprocess.run(
            [sys.executable, "-m", "compute.class_archive_build", "--train", str(class_list), work],
            check=True, timeout=600, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        partial = path.with_suffix(".jsa.partial")
        dumped = subprocess.run(
            ["java", *JDK17_JAVA_OPTIONS.split(), "-Xshare:dump", f"-XX:SharedClassListFile={class_list}",
             f"-XX:SharedArchiveFile={partial}", "-cp", class_path],
            capture_output=True, text=True, timeout=600,
        )
        if dumped.returncode != 0 or not partial.is_file():
            raise RuntimeError(f"java -Xshare:dump failed:\n{dumped.stdout[-2000:]}{dumped.stderr[-2000:]}")
        partial.rename(path)  # whole or not at all: a JVM never maps a half-written archive
    for stale in path.parent.glob(f"{ARCHIVE_PREFIX}*.jsa"):
        if stale != path:
            stale.unlink()
    log(f"built class archive {path.name} ({path.stat().st_size >> 20} MiB)")
    return path


def _train(class_list: Path, work: Path) -> None:
    """A local Spark session doing what an execution does, listing every class it loads."""
    from pyspark.sql import SparkSession

    conf = spark_conf()
    conf["spark.driver.extraJavaOptions"] += f" -XX:DumpLoadedClassList={class_list}"
    conf.update(iceberg_catalog_conf("training", warehouse=(work / "warehouse").as_uri()))
    spark = SparkSession.builder.master("local[2]").appName("lakeport-class-archive").config(map=conf).getOrCreate()
    try:
        spark.sql("CREATE NAMESPACE IF NOT EXISTS training.results")
        spark.range(1000).selectExpr("id", "id % 7 AS k", "CAST(id AS STRING) AS s") \
            .writeTo("training.results.t").create()
        spark.sql("SELECT k, count(*) AS n, sum(id) AS total FROM training.results.t GROUP BY k ORDER BY k") \
            .writeTo("training.results.agg").create()
        spark.table("training.results.agg").collect()
        # S3A and the AWS SDK set up as an execution's first write does (no request is made).
        jvm = spark.sparkContext._jvm
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        hadoop.set("fs.s3a.endpoint", "http://127.0.0.1:9")
        hadoop.set("fs.s3a.access.key", "training")
        hadoop.set("fs.s3a.secret.key", "training")
        jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("s3a://training/"), hadoop)
    finally:
        spark.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--train"]:
        _train(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        build()
