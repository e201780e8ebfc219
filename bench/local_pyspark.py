"""What a user would run instead of Lakeport: plain PySpark in `local[N]` mode on this machine,
no Ray and no RayDP, bound to the same warehouse's catalog the way an execution binds it
(compute.host.catalog_cache: the catalog's token, the storage keys it vends, Iceberg's REST catalog
over S3A, the same jars and Spark settings as a compute unit's session).

`LocalPySpark` runs it in a child process (a JVM of its own, as a user's script would have) and
times statements on request, so that the benchmarks can interleave them with runs through
Lakeport. The child speaks JSON lines: it prints `{"session_start_s": ...}` once its session is
up, then answers each `{"sql", "table", "repeats"}` read from stdin with `{"seconds": [...]}`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from app.config import PROJECT_ROOT


class LocalPySpark:
    """A plain `local[cores]` PySpark session in a child process; a context manager."""

    def __init__(
        self,
        *,
        cores: int,
        memory: str,
        catalog: dict,
        warehouse_id: str,
        vended_from: str,
        log_path,
    ) -> None:
        self.args = {
            "cores": cores,
            "memory": memory,
            "catalog": catalog,
            "warehouse_id": warehouse_id,
            "vended_from": vended_from,
        }
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.session_start_s: float | None = None

    def __enter__(self) -> LocalPySpark:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.local_pyspark"],
            cwd=PROJECT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )
        log.close()
        self._send(self.args)
        self.session_start_s = self._receive()["session_start_s"]
        return self

    def __exit__(self, *_exc) -> None:
        if self.process is not None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def time(self, sql: str, table: str, repeats: int = 1) -> list[float]:
        """Seconds of each of `repeats` runs of `sql` written to `table` (createOrReplace)."""
        self._send({"sql": sql, "table": table, "repeats": repeats})
        return self._receive()["seconds"]

    def _send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def _receive(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(
                f"plain PySpark ended (exit code {self.process.wait()}); see {self.log_path}"
            )
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"plain PySpark failed: {answer['error']}")
        return answer


def _main() -> None:
    """The child: start `local[cores]`, bind the catalog, then time what stdin asks for."""
    args = json.loads(sys.stdin.readline())
    started = time.perf_counter()
    session = _session(args)
    print(json.dumps({"session_start_s": round(time.perf_counter() - started, 2)}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        seconds = []
        try:
            for _ in range(request["repeats"]):
                began = time.perf_counter()
                session.sql(request["sql"]).writeTo(request["table"]).using(
                    "iceberg"
                ).createOrReplace()
                seconds.append(time.perf_counter() - began)
        except Exception as error:  # reported to the parent, which stops the benchmark
            print(json.dumps({"error": f"{type(error).__name__}: {error}"}), flush=True)
            continue
        print(json.dumps({"seconds": seconds}), flush=True)


def _session(args: dict):
    from pyspark.sql import SparkSession

    from compute.host.catalog_cache import CatalogAccess, CatalogCache
    from compute.host.spark_session import spark_conf
    from compute.run.iceberg_rest import rest_catalog

    catalog = args["catalog"]
    vended = rest_catalog(
        "plain-pyspark", catalog["uri"], catalog["warehouse"], catalog["token"]
    ).load_table(args["vended_from"])
    binding = CatalogCache().binding(
        args["warehouse_id"],
        CatalogAccess.vended(
            catalog["uri"], catalog["warehouse"], catalog["token"], vended.io.properties
        ),
    )
    builder = SparkSession.builder.master(f"local[{args['cores']}]").appName("plain-pyspark")
    # In local mode the driver is the executor: it gets the memory a unit's executor gets.
    for key, value in {
        **spark_conf(),
        "spark.driver.memory": args["memory"],
        **binding.conf,
    }.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.catalog.setCurrentCatalog(binding.catalog_name)
    return session


if __name__ == "__main__":
    _main()
