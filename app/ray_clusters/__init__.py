"""The Ray clusters behind compute units: one interface (`ClusterBackend`), three backends.

- `LocalClusterBackend`: an isolated Ray cluster of subprocesses on the portal's machine;
- `ExistingClusterBackend`: a Ray cluster run elsewhere, attached by its dashboard URL;
- `KubeRayBackend`: a KubeRay `RayCluster` per compute unit on Kubernetes.

`SparkHostClient` starts a compute unit's warm Spark session and hands it executions.
Nothing here needs Flask; the web layer passes configuration in.
"""
from app.ray_clusters.base import (
    ClusterBackend,
    ClusterHandle,
    ClusterSpec,
    ClusterStartError,
    ClusterState,
    ClusterStatus,
    NodeStatus,
)
from app.ray_clusters.existing import ExistingClusterBackend
from app.ray_clusters.kuberay import KubeRayBackend, KubernetesConnection
from app.ray_clusters.local import LocalClusterBackend
from app.ray_clusters.spark_host_client import SparkHostClient, SparkHostError

__all__ = [
    "ClusterBackend", "ClusterHandle", "ClusterSpec", "ClusterStartError", "ClusterState", "ClusterStatus",
    "NodeStatus", "ExistingClusterBackend", "KubeRayBackend", "KubernetesConnection", "LocalClusterBackend",
    "SparkHostClient", "SparkHostError",
]
