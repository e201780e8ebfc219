"""Which Ray cluster backend serves each kind of compute unit, built from the portal's settings."""

from __future__ import annotations

from pathlib import Path

from app.ray_clusters.base import ClusterBackend
from app.ray_clusters.existing import ExistingClusterBackend
from app.ray_clusters.kuberay import KubeRayBackend, KubernetesConnection
from app.ray_clusters.listed import clusters_for, parse_listed_clusters
from app.ray_clusters.local import LocalClusterBackend, allowed_endpoints
from app.ray_clusters.local_limits import LocalLimits

KIND_LABELS = {
    "local": "Local Ray cluster on this machine",
    "existing": "Existing Ray cluster (one listed here)",
    "kuberay": "Kubernetes (KubeRay RayCluster)",
}


def local_limits(config) -> LocalLimits:
    return LocalLimits(
        tasks_per_node=config["CU_TASKS_PER_NODE"],
        disk_bytes=int(config["CU_DISK_GB"] * 2**30),
        cgroup_parent=config["CU_CGROUP_PARENT"],
        allow_unlimited=config["CU_ALLOW_UNLIMITED_UNITS"],
    )


def backend_for(kind: str, config) -> ClusterBackend:
    if kind == "local":
        return LocalClusterBackend(
            Path(config["CU_WORK_DIR"]) if config["CU_WORK_DIR"] else None,
            endpoints=allowed_endpoints(config["LAKEKEEPER_URL"], config["CU_ALLOWED_ENDPOINTS"]),
            limits=local_limits(config),
        )
    if kind == "existing":
        return ExistingClusterBackend(parse_listed_clusters(config["RAY_CLUSTERS"]))
    if kind == "kuberay":
        connection = KubernetesConnection(
            api_url=config["KUBERAY_API_URL"],
            namespace=config["KUBERAY_NAMESPACE"],
            token=Path(config["KUBERAY_TOKEN_FILE"]).read_text().strip(),
            verify=config["KUBERAY_CA_FILE"] or True,
        )
        return KubeRayBackend(connection, image=config["KUBERAY_IMAGE"])
    raise ValueError(f"unknown compute-unit kind {kind!r}")


def unit_choices(config, user) -> tuple[list[str], list[str]]:
    """(kinds, names of the listed Ray clusters) `user` may choose from for a new unit: the enabled
    kinds, without `existing` for a user who may attach to no listed cluster."""
    clusters = [cluster.name for cluster in clusters_for(config["RAY_CLUSTERS"], user.email)]
    kinds = [kind.strip() for kind in config["CU_KINDS"].split(",") if kind.strip() in KIND_LABELS]
    return [kind for kind in kinds if kind != "existing" or clusters], clusters
