"""Health, nodes and resource use of a Ray cluster, read from Ray's own HTTP APIs.

The dashboard on the head node serves the State API (`/api/v0/nodes`), the autoscaler's
cluster status (`/api/cluster_status`) and the Jobs API. Talking HTTP, with the cluster's
token in a header per request, lets one portal process watch many clusters at once; a Ray
driver could only ever be connected to one.
"""

from __future__ import annotations

import httpx

from app.ray_clusters.base import ClusterStatus, NodeStatus
from app.states import UnitState


class RayApiError(RuntimeError):
    """The dashboard did not answer, or answered with an error."""


class RayDashboard:
    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url, headers=headers or {}, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RayDashboard:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _get(self, path: str, **params) -> httpx.Response:
        try:
            response = self._client.get(path, params=params)
        except httpx.HTTPError as error:
            raise RayApiError(f"Ray dashboard at {self.url} not reachable: {error}") from error
        if response.status_code in (401, 403):
            raise RayApiError(
                f"Ray dashboard at {self.url} refused the cluster token ({response.status_code})"
            )
        if not response.is_success:
            raise RayApiError(f"Ray dashboard at {self.url}{path} answered {response.status_code}")
        return response

    def healthy(self) -> bool:
        """The dashboard is up and reaches the GCS (the head's control store)."""
        try:
            return self._get("/api/gcs_healthz").text.strip() == "success"
        except RayApiError:
            return False

    def nodes(self) -> list[NodeStatus]:
        payload = self._get("/api/v0/nodes", limit=1000).json()
        return [
            NodeStatus(
                node_id=node["node_id"],
                is_head=bool(node.get("is_head_node")),
                alive=node.get("state") == "ALIVE",
                cpus=float(node.get("resources_total", {}).get("CPU", 0.0)),
                memory_bytes=int(node.get("resources_total", {}).get("memory", 0)),
            )
            for node in payload["data"]["result"]["result"]
        ]

    def resource_usage(self) -> dict[str, tuple[float, float]]:
        """Logical resources in use and in total, e.g. {"CPU": (1.0, 2.0)}."""
        payload = self._get("/api/cluster_status").json()
        usage = payload["data"]["clusterStatus"]["loadMetricsReport"]["usage"]
        return {name: (float(used), float(total)) for name, (used, total) in usage.items()}

    def cluster_status(self) -> ClusterStatus:
        """RUNNING with nodes and resource figures; raises RayApiError if Ray cannot tell.

        Totals come from the State API's node list, which is current as soon as a node
        joins; use comes from the autoscaler's report, which lags by a few seconds.
        """
        nodes = self.nodes()
        usage = self.resource_usage()
        alive = [node for node in nodes if node.alive]
        return ClusterStatus(
            state=UnitState.RUNNING,
            nodes=nodes,
            cpus_total=sum(node.cpus for node in alive),
            cpus_used=usage.get("CPU", (0.0, 0.0))[0],
            memory_total_bytes=sum(node.memory_bytes for node in alive),
            memory_used_bytes=int(usage.get("memory", (0.0, 0.0))[0]),
        )
