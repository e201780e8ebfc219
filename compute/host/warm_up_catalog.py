"""An Iceberg REST catalog on the unit's loopback that serves the Spark host's warm-up only
(spark_session.warm_the_write_path), so that the first execution does not pay for the driver's
first REST catalog calls: Iceberg's REST client, its HTTP client and JSON parsers, a staged
create and its commit. Before any execution the unit holds no token for a real catalog.

It keeps its tables in memory and builds their metadata with pyiceberg as a catalog server
would, from the requests Spark sends; their files go to the scratch S3 endpoint
(compute/host/scratch_s3.py), which drops them when the warm-up ends. It answers the calls of the
Iceberg REST spec that an execution's write makes: config, namespaces, table exists, load,
create (staged or not), commit, drop. It is stopped after the warm-up and lives in the unit,
whose loopback only the unit's own processes share.
"""

from __future__ import annotations

import json
import re
import threading

from compute.host.loopback_server import LoopbackHandler, LoopbackServer

MAX_REQUEST_BYTES = 1 << 20
_TABLE_PATH = re.compile(r"^/v1/namespaces/([^/]+)/tables/([^/]+)$")
_TABLES_PATH = re.compile(r"^/v1/namespaces/([^/]+)/tables$")
_NAMESPACE_PATH = re.compile(r"^/v1/namespaces/([^/]+)$")


class _State:
    def __init__(self, location: str) -> None:
        self.location = location  # where tables are placed: an s3a:// URI of the scratch endpoint
        self.lock = threading.Lock()
        self.namespaces: set[str] = set()
        self.tables: dict[
            tuple[str, str], tuple[str, object]
        ] = {}  # -> (metadata location, TableMetadata)


