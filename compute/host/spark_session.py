"""Spark sessions on a Ray cluster through RayDP, set up the way this stack needs.

`start_spark_session` must run inside a Ray worker or driver of the compute unit (RayDP
places the Spark executors as Ray actors of that cluster). The settings are what this
stack was verified with: JDK 17 `--add-opens` flags for the driver and executors,
the Iceberg/S3A jars on the driver's and executors' classpath, and executors that start
this interpreter for Python work.

No catalog is configured by default: `iceberg_catalog_conf` builds the settings of one
Iceberg catalog for one warehouse, and `apply_conf` adds them to a running session, so
one warm session can serve executions against different warehouses.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from compute.build.class_archive import (
    archive_java_options,
    executor_java_options,
    raydp_class_path,
)
from compute.build.class_path_jar import class_path_jar
from compute.build.jars import CREDENTIAL_KEYED_S3A, VENDED_CREDENTIALS_FILE_IO, jar_paths
from compute.contract import ACCESS_DELEGATION_HEADER
from compute.third_party_patches import import_raydp, run_raydp_app_master_in_the_driver

_JDK17_OPENS = (
    "java.lang",
    "java.lang.invoke",
    "java.io",
    "java.net",
    "java.nio",
    "java.math",
    "java.text",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)
JDK17_JAVA_OPTIONS = " ".join(
    f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in _JDK17_OPENS
)
# An idle unit gives heap back: after 5 s without a collection, G1 collects and shrinks the heap
# to 30% above what is live (the default leaves up to 70% unused). For the driver's JVM only
# (which holds RayDP's app master too): an executor keeps its whole heap anyway (RayDP sets -Xms to -Xmx).
IDLE_HEAP_JAVA_OPTIONS = (
    "-XX:G1PeriodicGCInterval=5000 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
)
# Every JVM gives back the native memory it freed (the JIT compilers' arenas, above all) every 5 s:
# glibc keeps freed memory mapped until told to trim.
TRIM_NATIVE_JAVA_OPTIONS = "-XX:TrimNativeHeapInterval=5000"
# log4j registers its loggers with JMX as it starts, which starts the platform's MBean server: about
# 0.13 s of each JVM's start here, and a unit's start waits for two, one after the other. Nothing manages logging by JMX.
LOG4J_JAVA_OPTIONS = "-Dlog4j2.disable.jmx=true"
# A unit's Spark driver compiles with C1 alone. It plans, schedules and commits; the executors run
# the tasks. C2 compiling the driver's code took a unit's few cores from its first run, and what
# a driver runs never gets hot enough for C2's code to pay for itself (bench/RESULTS.md). Not for
# a local-mode session, whose driver runs the tasks too: `start_spark_session` adds it.
DRIVER_JIT_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# Iceberg's default ResolvingFileIO reaches for AWS SDK v2, which no registry here ships;
# HadoopFileIO goes through Hadoop's S3A (SDK v1 bundle) instead.
HADOOP_FILE_IO = "org.apache.iceberg.hadoop.HadoopFileIO"
# How often `wait_for_executors` asks the driver.
EXECUTORS_POLL_S = 0.05


def spark_conf(
    jars: list[Path] | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The Spark configuration every session of a compute unit starts with."""
    classpath = os.pathsep.join(str(path) for path in (jars if jars is not None else jar_paths()))
    # Every JVM starts from the class archive setup built, when there is one (class_archive.py).
    started_from_archive = (
        f"{JDK17_JAVA_OPTIONS} {TRIM_NATIVE_JAVA_OPTIONS} {LOG4J_JAVA_OPTIONS} "
        f"{IDLE_HEAP_JAVA_OPTIONS} {archive_java_options()}"
    ).strip()
    conf = {
        "spark.driver.extraJavaOptions": started_from_archive,
        "spark.executor.extraJavaOptions": f"{JDK17_JAVA_OPTIONS} {TRIM_NATIVE_JAVA_OPTIONS} {LOG4J_JAVA_OPTIONS} {executor_java_options()}".strip(),
        "spark.driver.extraClassPath": classpath,
        "raydp.executor.extraClassPath": classpath,
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        # S3A shared per bucket and credentials, not per bucket alone: each catalog binding's
        # storage credentials are the ones its reads and writes use, renewed ones included.
        "spark.hadoop.fs.s3.impl": CREDENTIAL_KEYED_S3A,
        "spark.hadoop.fs.s3a.impl": CREDENTIAL_KEYED_S3A,
        "spark.hadoop.fs.s3.impl.disable.cache": "true",
        "spark.hadoop.fs.s3a.impl.disable.cache": "true",
        "spark.hadoop.fs.s3a.directory.marker.retention": "keep",
        # Concurrent executions share the executors instead of queueing behind each other.
        "spark.scheduler.mode": "FAIR",
        # The UI binds every interface and a port per session; the portal shows what matters.
        "spark.ui.enabled": "false",
    }
    conf.update(extra or {})
    return conf


