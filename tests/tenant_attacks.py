"""Attacks a tenant's PySpark step tries from inside the compute unit it runs on, and the checks
that each failed. Independent of the unit's kind, so the same step can run on any kind.

`attack_step(targets)` is a workflow step: `run(spark)` returns a DataFrame of
(attempt, outcome, detail), outcome "failed" or "succeeded". `breaches(rows, secrets)` lists
what got through. Targets (all optional but `secrets_hint`):
    portal_pid, catalog_pid: host pids whose environment must stay unreadable. A unit has its own
        pid namespace, where the same number may name one of the unit's own processes, so what
        such a read returns is checked (see `target_environs`), not whether it returned;
    database_dsn: the portal's database (psycopg); sqlite_file: a SQLite database by path;
    private_paths: files or dirs of the portal's side (the stack's var dir, the checkout);
    other_token_file: another unit's Ray token; other_ports: another unit's loopback ports;
    shared_code: files every unit's JVMs load (the jars, the class archive), never writable;
    other_warehouse: another user's warehouse, tried with this execution's catalog token.
"""

from __future__ import annotations

import json

_STEP = """
import json, os

TARGETS = json.loads(%r)


def _attempts():
    yield "environment", lambda: json.dumps(dict(os.environ))
    yield "import app", lambda: __import__("app").__file__
    for label in ("portal_pid", "catalog_pid"):
        if TARGETS.get(label):
            yield f"environ of {label}", lambda pid=TARGETS[label]: open(f"/proc/{pid}/environ").read()

    def every_environ():
        environs = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                entries = open(f"/proc/{pid}/environ").read().split("\\0")
            except OSError:
                continue
            environs[pid] = dict(entry.split("=", 1) for entry in entries if "=" in entry)
        return json.dumps(environs)
    yield "environ of every visible process", every_environ
    if TARGETS.get("database_dsn"):
        def database():
            import psycopg
            with psycopg.connect(TARGETS["database_dsn"], connect_timeout=3) as connection:
                return connection.execute("SELECT count(*) FROM information_schema.tables").fetchone()
        yield "database by DSN", database
    if TARGETS.get("sqlite_file"):
        def sqlite():
            import sqlite3
            connection = sqlite3.connect(f"file:{TARGETS['sqlite_file']}?mode=ro", uri=True)
            return connection.execute("SELECT name FROM sqlite_master").fetchall()
        yield "database by file", sqlite
    for path in TARGETS.get("private_paths", []):
        yield f"read {path}", lambda path=path: os.listdir(path) if os.path.isdir(path) else open(path).read(200)
    if TARGETS.get("other_token_file"):
        yield "other unit's token", lambda: open(TARGETS["other_token_file"]).read()
    for path in TARGETS.get("shared_code", []):
        # Opened for appending, nothing written: a sandbox that failed would leave it unchanged.
        yield f"open {path} for writing", lambda path=path: open(path, "ab").close()
    for port in TARGETS.get("other_ports", []):
        def call(port=port):
            import urllib.request
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=3).status
        yield f"other unit's port {port}", call
    if TARGETS.get("other_warehouse"):
        def other_warehouse():
            import urllib.parse, urllib.request
            # The run's session holds its warehouse's catalog, token included, as the current catalog.
            catalog = spark.catalog.currentCatalog()
            token = spark.conf.get(f"spark.sql.catalog.{catalog}.token")
            uri = spark.conf.get(f"spark.sql.catalog.{catalog}.uri")
            query = urllib.parse.urlencode({"warehouse": TARGETS["other_warehouse"]})
            request = urllib.request.Request(f"{uri}/v1/config?{query}", headers={"Authorization": f"Bearer {token}"})
            return urllib.request.urlopen(request, timeout=5).status
        yield "other warehouse with the execution's token", other_warehouse


def run(spark):
    globals()["spark"] = spark
    rows = []
    for attempt, action in _attempts():
        try:
            rows.append((attempt, "succeeded", str(action())))
        except BaseException as error:
            rows.append((attempt, "failed", f"{type(error).__name__}: {error}"))
    return spark.createDataFrame(rows, "attempt string, outcome string, detail string")
"""


def attack_step(targets: dict, name: str = "attacks") -> dict:
    return {"name": name, "kind": "python", "output": True, "code": _STEP % json.dumps(targets)}


# Reading its own environment, and those of the processes it can see, is allowed; what they hold
# is checked instead. So is what a pid-namespaced read of the portal's or catalog's pid returned.
ALLOWED_TO_SUCCEED = {
    "environment",
    "environ of every visible process",
    "environ of portal_pid",
    "environ of catalog_pid",
}
# The only portal setting a unit's processes get (where the Spark jars are).
ALLOWED_LAKEPORT_VARIABLES = {"LAKEPORT_JARS_DIR"}


def breaches(rows: list[dict], secrets: list[str]) -> list[str]:
    """What an attack step reached that it must not have, as readable lines (empty: none)."""
    found = []
    for row in rows:
        if row["outcome"] != "failed" and row["attempt"] not in ALLOWED_TO_SUCCEED:
            found.append(f"{row['attempt']} succeeded: {row['detail'][:300]}")
        found += [
            f"{row['attempt']} revealed a secret"
            for secret in secrets
            if secret and secret in row["detail"]
        ]
        if row["outcome"] != "succeeded":
            continue
        if row["attempt"] == "environment":
            found += [
                f"environment has {name}" for name in _portal_variables(json.loads(row["detail"]))
            ]
        if row["attempt"] == "environ of every visible process":
            for pid, environ in json.loads(row["detail"]).items():
                found += [f"process {pid} has {name}" for name in _portal_variables(environ)]
    return found


def _portal_variables(environ: dict) -> list[str]:
    return sorted(
        name
        for name in environ
        if name.startswith("LAKEPORT_") and name not in ALLOWED_LAKEPORT_VARIABLES
    )


def target_environs(targets: dict) -> list[str]:
    """The environments of the targeted portal-side processes, as the portal's side reads them: a
    step that read any of them whole has reached that process, so they count as secrets."""
    environs = []
    for label in ("portal_pid", "catalog_pid"):
        if targets.get(label):
            with open(f"/proc/{targets[label]}/environ") as environ:
                environs.append(environ.read())
    return environs
