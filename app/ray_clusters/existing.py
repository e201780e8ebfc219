"""Compute units on a Ray cluster that runs elsewhere, one the operator lists: its address and
token come from the listing only (listed.py says why). Health and resources come from Ray itself
over HTTP (ray_dashboard.py). The portal does not own such a cluster: `terminate` stops only the
unit's own Spark host, and the cluster keeps running.

Several units, of several users, may attach to one cluster: each gets its own Spark host
(its own actor in its own Ray namespace, its own secret) on its own port of the cluster's
`spark_host_ports` range, which the portal allocates (`ClusterSpec.spark_host_port`). The
cluster's nodes need this project's `compute` package, Ray, RayDP, pyspark and the jars, and
the portal must reach the head node on those ports.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from app.ray_clusters.base import (
    ClusterBackend,
    ClusterHandle,
    ClusterSpec,
    ClusterStartError,
    ClusterStatus,
    ProgressCallback,
    no_progress,
)
from app.ray_clusters.listed import ListedCluster
from app.ray_clusters.ray_dashboard import RayApiError, RayDashboard
from app.states import UnitState


class ExistingClusterBackend(ClusterBackend):
    kind = "existing"

    def __init__(
        self,
        clusters: tuple[ListedCluster, ...] | list[ListedCluster],
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.clusters = {cluster.name: cluster for cluster in clusters}
        self._transport = transport

    def restore_token(self, handle: ClusterHandle) -> ClusterHandle:
        cluster = self.clusters.get(handle.details.get("cluster", ""))
        if handle.auth_token is None and cluster is not None:
            handle.auth_token = cluster.read_token()
        return handle

    def start(self, spec: ClusterSpec, progress: ProgressCallback = no_progress) -> ClusterHandle:
        cluster = self.clusters.get(spec.cluster_name)
        if cluster is None:
            raise ClusterStartError(f"no Ray cluster named {spec.cluster_name!r} is listed here")
        if spec.spark_host_port not in cluster.ports():
            raise ClusterStartError(
                f"port {spec.spark_host_port} is not in cluster {cluster.name}'s Spark host "
                f"ports {cluster.ports().start}-{cluster.ports().stop - 1}"
            )
        address = urlsplit(cluster.address)
        handle = ClusterHandle(
            backend=self.kind,
            cu_id=spec.cu_id,
            dashboard_url=cluster.address,
            auth_token=cluster.read_token(),
            details={"cluster": cluster.name},
            spark_host_url=f"{address.scheme}://{address.hostname}:{spec.spark_host_port}",
        )
        progress(f"connecting to the Ray cluster {cluster.name}")
        status = self.status(handle)
        if status.state != UnitState.RUNNING:
            raise ClusterStartError(status.reason)
        progress("cluster ready")
        return handle

    def status(self, handle: ClusterHandle) -> ClusterStatus:
        self._check_handle(handle)
        name = handle.details.get("cluster", "")
        if name not in self.clusters:
            return ClusterStatus(
                UnitState.FAILED, reason=f"the Ray cluster {name!r} is no longer listed here"
            )
        try:
            with RayDashboard(
                handle.dashboard_url, handle.auth_headers(), transport=self._transport
            ) as dashboard:
                return dashboard.cluster_status()
        except RayApiError as error:
            return ClusterStatus(UnitState.FAILED, reason=str(error))

    detaches_only = True  # the portal stops the unit's Spark host first (compute_units.work)

    def terminate(self, handle: ClusterHandle) -> None:
        """Detach: the cluster is not the portal's to stop."""
        self._check_handle(handle)