def start_spark_session(
    app_name: str,
    *,
    executors: int,
    executor_cores: int,
    executor_memory: str,
    placement_strategy: str | None = "SPREAD",
    extra_conf: Mapping[str, str] | None = None,
):
    """A RayDP Spark session whose executors are Ray actors of the current cluster.

    `placement_strategy` is a Ray placement-group strategy for the executors: SPREAD puts
    them on as many nodes as possible; None lets Ray place them freely.
    """
    raydp = import_raydp()
    run_raydp_app_master_in_the_driver(raydp_class_path, class_path_jar)
    # Executors launch Python workers from PATH's `python3` unless told otherwise.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    configs = spark_conf(jars=unit_jars(), extra=extra_conf)
    configs["spark.driver.extraJavaOptions"] = (
        f"{configs['spark.driver.extraJavaOptions']} {DRIVER_JIT_JAVA_OPTIONS}"
    )
    return raydp.init_spark(
        app_name,
        num_executors=executors,
        executor_cores=executor_cores,
        executor_memory=executor_memory,
        placement_group_strategy=placement_strategy,
        configs=configs,
    )


def wait_for_executors(
    spark, count: int, timeout_s: float, until: Callable[[], bool] = lambda: False
) -> int:
    """Wait until `count` executors have registered with the driver, `timeout_s` has passed or
    `until()` is true; returns how many have. RayDP's scheduler backend is ready for jobs at once:
    Spark's `minRegisteredResourcesRatio` holds back only backends that count what registered,
    and a job meanwhile runs on the executors there are (on a busy machine they come up seconds
    apart)."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout_s
    while True:
        registered = len(tracker.getExecutorInfos()) - 1  # the driver is listed too
        if registered >= count or until() or time.monotonic() >= deadline:
            return registered
        time.sleep(EXECUTORS_POLL_S)


def unit_jars() -> list[Path]:
    """The jars a unit's RayDP session adds to Spark's: the merged class path once setup built it.
    Not a local-mode session's (`spark_conf`'s default): the merged jar holds Ray's and RayDP's
    too, whose logging settings would then be the first found."""
    merged = class_path_jar()
    return [merged] if merged is not None else jar_paths()


WARM_UP_CATALOG = "lakeport_warm_up"


def warm_the_write_path(spark, partitions: int) -> None:
    """Load and compile what an execution's first write runs, before any execution: the
    write an execution makes (Spark's write plan, the driver's REST catalog calls, a staged
    create-or-replace and its commit, Parquet and manifests through S3A) in a session of its
    own, to a throwaway REST catalog on the unit's loopback (compute/host/warm_up_catalog.py) whose
    files go to an S3 endpoint that holds them until the warm-up ends (compute/host/scratch_s3.py).
    Without it the first execution on a unit took 1-2 s longer than the next ones."""
    from compute.host.scratch_s3 import ScratchS3
    from compute.host.warm_up_catalog import WarmUpCatalog

    jvm = spark.sparkContext._jvm
    session = spark.newSession()
    with ScratchS3() as endpoint, WarmUpCatalog("s3a://lakeport-warm-up/tables") as uri:
        keys = S3Keys(endpoint=endpoint, access_key="warm-up", secret_key="warm-up")
        conf = {
            **iceberg_catalog_conf(WARM_UP_CATALOG, uri=uri, warehouse="warm-up", token="warm-up"),
            **catalog_s3a_conf(WARM_UP_CATALOG, keys),
            # An executor on another node cannot reach this endpoint: fail at once, not after retries.
            f"spark.sql.catalog.{WARM_UP_CATALOG}.hadoop.fs.s3a.attempts.maximum": "1",
            f"spark.sql.catalog.{WARM_UP_CATALOG}.hadoop.fs.s3a.retry.limit": "0",
        }
        for key, value in conf.items():
            session.conf.set(key, value)
        # As a run's session is used (spare_sessions.warehouse_session): current, and the thread's active one.
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)
        try:
            session.catalog.setCurrentCatalog(WARM_UP_CATALOG)
            session.sql("CREATE NAMESPACE IF NOT EXISTS warm_up")
            session.range(0, 4 * partitions, 1, partitions).selectExpr(
                "id", "id % 7 AS k", "CAST(id AS STRING) AS s"
            ).writeTo(f"{WARM_UP_CATALOG}.warm_up.t").using("iceberg").createOrReplace()
            session.sql(f"SHOW TABLES IN {WARM_UP_CATALOG}.warm_up").collect()
        finally:
            jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
            close_session_catalog(session, WARM_UP_CATALOG)


def close_session_catalog(session, catalog_name: str) -> None:
    """Close the Iceberg REST client of a session's catalog, and with it the session's
    connections to the catalog (Spark never closes a session's catalogs). Best effort: a client
    that cannot be closed costs connections, not the run."""
    try:
        manager = session._jsparkSession.sessionState().catalogManager()
        if not manager.isCatalogRegistered(catalog_name):
            return  # never used, so never started
        client = manager.catalog(catalog_name).icebergCatalog()
        if (
            client.getClass().getName() == "org.apache.iceberg.CachingCatalog"
        ):  # the REST catalog it wraps
            wrapped = client.getClass().getDeclaredField("catalog")
            wrapped.setAccessible(True)
            client = wrapped.get(client)
        if session.sparkContext._jvm.java.io.Closeable._java_lang_class.isInstance(client):
            client.close()
    except Exception as error:  # noqa: BLE001 - see above
        print(
            f"could not close the catalog client of {catalog_name}: {type(error).__name__}: {error}",
            file=sys.stderr,
        )


@dataclass(frozen=True)
class S3Keys:
    """Keys for S3A that are not tied to a bucket, e.g. credentials a catalog vended.
    Without an `endpoint`, S3A goes to AWS."""

    endpoint: str | None
    access_key: str
    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style: bool = True


@dataclass(frozen=True, kw_only=True)
class S3Access(S3Keys):
    """How Spark reaches one bucket through S3A. Keys apply to that bucket only."""

    bucket: str


def _s3a_settings(prefix: str, s3: S3Keys) -> dict[str, str]:
    """S3A's settings for one set of keys, each key after `prefix`."""
    settings = {
        "path.style.access": str(s3.path_style).lower(),
        "access.key": s3.access_key,
        "secret.key": s3.secret_key,
        "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    if s3.endpoint:
        settings["endpoint"] = s3.endpoint
        settings["connection.ssl.enabled"] = str(s3.endpoint.startswith("https://")).lower()
    if s3.session_token:
        settings["session.token"] = s3.session_token
        settings["aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        )
    return {prefix + key: value for key, value in settings.items()}


def catalog_s3a_conf(catalog_name: str, s3: S3Keys) -> dict[str, str]:
    """S3A settings that only one Iceberg catalog's file IO sees (Iceberg's per-catalog Hadoop
    overrides, `spark.sql.catalog.<name>.hadoop.*`): the rest of the session and every other
    catalog keep their own, so one session can hold catalogs with different credentials."""
    return _s3a_settings(f"spark.sql.catalog.{catalog_name}.hadoop.fs.s3a.", s3)


def iceberg_catalog_conf(
    catalog_name: str,
    *,
    warehouse: str,
    uri: str | None = None,
    token: str | None = None,
    credential: str | None = None,
    oauth2_server_uri: str | None = None,
    scope: str | None = None,
    access_delegation: str | None = None,
    s3: S3Access | None = None,
) -> dict[str, str]:
    """Spark settings for one Iceberg catalog.

    With `uri` it is a REST catalog (Lakekeeper): `warehouse` is the catalog's warehouse
    name, and the catalog is authenticated by a bearer `token` or by a `credential`
    ("client_id:client_secret") that Iceberg exchanges at `oauth2_server_uri`;
    `access_delegation` (e.g. "vended-credentials") goes out as Iceberg's
    `X-Iceberg-Access-Delegation` header. Without `uri` it is a Hadoop catalog whose
    `warehouse` is a path or URI (file:///..., s3://...).

    Data files are read and written through Hadoop's S3A. A REST catalog's tables are reached
    with the keys the catalog vended for each of them (VendedCredentialsFileIO); a table it
    vended none for, and a Hadoop catalog, use the session's S3A settings: give a bucket's
    keys as `s3`, or add `catalog_s3a_conf`.
    """
    if token and credential:
        raise ValueError("give a token or a credential, not both")
    prefix = f"spark.sql.catalog.{catalog_name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest" if uri else "hadoop",
        f"{prefix}.warehouse": warehouse,
        # A REST catalog's tables each get a FileIO with the credentials vended for that table,
        # renewed before they expire (compute/java/.../VendedCredentialsFileIO.java); without
        # vended credentials it is HadoopFileIO with the catalog's S3A settings.
        f"{prefix}.io-impl": VENDED_CREDENTIALS_FILE_IO if uri else HADOOP_FILE_IO,
    }
    if uri:  # each setting of a REST catalog that is given
        rest = {
            "uri": uri,
            "token": token,
            "credential": credential,
            "oauth2-server-uri": credential and oauth2_server_uri,
            "scope": credential and scope,
            f"header.{ACCESS_DELEGATION_HEADER}": access_delegation,
        }
        conf.update({f"{prefix}.{key}": value for key, value in rest.items() if value})
    if s3:
        conf.update(_s3a_settings(f"spark.hadoop.fs.s3a.bucket.{s3.bucket}.", s3))
    return conf


def apply_conf(spark, conf: Mapping[str, str]) -> None:
    """Add settings to a running session: `spark.hadoop.*` go to its Hadoop configuration
    (read when a catalog or file system is first used), the rest to the SQL configuration."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in conf.items():
        if key.startswith("spark.hadoop."):
            hadoop.set(key.removeprefix("spark.hadoop."), value)
        else:
            spark.conf.set(key, value)
