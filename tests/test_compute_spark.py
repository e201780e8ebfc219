"""Spark on a compute unit: the jars, the session settings, and the Spark host on a real
two-node local cluster (RayDP executors on both nodes, Iceberg through the jars)."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from app.ray_clusters.base import ClusterSpec
from app.ray_clusters.local import LocalClusterBackend, cluster_pids
from app.spark_host.client import SparkHostClient, SparkHostError, with_spark_host_secret
from compute.build import class_archive, class_path_jar, jars
from compute.contract import SparkHostSettings, secret_digest
from compute.host import host_auth
from compute.host.spark_session import (
    DRIVER_JIT_JAVA_OPTIONS,
    IDLE_HEAP_JAVA_OPTIONS,
    JDK17_JAVA_OPTIONS,
    LOG4J_JAVA_OPTIONS,
    TRIM_NATIVE_JAVA_OPTIONS,
    S3Access,
    apply_conf,
    iceberg_catalog_conf,
    spark_conf,
)
from tests.processes import process_argv, process_running, rss_bytes


# ------------------------------------------------------------------ jars and settings
def test_fetch_jars_keeps_jars_already_present(monkeypatch):
    monkeypatch.setattr(
        subprocess, "run", lambda *a, **k: pytest.fail("nothing should be downloaded")
    )
    said: list[str] = []

    paths = jars.fetch_jars(log=said.append)

    assert [path.name for path in paths] == [source.file_name for source in jars.REQUIRED_JARS] + [
        jars.lakeport_jar_name()
    ]
    assert said == [f"present: {path}" for path in paths]


def test_lakeports_own_jar_is_built_from_its_sources_and_renamed_when_they_change(
    tmp_path, monkeypatch
):
    # The sources use all three: hadoop-aws, the AWS SDK its credential providers are typed by,
    # and Iceberg's runtime.
    for compiled_against in (jars.HADOOP_AWS, jars.AWS_SDK_BUNDLE, jars.ICEBERG_SPARK_RUNTIME):
        (tmp_path / compiled_against.file_name).symlink_to(
            jars.jars_dir() / compiled_against.file_name
        )
    built = jars.build_lakeport_jar(tmp_path, log=lambda _line: None)
    with zipfile.ZipFile(built) as jar:
        assert "io/lakeport/s3/CredentialKeyedS3AFileSystem.class" in jar.namelist()
    sources = tmp_path / "java"
    (sources / "io/lakeport/s3").mkdir(parents=True)
    (sources / "io/lakeport/s3/Extra.java").write_text("package io.lakeport.s3; class Extra {}")
    monkeypatch.setattr(jars, "JAVA_SOURCES", sources)
    rebuilt = jars.build_lakeport_jar(tmp_path, log=lambda _line: None)
    assert rebuilt.name != built.name and not built.exists()  # the stale jar is gone
    with zipfile.ZipFile(rebuilt) as jar:
        assert "io/lakeport/s3/Extra.class" in jar.namelist()


def test_jvms_use_the_class_archive_only_where_setup_built_it(tmp_path, monkeypatch):
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(class_archive, "raydp_class_path", lambda: "/j/a.jar:/j/b.jar")
    assert class_archive.archive_java_options() == class_archive.executor_java_options() == ""

    archive = class_archive.archive_path()
    archive.write_bytes(b"built at setup")
    uses_archive = (
        f"-XX:SharedArchiveFile={archive} -Xshare:auto "
        "-XX:+UnlockDiagnosticVMOptions -XX:ArchiveRelocationMode=0"
    )
    assert class_archive.archive_java_options() == uses_archive
    # Ray starts its Java workers on its own jars: the executors name the archive's class path.
    assert class_archive.executor_java_options() == f"-cp /j/a.jar:/j/b.jar {uses_archive}"
    assert archive.parent == tmp_path
    # Another class path (a jar added or updated) or another JDK: another archive.
    assert class_archive.archive_path("/j/a.jar:/j/c.jar") != archive
    rebuilt = tmp_path / "merged.jar"  # a jar written again under its name, as the merged one is
    rebuilt.write_bytes(b"first")
    before = class_archive.archive_path(str(rebuilt))
    rebuilt.write_bytes(b"second build")
    assert class_archive.archive_path(str(rebuilt)) != before


def test_the_archive_is_named_for_the_jdk_its_release_file_names_without_starting_a_jvm(
    tmp_path, monkeypatch
):
    jdk = tmp_path / "jdk"
    (jdk / "bin").mkdir(parents=True)
    (jdk / "bin" / "java").write_text("#!/bin/sh\nexit 1\n")
    (jdk / "release").write_text('JAVA_RUNTIME_VERSION="17.0.15+6"\n')
    monkeypatch.setattr(class_archive.shutil, "which", lambda name: str(jdk / "bin" / name))
    class_archive._java_version.cache_clear()
    try:
        before = class_archive.archive_path("/j/a.jar")
        (jdk / "release").write_text(
            'JAVA_RUNTIME_VERSION="17.0.16+8"\n'
        )  # the JDK updated in place
        class_archive._java_version.cache_clear()
        assert class_archive.archive_path("/j/a.jar") != before
    finally:
        class_archive._java_version.cache_clear()


def test_the_class_archive_is_built_for_the_merged_class_path_raydp_starts_its_jvms_with():
    entries = class_path_jar.raydp_entries()
    assert entries[: len(jars.jar_paths())] == [str(path) for path in jars.jar_paths()]
    assert any(entry.endswith("/pyspark/jars/*") for entry in entries)
    assert any("/raydp/jars/raydp-" in entry for entry in entries)
    merged = class_path_jar.class_path_jar()
    assert merged is not None and class_archive.raydp_class_path() == str(merged)
    assert class_archive.archive_path().is_file(), (
        "setup builds it: python -m compute.build.class_archive_build"
    )


def test_the_class_archive_holds_what_a_units_jvms_load_and_a_local_session_does_not():
    """Trained on a RayDP session (compute/build/class_archive_build.py): Ray's Java runtime, RayDP's
    app master and executor, Spark's cluster-mode executor, Iceberg's REST catalog, S3A's client."""
    listed = subprocess.run(
        [
            "java",
            *class_archive.archive_java_options().split(),
            "-Xshare:on",
            "-XX:+PrintSharedArchiveAndExit",
            "-cp",
            class_archive.raydp_class_path(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    archived = set(re.findall(r"^\s*\d+: (\S+) ", listed.stdout, re.MULTILINE))
    assert len(archived) > 20_000
    assert {
        "io.ray.runtime.RayNativeRuntime",
        "org.apache.spark.deploy.raydp.RayAppMaster",
        "org.apache.spark.executor.RayDPExecutor",
        "org.apache.spark.executor.CoarseGrainedExecutorBackend",
        "org.apache.iceberg.rest.RESTSessionCatalog",
        "com.amazonaws.services.s3.AmazonS3Client",
    } <= archived


def test_the_training_runs_class_lists_merge_into_one_entry_each(tmp_path):
    from compute.build.class_archive_build import merge_class_lists

    driver, executor, merged = (
        tmp_path / "driver.lst",
        tmp_path / "executor.lst",
        tmp_path / "classes.lst",
    )
    driver.write_text(
        "# NOTE: generated\njava/lang/Object\norg/apache/spark/SparkContext\n"
        "@lambda-proxy a/B apply ()V\n"
    )
    executor.write_text(
        "# NOTE: generated\n\njava/lang/Object\norg/apache/spark/executor/Executor\n"
        "@lambda-proxy a/B apply ()V\n"
    )
    merge_class_lists([driver, executor], merged)
    assert merged.read_text().splitlines() == [
        "java/lang/Object",
        "org/apache/spark/SparkContext",
        "@lambda-proxy a/B apply ()V",
        "org/apache/spark/executor/Executor",
    ]
    with pytest.raises(RuntimeError, match="app-master.lst"):
        merge_class_lists([driver, tmp_path / "app-master.lst"], merged)


def test_where_ray_cannot_start_at_setup_the_archive_is_trained_on_a_local_session(
    tmp_path, monkeypatch
):
    from compute.build import class_archive_build

    class_path = str(jars.jar_paths()[-1])  # a real jar: the dump checks the class path it is given
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(class_archive_build, "raydp_class_path", lambda: class_path)
    trained = []

    def training(mode, class_list, work):
        trained.append(mode)
        if mode == "--train":
            raise subprocess.CalledProcessError(
                1, "train", stderr=b"Traceback...\nRuntimeError: no shared memory\n"
            )
        class_list.write_text("java/lang/Object\njava/lang/String\n")

    monkeypatch.setattr(class_archive_build, "_run_training", training)
    merged = []  # the class path is merged first (tests/test_class_path_jar.py), for the archive's dump
    monkeypatch.setattr(class_path_jar, "build", merged.append)
    said = []
    archive = class_archive_build.build(log=said.append)
    assert merged == [said.append]
    assert trained == ["--train", "--train-local"]
    assert "RuntimeError: no shared memory" in said[0] and "units start slower" in said[0]
    assert archive == class_archive.archive_path(class_path) and archive.is_file()
    assert not list(tmp_path.glob("*.partial"))


def test_the_scratch_s3_endpoint_serves_a_write_and_its_read_back_until_it_stops():
    from compute.host.scratch_s3 import ScratchS3

    body = b"parquet bytes" * 1000
    chunked = b"".join(
        [
            b"2710;chunk-signature=ab\r\n",
            body[:10000],
            b"\r\n",
            f"{len(body) - 10000:x};chunk-signature=cd\r\n".encode(),
            body[10000:],
            b"\r\n",
            b"0;chunk-signature=ef\r\n\r\n",
        ]
    )
    with ScratchS3() as endpoint:
        assert endpoint.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=endpoint) as s3:
            assert s3.head("/bucket/data/f.parquet").status_code == 404
            listing = s3.get("/bucket", params={"list-type": "2", "prefix": "data/f.parquet/"})
            assert listing.status_code == 200 and "<KeyCount>0</KeyCount>" in listing.text
            # As the AWS SDK sends it: in signed chunks.
            put = s3.put(
                "/bucket/data/f.parquet",
                content=chunked,
                headers={"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"},
            )
            assert put.status_code == 200
            assert (
                put.headers["ETag"] == f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"'
            )
            head = s3.head("/bucket/data/f.parquet")
            assert head.status_code == 200 and head.headers["Content-Length"] == str(len(body))
            assert s3.get("/bucket/data/f.parquet").content == body
            tail = s3.get("/bucket/data/f.parquet", headers={"Range": f"bytes={len(body) - 8}-"})
            assert tail.status_code == 206 and tail.content == body[-8:]
            assert (
                tail.headers["Content-Range"]
                == f"bytes {len(body) - 8}-{len(body) - 1}/{len(body)}"
            )
            assert s3.put("/bucket/plain", content=b"abc").status_code == 200
            assert s3.get("/bucket/plain", headers={"Range": "bytes=1-1"}).content == b"b"
            assert s3.delete("/bucket/plain").status_code == 204
            assert (
                s3.put("/bucket/big", content=b"x" * (16 << 20 | 1)).status_code == 413
            )  # held in memory: bounded
            assert s3.get("/bucket/plain").status_code == 404
    with pytest.raises(httpx.ConnectError):
        httpx.head(
            f"{endpoint}/bucket/data/f.parquet"
        )  # gone with its block, and its objects with it


def test_the_warm_up_catalog_serves_a_write_as_a_rest_catalog_does_and_keeps_it_in_memory():
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from compute.host.warm_up_catalog import WarmUpCatalog

    with WarmUpCatalog("s3a://lakeport-warm-up/tables/") as uri:
        catalog = load_catalog("warm-up", type="rest", uri=uri)
        catalog.create_namespace("warm_up")
        assert catalog.list_namespaces() == [("warm_up",)]
        with pytest.raises(NoSuchTableError):
            catalog.load_table("warm_up.t")
        table = catalog.create_table(
            "warm_up.t", Schema(NestedField(1, "id", LongType(), required=False))
        )
        assert table.location() == "s3a://lakeport-warm-up/tables/warm_up/t"
        with table.transaction() as transaction:  # a commit: the catalog applies its updates
            transaction.set_properties(kind="warm-up")
        loaded = catalog.load_table("warm_up.t")
        assert loaded.properties["kind"] == "warm-up"
        assert loaded.metadata_location.endswith("/00001.metadata.json")
        stale = httpx.post(
            f"{uri}/v1/namespaces/warm_up/tables/t",
            json={
                "requirements": [
                    {"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}
                ],
                "updates": [{"action": "set-properties", "updates": {"kind": "stale"}}],
            },
        )
        assert stale.status_code == 409 and stale.json()["error"]["type"] == "CommitFailedException"
        with pytest.raises(TableAlreadyExistsError):
            catalog.create_table(
                "warm_up.t", Schema(NestedField(1, "id", LongType(), required=False))
            )
        assert catalog.list_tables("warm_up") == [("warm_up", "t")]
        catalog.drop_table("warm_up.t")
        assert httpx.post(f"{uri}/v1/namespaces", content=b" " * (1 << 20 | 1)).status_code == 413
        assert not catalog.table_exists("warm_up.t")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{uri}/v1/config")  # gone with its block, and its tables with it


def test_missing_jars_are_named_with_the_fix(tmp_path):
    (tmp_path / jars.HADOOP_AWS.file_name).write_text("not a jar")

    with pytest.raises(jars.MissingJarsError) as error:
        jars.jar_paths(tmp_path)

    message = str(error.value)
    assert all(source.file_name in message for source in jars.REQUIRED_JARS)
    assert "scripts/fetch_jars.py" in message


def test_jars_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path))
    assert jars.jars_dir() == tmp_path
    monkeypatch.delenv(jars.JARS_DIR_ENV)
    assert jars.jars_dir() == jars.PROJECT_ROOT / ".cache" / "jars"


IMPORT_RAYDP = """
import sys
from compute.third_party_patches import RAYDP_DATASETS, import_raydp

raydp = import_raydp()
print(sorted(name for name in ("pandas", "ray.data", RAYDP_DATASETS) if name in sys.modules))
import raydp.spark
try:
    raydp.spark.get_raydp_master_owner(1, 2)  # the real function's own complaint, once imported
except TypeError as error:
    print(type(sys.modules[RAYDP_DATASETS].__dict__.get("_recoverable_rdd_ids")).__name__, "pandas" in sys.modules)
owner = raydp.spark.PartitionObjectsOwner("owner", print)  # RayDP's class, as its stand-in answers for it
real = sys.modules[RAYDP_DATASETS].PartitionObjectsOwner
print(type(owner) is real, isinstance(owner, raydp.spark.PartitionObjectsOwner),
      issubclass(real, raydp.spark.PartitionObjectsOwner), isinstance(object(), raydp.spark.PartitionObjectsOwner))
"""


def test_raydp_is_imported_without_its_dataset_conversions_until_one_is_called():
    """On a unit's way to its session, `import raydp` would import ray.data and pandas for
    RayDP's dataset conversions (half a second on a fast machine); they come on first use."""
    ran = subprocess.run(
        [sys.executable, "-c", IMPORT_RAYDP],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.splitlines() == ["[]", "dict True", "True True True False"]


def test_session_settings_put_the_jars_and_jdk17_flags_everywhere():
    conf = spark_conf(jars=[Path("/j/a.jar"), Path("/j/b.jar")])

    assert (
        conf["spark.driver.extraClassPath"]
        == conf["raydp.executor.extraClassPath"]
        == "/j/a.jar:/j/b.jar"
    )
    # The driver (which holds RayDP's app master) gives idle heap back; executors cannot (their
    # -Xms is their -Xmx).
    assert (
        conf["spark.driver.extraJavaOptions"]
        == (
            f"{JDK17_JAVA_OPTIONS} {TRIM_NATIVE_JAVA_OPTIONS} {LOG4J_JAVA_OPTIONS} "
            f"{IDLE_HEAP_JAVA_OPTIONS} {class_archive.archive_java_options()}"
        ).strip()
    )
    assert (
        conf["spark.executor.extraJavaOptions"]
        == (
            f"{JDK17_JAVA_OPTIONS} {TRIM_NATIVE_JAVA_OPTIONS} {LOG4J_JAVA_OPTIONS} "
            f"{class_archive.executor_java_options()}"
        ).strip()
    )
    assert JDK17_JAVA_OPTIONS.count("--add-opens=java.base/") == 14
    assert "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in JDK17_JAVA_OPTIONS
    assert (
        conf["spark.sql.extensions"]
        == "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    )
    assert not any(key.startswith("spark.sql.catalog.") for key in conf)


def test_rest_catalog_settings_for_one_warehouse():
    conf = iceberg_catalog_conf(
        "sales",
        uri="http://127.0.0.1:8181/catalog",
        warehouse="sales-wh",
        token="tkn",
        s3=S3Access(
            endpoint="http://127.0.0.1:9000",
            bucket="sales-bucket",
            access_key="AK",
            secret_key="SK",
        ),
    )

    assert conf == {
        "spark.sql.catalog.sales": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.sales.type": "rest",
        "spark.sql.catalog.sales.uri": "http://127.0.0.1:8181/catalog",
        "spark.sql.catalog.sales.warehouse": "sales-wh",
        "spark.sql.catalog.sales.token": "tkn",
        "spark.sql.catalog.sales.io-impl": "io.lakeport.s3.VendedCredentialsFileIO",
        "spark.hadoop.fs.s3a.bucket.sales-bucket.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.bucket.sales-bucket.path.style.access": "true",
        "spark.hadoop.fs.s3a.bucket.sales-bucket.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.bucket.sales-bucket.access.key": "AK",
        "spark.hadoop.fs.s3a.bucket.sales-bucket.secret.key": "SK",
        "spark.hadoop.fs.s3a.bucket.sales-bucket.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }


def test_settings_added_to_a_running_session_go_to_hadoop_or_sql_by_their_prefix():
    class Recording(dict):
        def set(self, key, value):
            self[key] = value

    hadoop, sql = Recording(), Recording()
    context = type(
        "Context", (), {"_jsc": type("Jsc", (), {"hadoopConfiguration": lambda self: hadoop})()}
    )()
    session = type("Session", (), {"sparkContext": context, "conf": sql})()

    apply_conf(
        session,
        iceberg_catalog_conf(
            "sales",
            uri="http://catalog/",
            warehouse="w",
            s3=S3Access(endpoint="http://s3:9000", bucket="b", access_key="AK", secret_key="SK"),
        ),
    )

    assert hadoop["fs.s3a.bucket.b.endpoint"] == "http://s3:9000"
    assert hadoop["fs.s3a.bucket.b.secret.key"] == "SK"
    assert all(key.startswith("fs.s3a.bucket.b.") for key in hadoop)
    assert sql["spark.sql.catalog.sales.uri"] == "http://catalog/"
    assert not any(key.startswith("spark.hadoop.") for key in sql)


def test_rest_catalog_with_a_client_credential_and_session_keys():
    conf = iceberg_catalog_conf(
        "c",
        uri="https://lk/catalog",
        warehouse="w",
        credential="id:secret",
        oauth2_server_uri="https://idp/token",
        scope="lakekeeper",
        s3=S3Access(
            endpoint="https://s3", bucket="b", access_key="AK", secret_key="SK", session_token="ST"
        ),
    )

    assert conf["spark.sql.catalog.c.credential"] == "id:secret"
    assert conf["spark.sql.catalog.c.oauth2-server-uri"] == "https://idp/token"
    assert conf["spark.sql.catalog.c.scope"] == "lakekeeper"
    assert "spark.sql.catalog.c.token" not in conf
    assert conf["spark.hadoop.fs.s3a.bucket.b.session.token"] == "ST"
    assert conf["spark.hadoop.fs.s3a.bucket.b.connection.ssl.enabled"] == "true"
    assert conf["spark.hadoop.fs.s3a.bucket.b.aws.credentials.provider"].endswith(
        "TemporaryAWSCredentialsProvider"
    )
    with pytest.raises(ValueError):
        iceberg_catalog_conf(
            "c", uri="https://lk", warehouse="w", token="t", credential="id:secret"
        )


# ------------------------------------------------------------- the Spark host on a CU
@pytest.fixture(scope="module")
def cluster():
    backend = LocalClusterBackend()
    handle = backend.start(
        ClusterSpec(
            cu_id="test-spark", name="spark", cpus_per_node=1, memory_gb_per_node=3, worker_nodes=1
        )
    )
    yield backend, with_spark_host_secret(handle, "test-portal-key")
    pids = cluster_pids(handle)
    backend.terminate(handle)
    assert cluster_pids(handle) == []
    assert not [pid for pid in pids if process_running(pid)]


@pytest.fixture(scope="module")
def host(cluster):
    _, handle = cluster
    client = SparkHostClient(handle, timeout=30)
    started = time.monotonic()
    info = client.bootstrap(executors=2, executor_cores=1, executor_memory="1g")
    info["bootstrap_s"] = round(time.monotonic() - started, 1)
    yield client, info
    client.close()


def test_the_host_is_warm_with_executors_on_both_nodes(cluster, host, capsys):
    backend, handle = cluster
    client, info = host
    node_ids = {node.node_id for node in backend.status(handle).nodes}

    assert info["state"] == "ready", info["error"]
    assert len(info["executors"]) == 2
    assert info["executors_registered"] == 2  # both had registered before the host said warm
    assert {executor["node_id"] for executor in info["executors"]} == node_ids
    with capsys.disabled():
        print(
            f"\n[measure] Spark host bootstrap {info['bootstrap_s']} s "
            f"(RayDP session init {info['session_init_s']} s, first job {info['first_job_s']} s); "
            f"CU RSS with warm Spark {rss_bytes(cluster_pids(handle)) / 2**30:.2f} GiB"
        )


def test_the_units_jvms_start_on_the_one_merged_jar(cluster, host):
    """The driver (which holds RayDP's app master) and both executors: no jar on their class
    paths but the one setup merged (compute/build/class_path_jar.py), whose Spark home the driver's launcher read;
    and log4j's JMX off."""
    _, handle = cluster
    merged = class_path_jar.class_path_jar()
    assert merged is not None, "setup builds it: python -m compute.build.class_archive_build"
    java = [
        argv
        for argv in map(process_argv, cluster_pids(handle))
        if argv and Path(argv[0]).name == "java"
    ]
    mains = [argv[-1] for argv in java]
    assert mains.count("io.ray.runtime.runner.worker.DefaultWorker") == 2  # the two executors
    assert any("SparkSubmit" in " ".join(argv) for argv in java)
    for argv in java:
        class_path = argv[len(argv) - argv[::-1].index("-cp")]  # the last -cp wins
        assert {entry for entry in class_path.split(":") if entry.endswith((".jar", "*"))} <= {
            str(merged),
            f"{merged.parent}/*",
        }, argv
        assert LOG4J_JAVA_OPTIONS in argv  # log4j starts no MBean server in any of them


ANCESTRY = """
import os

def ancestry(_):
    pids, pid = [], os.getpid()
    while pid > 1:
        pids.append(pid)
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
    yield pids

result = spark.sparkContext.parallelize(range(8), 8).mapPartitions(ancestry).collect()
"""


def test_tasks_run_in_executors_on_both_nodes(host):
    client, info = host
    node_of_executor = {executor["pid"]: executor["node_id"] for executor in info["executors"]}

    run = client.wait(client.probe(ANCESTRY, name="ancestry")["run_id"], timeout_s=120)

    assert run["state"] == "COMPLETED", run["error"]
    task_nodes = []
    for ancestors in run["result"]:
        (executor_pid,) = (
            set(ancestors) & node_of_executor.keys()
        )  # each task runs under one executor
        task_nodes.append(node_of_executor[executor_pid])
    assert len(set(task_nodes)) == 2


def test_the_write_path_warm_up_leaves_nothing_an_execution_could_see(host):
    """The host's warm-up write (spark_session.warm_the_write_path) went to a catalog of its own
    session, served in memory by the host itself and stopped after it: the host's session has
    no such catalog, and neither the catalog nor its S3 endpoint still runs."""
    client, info = host
    run = client.wait(
        client.probe(
            "import threading\n"
            "from compute.host.spark_session import WARM_UP_CATALOG\n"
            "result = {'catalog': spark.conf.get('spark.sql.catalog.' + WARM_UP_CATALOG, None),\n"
            "          'servers': sorted({thread.name for thread in threading.enumerate()}\n"
            "                            & {'warm-up-catalog', 'scratch-s3'})}\n"
        )["run_id"]
    )
    assert run["state"] == "COMPLETED", run["error"]
    assert run["result"] == {"catalog": None, "servers": []}
    assert 0 < info["write_warm_up_s"] < info["first_job_s"]
    # The write succeeded: its files went through S3A to the scratch endpoint from the executors on
    # both nodes (a local unit's nodes share one sandbox, and its loopback), and the catalog
    # served the driver's staged create and commit.
    assert info["write_warm_up_error"] is None


class StartingSession:
    """Stands in for the Spark session a host starts: its start, and then its first job, each
    go on until the test lets them end."""

    # The driver and one executor have registered.
    sparkContext = SimpleNamespace(
        applicationId="app-1",
        _jsc=SimpleNamespace(
            sc=lambda: SimpleNamespace(
                statusTracker=lambda: SimpleNamespace(
                    getExecutorInfos=lambda: ["driver", "executor"]
                )
            )
        ),
    )

    def __init__(self) -> None:
        self.starting, self.may_start = threading.Event(), threading.Event()
        self.first_job_runs, self.may_finish = threading.Event(), threading.Event()
        self.jobs = 0

    def start(self, *_args, **_kwargs) -> StartingSession:
        self.starting.set()
        self.may_start.wait(10)
        return self

    def range(self, *_args):
        return self

    def selectExpr(self, *_args):
        return self

    def collect(self) -> list:
        self.jobs += 1
        self.first_job_runs.set()
        self.may_finish.wait(10)
        return []


class RegisteringExecutors:
    """A Spark session whose executors register one more each time the driver is asked."""

    def __init__(self, registering: int) -> None:
        self.asked, self.registering = 0, registering
        tracker = SimpleNamespace(getExecutorInfos=self._infos)
        self.sparkContext = SimpleNamespace(
            _jsc=SimpleNamespace(sc=lambda: SimpleNamespace(statusTracker=lambda: tracker))
        )

    def _infos(self) -> list[str]:
        self.asked += 1
        return [
            "driver",
            *(f"executor-{number}" for number in range(min(self.asked - 1, self.registering))),
        ]


def test_the_warm_up_waits_for_every_executor_or_its_time_or_a_run(monkeypatch):
    """RayDP's scheduler is ready for jobs before any executor has registered: warm means all of
    them have, unless that takes longer than the warm-up waits or a run is already waiting."""
    from compute.host import spark_session

    monkeypatch.setattr(spark_session, "EXECUTORS_POLL_S", 0.001)
    all_come = RegisteringExecutors(registering=3)
    assert spark_session.wait_for_executors(all_come, 3, timeout_s=10) == 3
    assert all_come.asked == 4  # asked until the third had registered, not after

    one_comes = RegisteringExecutors(registering=1)
    began = time.monotonic()
    assert spark_session.wait_for_executors(one_comes, 2, timeout_s=0.2) == 1
    assert 0.2 <= time.monotonic() - began < 5

    run_waits = RegisteringExecutors(registering=0)
    assert (
        spark_session.wait_for_executors(
            run_waits, 2, timeout_s=10, until=lambda: run_waits.asked >= 3
        )
        == 0
    )
    assert run_waits.asked == 3


@pytest.mark.parametrize(
    "run_heard, first_job, write_warmed",
    [
        (None, True, True),  # nothing waits: the host is warmed for a run to come
        ("during the first job", True, False),
        ("while the session starts", False, False),  # the run does both itself, seconds sooner
    ],
)
def test_a_host_told_that_a_run_waits_leaves_out_what_the_run_does_itself(
    monkeypatch, run_heard, first_job, write_warmed
):
    """The host's first job and the write-path warm-up make a later first run faster, but a run
    already waiting would wait for them, and its own first job and write do the same work. The
    host hears of a waiting run in the portal's polls while it starts."""
    from compute.host import spark_host, spark_session

    session, warmed = StartingSession(), []
    monkeypatch.setattr(spark_session, "start_spark_session", session.start)
    monkeypatch.setattr(
        spark_session, "warm_the_write_path", lambda spark, executors: warmed.append(spark)
    )
    monkeypatch.setattr(spark_host, "_resources_used", dict)  # no Ray here
    monkeypatch.setattr(spark_host.SparkSessionHost, "_executors", lambda _host: [])
    host = spark_host.SparkSessionHost(
        SparkHostSettings(port=0, namespace="n", secret_sha256="0" * 64)
    )
    assert session.starting.wait(10)
    assert host.info(run_waiting=run_heard == "while the session starts")["state"] == "warming"
    session.may_start.set()
    if first_job:
        assert session.first_job_runs.wait(10)
        assert host.info(run_waiting=run_heard == "during the first job")["state"] == "warming"
    session.may_finish.set()
    info = host.wait_ready(30)

    assert info["state"] == "ready", info["error"]
    assert session.jobs == first_job
    assert warmed == ([session] if write_warmed else [])
    assert (info["write_warm_up_s"] is not None) == write_warmed


def test_an_iceberg_table_is_written_and_read_through_the_jars(host, tmp_path):
    client, _ = host
    code = f"""
from compute.host.spark_session import apply_conf, iceberg_catalog_conf
apply_conf(spark, iceberg_catalog_conf("local", warehouse={(tmp_path / "warehouse").as_uri()!r}))
spark.sql("CREATE NAMESPACE IF NOT EXISTS local.demo")
spark.sql("CREATE TABLE local.demo.numbers (id BIGINT, square BIGINT) USING iceberg")
spark.range(1, 6).selectExpr("id", "id * id AS square").writeTo("local.demo.numbers").append()
import pathlib
result = {{
    "rows": [list(row) for row in spark.table("local.demo.numbers").orderBy("id").collect()],
    "snapshots": spark.table("local.demo.numbers.snapshots").count(),
    # Seen from the unit (a local unit's sandbox has a /tmp of its own).
    "metadata_files": len(list(pathlib.Path({str(tmp_path / "warehouse" / "demo" / "numbers" / "metadata")!r}).glob("*.metadata.json"))),
}}
"""
    run = client.wait(client.probe(code, name="iceberg")["run_id"], timeout_s=180)

    assert run["state"] == "COMPLETED", run["error"]
    rows, snapshots, metadata_files = (
        run["result"][key] for key in ("rows", "snapshots", "metadata_files")
    )
    assert (rows, snapshots) == ([[i, i * i] for i in range(1, 6)], 1)
    assert metadata_files >= 1, "the table's metadata should be on disk where the catalog says"


def test_a_failing_execution_reports_its_error(host):
    client, _ = host

    run = client.wait(client.probe("spark.sql('SELECT * FROM no_such_table').collect()")["run_id"])

    assert run["state"] == "FAILED"
    assert "no_such_table" in run["error"]


def test_cancel_stops_a_running_execution(host):
    client, _ = host
    code = "import time\nspark.sparkContext.parallelize(range(2), 2).map(lambda x: time.sleep(120)).count()"
    run_id = client.probe(code, name="sleeper")["run_id"]
    deadline = time.monotonic() + 30
    while client.run(run_id)["state"] != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(1)  # let the job's tasks start

    cancelled_at = time.monotonic()
    client.cancel(run_id)
    run = client.wait(run_id, timeout_s=60)

    assert run["state"] == "CANCELLED"
    assert time.monotonic() - cancelled_at < 20
    # The executors are free again: a new execution runs to completion.
    assert client.wait(client.probe("result = spark.range(10).count()")["run_id"])["result"] == 10


def test_a_cancel_that_comes_before_the_runs_next_job_stops_that_job_too(host):
    """Spark cancels only the jobs running at that moment; the host keeps cancelling the run's
    job group until the run has stopped."""
    client, _ = host
    code = (
        "import time\ntime.sleep(2)\n"
        "spark.sparkContext.parallelize(range(2), 2).map(lambda x: time.sleep(120)).count()"
    )
    run_id = client.probe(code, name="late job")["run_id"]
    deadline = time.monotonic() + 30
    while client.run(run_id)["state"] != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.1)

    cancelled_at = time.monotonic()
    client.cancel(run_id)  # while the run sleeps, before it submits its job
    run = client.wait(run_id, timeout_s=60)

    assert run["state"] == "CANCELLED"
    assert time.monotonic() - cancelled_at < 20


def test_a_status_request_may_wait_for_the_run_to_end(host):
    client, _ = host
    run_id = client.probe("import time\ntime.sleep(1.5)\nresult = 'slept'")["run_id"]

    early = client.run(run_id, wait_s=0.3)  # not over yet: answered after the wait
    assert early["state"] in ("QUEUED", "RUNNING")
    asked = time.monotonic()
    ended = client.run(run_id, wait_s=30)  # answered when the run ends, long before 30 s
    assert ended["state"] == "COMPLETED" and ended["result"] == "slept"
    assert time.monotonic() - asked < 10
    with pytest.raises(SparkHostError, match="400"):
        client._call("GET", f"/runs/{run_id}", params={"wait_s": "soon"})


def test_the_host_api_demands_the_hosts_own_secret(cluster, host):
    _, handle = cluster
    url = f"{handle.spark_host_url}/v1/host"

    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert (
        httpx.get(url, headers=handle.auth_headers()).status_code == 401
    )  # the Ray token opens nothing here
    assert (
        httpx.post(f"{handle.spark_host_url}/v1/runs", json={"code": "result = 1"}).status_code
        == 401
    )
    # Not even the secret itself opens it: requests are signed with its digest, never carry it.
    assert (
        httpx.get(url, headers={"Authorization": f"Bearer {handle.spark_host_secret}"}).status_code
        == 401
    )
    key, nonce = secret_digest(handle.spark_host_secret), host_auth.new_nonce()
    signed = httpx.get(
        url, headers={"Authorization": host_auth.sign_request(key, "GET", "/v1/host", b"", nonce)}
    )
    assert signed.status_code == 200
    host_auth.verify_response(
        key, nonce, 200, signed.content, signed.headers[host_auth.PROOF_HEADER]
    )
    replayed = httpx.get(
        url, headers={"Authorization": host_auth.sign_request(key, "GET", "/v1/host", b"", nonce)}
    )
    assert replayed.status_code == 401 and "replayed" in replayed.text


def test_the_host_is_started_without_its_secret_on_any_command_line(cluster, host):
    """The Jobs API entrypoint is visible to any code on the cluster: it carries a digest only."""
    from ray.job_submission import JobSubmissionClient

    _, handle = cluster
    jobs = JobSubmissionClient(handle.dashboard_url, headers=handle.auth_headers()).list_jobs()
    entrypoints = [job.entrypoint for job in jobs if "start_spark_host" in job.entrypoint]

    assert entrypoints and all(
        handle.spark_host_secret not in entrypoint for entrypoint in entrypoints
    )
    assert all(handle.spark_host_namespace in entrypoint for entrypoint in entrypoints)


def test_the_hosts_jvms_start_from_the_class_archive(cluster, host):
    """The driver and the executors (Ray Java workers) map the archive setup built: they
    validated it (same class path, same jars). Each maps it where it was dumped, not relocated to
    an address of its own (which would give each JVM a private copy of every page)."""
    _, handle = cluster
    archive = str(class_archive.archive_path())
    running = _unit_jvms(handle)
    jvms, mapped_at = [], set()
    for pid, argv in running.items():
        try:
            maps = [
                line
                for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                if line.endswith(archive)
            ]
        except (FileNotFoundError, ProcessLookupError):
            continue
        jvms.append((argv[-1], bool(maps)))
        if (
            maps
        ):  # the archive's largest region (its classes; smaller ones hold objects in the heap)
            ranges = [[int(part, 16) for part in line.split()[0].split("-")] for line in maps]
            mapped_at.add(max(ranges, key=lambda span: span[1] - span[0])[0])
    main_classes = [main for main, _ in jvms]
    # No launcher JVM of RayDP's and no app master's: the driver's JVM (pyspark's gateway) holds it.
    assert "org.apache.spark.deploy.raydp.AppMasterEntryPoint" not in main_classes, jvms
    assert main_classes.count("pyspark-shell") == 1, jvms
    assert main_classes.count("io.ray.runtime.runner.worker.DefaultWorker") == 2, (
        jvms
    )  # the two executors
    assert all(mapped for _, mapped in jvms), jvms
    assert len(mapped_at) == 1, mapped_at
    # And each found most of what it loaded there: before the archive was trained on a RayDP
    # session, a quarter to a third of each JVM's classes were parsed and verified at its start.
    for pid in running:
        shared, parsed = _classes_loaded(pid)
        assert parsed < 0.2 * (shared + parsed), (pid, shared, parsed)


def _unit_jvms(handle) -> dict[int, list[str]]:
    """The unit's Java processes: pid -> command line."""
    jvms = {}
    for pid in cluster_pids(handle):
        if (arguments := process_argv(pid)) and arguments[0].endswith("java"):
            jvms[pid] = arguments
    return jvms


def _classes_loaded(pid: int) -> tuple[int, int]:
    """The JVM's own counters: classes it took from the class archive, and those it parsed."""
    counters = subprocess.run(
        ["jcmd", str(pid), "PerfCounter.print"], capture_output=True, text=True, timeout=60
    )
    values = dict(line.split("=", 1) for line in counters.stdout.splitlines() if "=" in line)
    return int(values["java.cls.sharedLoadedClasses"]), int(values["java.cls.loadedClasses"])


def test_only_the_units_driver_compiles_with_c1_alone(cluster, host):
    """The unit's driver plans and commits, its executors run the tasks: the driver leaves out C2
    (`DRIVER_JIT_JAVA_OPTIONS`), the executors do not, and neither does the
    configuration a local-mode session takes (`spark_conf`), whose driver runs tasks too."""
    _, handle = cluster
    options = {}
    for argv in _unit_jvms(handle).values():
        options.setdefault(argv[-1], []).append(DRIVER_JIT_JAVA_OPTIONS in argv)
    assert options["pyspark-shell"] == [True]
    assert options["io.ray.runtime.runner.worker.DefaultWorker"] and not any(
        options["io.ray.runtime.runner.worker.DefaultWorker"]
    )
    assert DRIVER_JIT_JAVA_OPTIONS not in " ".join(spark_conf().values())


def test_the_host_process_is_not_dumpable(host):
    """Other same-user processes cannot ptrace it or read its /proc/<pid>/mem and environ."""
    client, _ = host
    code = "import ctypes\nresult = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)"  # PR_GET_DUMPABLE

    assert client.wait(client.probe(code)["run_id"])["result"] == 0


def test_the_host_launcher_waits_for_the_heads_gcs_to_answer_before_asking_it(monkeypatch):
    """A local unit starts the launcher together with its head node, so the GCS may not listen
    yet: the launcher polls its port, then asks it for a live node (never before it answers)."""
    import socket

    import ray._raylet

    from compute.host import start_spark_host

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    asked = []

    class Gcs:
        def __init__(self, address: str) -> None:
            assert listening.is_set(), "asked the GCS before its port answered"
            self.address = address

        def get_all_node_info(self, timeout, state_filter):
            asked.append(self.address)
            return (
                {"node": object()} if len(asked) > 1 else {}
            )  # its raylet registers a moment later

    monkeypatch.setattr(ray._raylet, "GcsClient", Gcs)
    listening = threading.Event()

    def gcs_comes_up() -> None:
        time.sleep(0.4)
        server = socket.create_server(("127.0.0.1", port))
        listening.set()
        time.sleep(2)
        server.close()

    threading.Thread(target=gcs_comes_up, daemon=True).start()
    started = time.monotonic()
    start_spark_host._wait_for_a_live_node(f"127.0.0.1:{port}")
    assert 0.4 <= time.monotonic() - started < 2 and asked == [f"127.0.0.1:{port}"] * 2


def test_the_host_launcher_leaves_an_address_that_is_not_host_and_port_to_ray(monkeypatch):
    import ray._raylet

    from compute.host import start_spark_host

    def refuse(address: str):
        raise ConnectionError(f"no GCS at {address}")

    monkeypatch.setattr(ray._raylet, "GcsClient", refuse)
    started = time.monotonic()
    for address in ("auto", "ray://cluster", "localhost"):
        start_spark_host._wait_for_a_live_node(address)  # ray.init reports what is wrong
    assert time.monotonic() - started < 1