class _WarmUpCatalogHandler(LoopbackHandler):
    state: _State

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if (
            length > MAX_REQUEST_BYTES
        ):  # the warm-up's requests are a few KB; nothing else is served
            self.close_connection = True
            return self._reply(
                413, _error(413, "BadRequestException", "request too large for the warm-up catalog")
            )
        body = json.loads(self.rfile.read(length)) if length else {}
        path = self.path.split("?", 1)[0]
        from pyiceberg.exceptions import CommitFailedException

        try:
            with self.state.lock:
                status, answer = self._route(self.command, path, body)
        except CommitFailedException as error:  # a requirement of the commit did not hold
            status, answer = 409, _error(409, "CommitFailedException", str(error))
        except (
            Exception
        ) as error:  # a request this catalog cannot serve fails the warm-up, not the host
            status, answer = (
                400,
                _error(400, "BadRequestException", f"{type(error).__name__}: {error}"),
            )
        self._reply(status, answer)

    do_GET = do_HEAD = do_POST = do_DELETE = _dispatch

    def _route(self, method: str, path: str, body: dict) -> tuple[int, dict | None]:
        state = self.state
        if path == "/v1/config":
            return 200, {"defaults": {}, "overrides": {}}
        if path == "/v1/namespaces":
            if method == "POST":
                state.namespaces.add(_namespace(body["namespace"]))
                return 200, {"namespace": body["namespace"], "properties": {}}
            return 200, {"namespaces": [[name] for name in sorted(state.namespaces)]}
        if match := _NAMESPACE_PATH.match(path):
            namespace = match[1]
            if namespace not in state.namespaces:
                return 404, _error(
                    404, "NoSuchNamespaceException", f"Namespace does not exist: {namespace}"
                )
            if method == "DELETE":
                state.namespaces.discard(namespace)
                return 204, None
            return 200, {"namespace": [namespace], "properties": {}}
        if match := _TABLES_PATH.match(path):
            namespace = match[1]
            if method == "POST":
                return self._create(namespace, body)
            return 200, {
                "identifiers": [
                    {"namespace": [ns], "name": name}
                    for ns, name in sorted(state.tables)
                    if ns == namespace
                ]
            }
        if path.endswith("/metrics") and method == "POST":
            return 204, None  # the client's report of a commit or scan, which a catalog may keep
        if match := _TABLE_PATH.match(path):
            key = (match[1], match[2])
            if method == "POST":
                return self._commit(key, body)
            if key not in state.tables:
                return 404, _error(
                    404, "NoSuchTableException", f"Table does not exist: {'.'.join(key)}"
                )
            if method == "DELETE":
                del state.tables[key]
                return 204, None
            if method == "HEAD":
                return 204, None
            return 200, _loaded(*state.tables[key])
        return 404, _error(
            404, "NotFoundException", f"Not served by the warm-up catalog: {method} {path}"
        )

    def _create(self, namespace: str, body: dict) -> tuple[int, dict]:
        from pyiceberg.partitioning import PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.table.metadata import new_table_metadata
        from pyiceberg.table.sorting import SortOrder

        key = (namespace, body["name"])
        if key in self.state.tables:
            return 409, _error(
                409, "AlreadyExistsException", f"Table already exists: {'.'.join(key)}"
            )
        metadata = new_table_metadata(
            schema=Schema.model_validate(body["schema"]),
            partition_spec=PartitionSpec.model_validate(
                body.get("partition-spec") or {"fields": []}
            ),
            sort_order=SortOrder.model_validate(
                body.get("write-order") or {"order-id": 0, "fields": []}
            ),
            location=body.get("location") or f"{self.state.location}/{namespace}/{body['name']}",
            properties=body.get("properties") or {},
        )
        location = f"{metadata.location}/metadata/00000.metadata.json"
        if not body.get("stage-create"):
            self.state.tables[key] = (location, metadata)
        return 200, _loaded(location, metadata)

    def _commit(self, key: tuple[str, str], body: dict) -> tuple[int, dict]:
        from pyiceberg.catalog import MetastoreCatalog
        from pyiceberg.table import CommitTableRequest
        from pyiceberg.table.update import update_table_metadata

        # The spec makes the identifier optional here, since the path names the table.
        request = CommitTableRequest.model_validate(
            {"identifier": {"namespace": [key[0]], "name": key[1]}, **body}
        )
        current = self.state.tables.get(key)
        for requirement in request.requirements:
            requirement.validate(current[1] if current else None)
        metadata = update_table_metadata(
            base_metadata=current[1] if current else MetastoreCatalog._empty_table_metadata(),
            updates=request.updates,
            enforce_validation=current is None,
        )
        version = int(current[0].rsplit("/", 1)[1].split(".", 1)[0]) + 1 if current else 0
        location = f"{metadata.location}/metadata/{version:05d}.metadata.json"
        self.state.tables[key] = (location, metadata)
        return 200, {
            "metadata-location": location,
            "metadata": json.loads(metadata.model_dump_json()),
        }

    def _reply(self, status: int, answer: dict | None) -> None:
        body = json.dumps(answer).encode() if answer is not None and self.command != "HEAD" else b""
        self._answer(status, body, {"Content-Type": "application/json"} if body else None)


def _namespace(levels: list[str]) -> str:
    return "\x1f".join(levels)  # the REST spec's separator for a multi-level namespace in a path


def _loaded(location: str, metadata) -> dict:
    return {
        "metadata-location": location,
        "metadata": json.loads(metadata.model_dump_json()),
        "config": {},
    }


def _error(code: int, kind: str, message: str) -> dict:
    return {"error": {"message": message, "type": kind, "code": code}}


class WarmUpCatalog(LoopbackServer):
    """`with WarmUpCatalog(location) as uri:` an Iceberg REST catalog at http://127.0.0.1:<port>
    whose tables are placed under `location`, until the block ends."""

    def __init__(self, location: str) -> None:
        super().__init__(
            type("Handler", (_WarmUpCatalogHandler,), {"state": _State(location.rstrip("/"))}),
            "warm-up-catalog",
        )
