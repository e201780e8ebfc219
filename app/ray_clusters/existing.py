"""Compute units on a Ray cluster that runs elsewhere, attached by its dashboard address.

The address is the Ray dashboard / Jobs API URL (e.g. http://ray-head:8265). Health and
resources come from Ray itself over HTTP (see ray_dashboard.py), with the cluster's token
if it uses token authentication. The portal does not own such a cluster: `terminate`
only detaches, and the cluster keeps running.

The Spark host is started on it like on any compute unit (through the Jobs API), so the
cluster's nodes need this project's `compute` package, Ray, RayDP, pyspark and the jars,
and the portal must reach the head node on the Spark host port.
"""
from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from app.ray_clusters.base import (
    ClusterBackend,
    ClusterHandle,
    ClusterSpec,
    ClusterStartError,
    ClusterState,
    ClusterStatus,
    ProgressCallback,
    no_progress,
)
from app.ray_clusters.ray_dashboard import RayApiError, RayDashboard

SPARK_HOST_PORT = 8290


class ExistingClusterBackend(ClusterBackend):
    kind = "existing"

    def __init__(self, *, token: str | None = None, spark_host_port: int = SPARK_HOST_PORT,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.token = token
        self.spark_host_port = spark_host_port
        self._transport = transport

    def restore_token(self, handle: ClusterHandle) -> ClusterHandle:
        if handle.auth_token is None:
            handle.auth_token = self.token
        return handle

    def start(self, spec: ClusterSpec, progress: ProgressCallback = no_progress) -> ClusterHandle:
        address = urlsplit(spec.address)
        if address.scheme not in ("http", "https") or not address.hostname:
            raise ClusterStartError(f"not a Ray dashboard address: {spec.address!r} (expected http://host:8265)")
        handle = ClusterHandle(
            backend=self.kind,
            cu_id=spec.cu_id,
            dashboard_url=spec.address.rstrip("/"),
            auth_token=self.token,
            spark_host_url=f"{address.scheme}://{address.hostname}:{self.spark_host_port}",
        )
        progress("connecting to the Ray cluster")
        status = self.status(handle)
        if status.state != ClusterState.RUNNING:
            raise ClusterStartError(status.reason)
        progress("cluster ready")
        return handle

    def status(self, handle: ClusterHandle) -> ClusterStatus:
        self._check_handle(handle)
        try:
            with RayDashboard(handle.dashboard_url, handle.auth_headers(), transport=self._transport) as dashboard:
                return dashboard.cluster_status()
        except RayApiError as error:
            return ClusterStatus(ClusterState.FAILED, reason=str(error))

    def terminate(self, handle: ClusterHandle) -> None:
        """Detach only: the cluster is not the portal's to stop."""
        self._check_handle(handle)
