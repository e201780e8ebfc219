"""VendedCredentialsFileIO (compute/java/) in a JVM of its own, without Spark: a table's FileIO as
Iceberg's REST catalog makes it (its storage credential, the catalog's `uri` and `token`), and a
copy of it as Spark's tasks get it (Java-serialized). Each gives S3A the table's keys, and renews
them through the credential's `client.refresh-credentials-endpoint`, with the run's bearer token,
once fewer than 5 minutes remain; never before. And tasks first using a file system made for new
credentials together all get them (FirstUseCheck, CredentialKeyedS3AFileSystem)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyspark
import pytest

from compute.build.jars import ICEBERG_SPARK_RUNTIME, jar_paths, jars_dir

CHECK = Path(__file__).parent / "java" / "RenewalCheck.java"
FIRST_USE_CHECK = Path(__file__).parent / "java" / "FirstUseCheck.java"
RENEWED_EXPIRY_S = 3600


@pytest.fixture(scope="module")
def classpath(tmp_path_factory) -> str:
    if shutil.which("javac") is None:
        pytest.skip("javac (a JDK) is needed")
    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    jars = [
        *jar_paths(),
        *pyspark_jars.glob("hadoop-client-*.jar"),
        *pyspark_jars.glob("slf4j-api-*.jar"),
        *pyspark_jars.glob("commons-*.jar"),
    ]
    assert jars_dir() / ICEBERG_SPARK_RUNTIME.file_name in jars
    classes = tmp_path_factory.mktemp("renewal-check")
    path = ":".join(map(str, jars))
    subprocess.run(
        ["javac", "-nowarn", "-d", str(classes), "-cp", path, str(CHECK), str(FIRST_USE_CHECK)],
        check=True,
    )
    return f"{classes}:{path}"


class Catalog(ThreadingHTTPServer):
    """loadCredentials of one table, recording who asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

        catalog = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                catalog.calls.append((self.path, self.headers.get("Authorization")))
                body = json.dumps(
                    {
                        "storage-credentials": [
                            {
                                "prefix": "s3://bucket/ns/t",
                                "config": {
                                    "s3.access-key-id": "RENEWED",
                                    "s3.secret-access-key": "renewed-secret",
                                    "s3.session-token": "renewed-token",
                                    "s3.session-token-expires-at-ms": str(
                                        int((time.time() + RENEWED_EXPIRY_S) * 1000)
                                    ),
                                },
                            }
                        ]
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/catalog"


@pytest.fixture
def catalog():
    server = Catalog()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def check(classpath: str, catalog: Catalog, expires_in_s: float, mode: str) -> dict[str, list[str]]:
    expires_at_ms = int((time.time() + expires_in_s) * 1000)
    answer = subprocess.run(
        ["java", "-cp", classpath, "RenewalCheck", catalog.uri, str(expires_at_ms), mode],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert answer.returncode == 0, answer.stderr
    return {line.split()[0]: line.split()[1:] for line in answer.stdout.splitlines()}


def test_keys_with_time_left_are_used_as_vended_on_the_driver_and_in_tasks(classpath, catalog):
    seen = check(classpath, catalog, expires_in_s=3600, mode="driver")
    assert seen["driver"][0] == "FIRST" and seen["driver"][2] == "0"
    assert seen["task"][:3] == [
        "FIRST",
        "first-token",
        "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    ]
    assert seen["task"][3] == "0"
    assert catalog.calls == []  # a warm run pays no credential call


def test_keys_near_their_expiry_are_renewed_by_the_driver_with_the_runs_token(classpath, catalog):
    seen = check(classpath, catalog, expires_in_s=120, mode="driver")
    assert seen["driver"][0] == "RENEWED" and seen["driver"][2] == "1"
    # The renewed expiry goes to S3A's settings: CredentialKeyedS3AFileSystem closes the set after it.
    assert abs(int(seen["driver"][1]) / 1000 - (time.time() + RENEWED_EXPIRY_S)) < 60
    assert seen["task"][:2] == ["RENEWED", "renewed-token"]  # the task got the renewed keys
    assert catalog.calls == [
        ("/catalog/v1/wh/namespaces/ns/tables/t/credentials", "Bearer the-runs-token")
    ]


def test_a_task_renews_keys_that_near_their_expiry_itself(classpath, catalog):
    seen = check(classpath, catalog, expires_in_s=120, mode="task")
    assert "driver" not in seen
    assert seen["task"] == [
        "RENEWED",
        "renewed-token",
        "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
        "1",
    ]
    assert catalog.calls == [
        ("/catalog/v1/wh/namespaces/ns/tables/t/credentials", "Bearer the-runs-token")
    ]


def test_a_failed_renewal_keeps_the_keys_in_hand(classpath, catalog):
    catalog.shutdown()
    catalog.server_close()  # nothing answers at the endpoint now
    seen = check(classpath, catalog, expires_in_s=120, mode="driver")
    assert seen["driver"][0] == "FIRST" and seen["driver"][2] == "0"


def test_tasks_first_using_new_session_credentials_together_all_get_them(classpath):
    """A write's tasks make the first requests of the file system made for their table's new
    credentials at once. S3A's session-credentials provider (Hadoop 3.3.1) answers "has no
    credentials" to a thread asking while another makes them: the plain S3AFileSystem shows it
    (about 5% of the asks here), and the file systems CredentialKeyedS3AFileSystem hands out,
    whose credentials are made before anyone gets them, never do."""
    answer = subprocess.run(
        ["java", "-cp", classpath, "FirstUseCheck"], capture_output=True, text=True, timeout=120
    )
    assert answer.returncode == 0, answer.stderr
    failed = {
        way: (int(failures), int(asks))
        for way, failures, asks in (line.split() for line in answer.stdout.splitlines())
    }
    assert failed["plain"][0] > 0, failed  # the race is there to be guarded against
    assert failed["keyed"] == (0, failed["keyed"][1]), failed
