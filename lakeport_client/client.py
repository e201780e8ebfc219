"""A thin client of Lakeport's API: one method per operation of /api/v1/openapi.json, JSON in
and out, errors raised as ApiError with the problem document's words."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

API = "/api/v1"
# A read answered 429 is asked again after the Retry-After the API names (at most this long),
# a few times; a change is never sent twice.
RATE_LIMITED_RETRIES = 3
LONGEST_RETRY_AFTER_S = 60


class ApiError(Exception):
    """The API refused a call; `status`, `detail` and `field` come from its problem document."""

    def __init__(self, status: int, detail: str, field: str | None = None) -> None:
        super().__init__(f"{status}: {detail}" + (f" (field {field})" if field else ""))
        self.status, self.detail, self.field = status, detail, field


class Client:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + API,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "lakeport-client"},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the wire ---------------------------------------------------------------------------

    def _send(
        self, method: str, path: str, *, stream: bool = False, **request: Any
    ) -> httpx.Response:
        """The API's answer; a read answered 429 is asked again (RATE_LIMITED_RETRIES), and an
        error is raised as ApiError. A streamed answer is returned open: its caller closes it."""
        for attempt in range(RATE_LIMITED_RETRIES + 1):
            response = self._http.send(
                self._http.build_request(method, path, **request), stream=stream
            )
            if response.status_code != 429 or method != "GET" or attempt == RATE_LIMITED_RETRIES:
                break
            response.close()
            time.sleep(_retry_after(response))
        if response.status_code >= 400:
            try:
                response.read()
            finally:
                response.close()
            raise _error(response)
        return response

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict | None = None,
        headers: dict | None = None,
    ) -> Any:
        return self._send(method, path, json=json, params=params, headers=headers).json()

    def _all(self, path: str) -> list[dict]:
        """Every item of a paged list, following its cursors."""
        items, cursor = [], None
        while True:
            page = self._call(
                "GET", path, params={"limit": 100, **({"cursor": cursor} if cursor else {})}
            )
            items += page["items"]
            if not (cursor := page["next_cursor"]):
                return items

    def revoke_token(self) -> None:
        """Revoke the token this client calls with."""
        self._send("POST", "/tokens/current/revoke")

    # --- warehouses ---------------------------------------------------------------------------

    def warehouses(self) -> list[dict]:
        return self._all("/warehouses")

    def warehouse(self, warehouse_id: int) -> dict:
        return self._call("GET", f"/warehouses/{warehouse_id}")

    def test_connection(self, **storage) -> dict:
        return self._call("POST", "/warehouses/test-connection", json=storage)

    def register_warehouse(self, **storage) -> dict:
        return self._call("POST", "/warehouses", json=storage)

    def archive_warehouse(self, warehouse_id: int) -> dict:
        return self._call("POST", f"/warehouses/{warehouse_id}/archive")

    def purge_warehouse(self, warehouse_id: int, confirm_name: str) -> dict:
        return self._call(
            "POST", f"/warehouses/{warehouse_id}/purge", json={"confirm_name": confirm_name}
        )

    def tables(self, warehouse_id: int) -> list[dict]:
        return self._call("GET", f"/warehouses/{warehouse_id}/tables")

    def table(self, warehouse_id: int, name: str) -> dict:
        return self._call("GET", f"/warehouses/{warehouse_id}/tables/{name}")

    # --- a table's health, maintenance and publishes (`name` is namespace.table) ---------------

    def table_health(self, warehouse_id: int, name: str) -> dict:
        return self._call("GET", f"/warehouses/{warehouse_id}/tables/{name}/health")

    def table_policy(self, warehouse_id: int, name: str) -> dict:
        return self._call("GET", f"/warehouses/{warehouse_id}/tables/{name}/policy")

    def set_table_policy(
        self,
        warehouse_id: int,
        name: str,
        *,
        small_file_mb: int,
        compact_small_files: int | None,
        expire_days: int | None,
        start_unit: bool | None = None,
    ) -> dict:
        """Replace the table's policy (None turns compaction or expiry off); `start_unit` None
        keeps whether a unit is started for a job as saved."""
        return self._call(
            "POST",
            f"/warehouses/{warehouse_id}/tables/{name}/policy",
            json={
                "small_file_mb": small_file_mb,
                "compact_small_files": compact_small_files,
                "expire_days": expire_days,
                "start_unit": start_unit,
            },
        )

    def table_maintenance(self, warehouse_id: int, name: str) -> list[dict]:
        return self._call("GET", f"/warehouses/{warehouse_id}/tables/{name}/maintenance")

    def table_publishes(self, warehouse_id: int, name: str) -> dict:
        return self._call("GET", f"/warehouses/{warehouse_id}/tables/{name}/publishes")

    # --- compute units --------------------------------------------------------------------------

    def units(self) -> list[dict]:
        return self._all("/compute-units")

    def unit(self, cu_id: int) -> dict:
        return self._call("GET", f"/compute-units/{cu_id}")

    def create_unit(self, name: str, **sizes) -> dict:
        return self._call("POST", "/compute-units", json={"name": name, **sizes})

    def terminate_unit(self, cu_id: int) -> dict:
        return self._call("POST", f"/compute-units/{cu_id}/terminate")

    # --- workflows --------------------------------------------------------------------------------

    def workflows(self) -> list[dict]:
        return self._all("/workflows")

    def workflow(self, workflow_id: int) -> dict:
        return self._call("GET", f"/workflows/{workflow_id}")

    def delete_workflow(self, workflow_id: int) -> None:
        response = self._http.delete(f"/workflows/{workflow_id}")
        if response.status_code >= 400:
            raise _error(response)

    def save_version(self, workflow_id: int, base_version: int, steps: list[dict]) -> dict:
        return self._call(
            "POST",
            f"/workflows/{workflow_id}/versions",
            json={"base_version": base_version, "steps": steps},
        )

    # --- executions -------------------------------------------------------------------------------

    def executions(self) -> list[dict]:
        return self._all("/executions")

    def execution(self, execution_id: int) -> dict:
        return self._call("GET", f"/executions/{execution_id}")

    def start(
        self,
        workflow_id: int,
        compute_unit_id: int,
        warehouse_id: int,
        version: int | None = None,
        idempotency_key: str | None = None,
        notify: dict | None = None,
    ) -> dict:
        """Start a run of the workflow's latest version; `version` names the one the caller saw (the portal
        answers 409 if a newer one was saved since; without it, only a workflow of one's own runs).
        Retried calls with the same key (one is made if none is given) start it once.
        `notify`: {"on": "failure" | "success" | "both", "webhook_url": …, "email": …}; the answer
        then carries the webhook's `webhook_secret`, this once."""
        body = {
            "workflow_id": workflow_id,
            "compute_unit_id": compute_unit_id,
            "warehouse_id": warehouse_id,
        }
        if version is not None:
            body["version"] = version
        if notify is not None:
            body["notify"] = notify
        key = idempotency_key or str(uuid.uuid4())
        return self._call("POST", "/executions", json=body, headers={"Idempotency-Key": key})

    def cancel(self, execution_id: int) -> dict:
        return self._call("POST", f"/executions/{execution_id}/cancel")

    def results(self, execution_id: int, step: str, page: int = 1, size: int = 50) -> dict:
        return self._call(
            "GET", f"/executions/{execution_id}/results/{step}", params={"page": page, "size": size}
        )

    def results_csv(self, execution_id: int, step: str) -> Iterator[bytes]:
        """The step's result as CSV, streamed."""
        response = self._send("GET", f"/executions/{execution_id}/results/{step}/csv", stream=True)
        try:
            yield from response.iter_bytes()
        finally:
            response.close()

    def logs(self, execution_id: int, page: int = 1, size: int = 200, **filters) -> dict:
        return self._call(
            "GET",
            f"/executions/{execution_id}/logs",
            params={"page": page, "size": size, **filters},
        )

    def log_tail(self, execution_id: int) -> list[dict]:
        return self._call("GET", f"/executions/{execution_id}/logs/tail")["lines"]

    def lineage(self, execution_id: int) -> dict:
        return self._call("GET", f"/executions/{execution_id}/lineage")

    # --- the console's queries ----------------------------------------------------------------

    def start_query(
        self, sql: str, warehouse_id: int, compute_unit_id: int | str, mode: str = "read"
    ) -> dict:
        """Run one statement (the API answers at once; follow it with `query`). The unit: one of
        yours by id, "pool" (a warm unit of the pool) or "new" (one started for it)."""
        body = {
            "sql": sql,
            "warehouse_id": warehouse_id,
            "compute_unit_id": compute_unit_id,
            "mode": mode,
        }
        return self._call("POST", "/queries", json=body)

    def query(self, query_id: int, page: int = 1, size: int = 500) -> dict:
        """The query, with page `page` of its rows (`result_page`) once it completed."""
        return self._call("GET", f"/queries/{query_id}", params={"page": page, "size": size})

    def cancel_query(self, query_id: int) -> dict:
        return self._call("POST", f"/queries/{query_id}/cancel")


def _retry_after(response: httpx.Response) -> float:
    """The seconds a 429 asks to wait, within 1 s and LONGEST_RETRY_AFTER_S."""
    try:
        seconds = float(response.headers.get("Retry-After", "1"))
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 1.0), LONGEST_RETRY_AFTER_S)


def _error(response: httpx.Response) -> ApiError:
    try:
        problem = response.json()
    except ValueError:
        return ApiError(response.status_code, response.text[:300] or response.reason_phrase)
    return ApiError(
        response.status_code,
        str(problem.get("detail") or problem.get("title") or ""),
        problem.get("field"),
    )
