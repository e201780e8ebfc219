"""Which Ray cluster backend serves each kind of compute unit, built from the portal's settings."""
from __future__ import annotations

from pathlib import Path

from app.ray_clusters import ClusterBackend, ExistingClusterBackend, KubeRayBackend, KubernetesConnection
from app.ray_clusters.local import LocalClusterBackend

KIND_LABELS = {
    "local": "Local Ray cluster on this machine",
    "existing": "Existing Ray cluster (attach by address)",
    "kuberay": "Kubernetes (KubeRay RayCluster)",
}


def enabled_kinds(config) -> list[str]:
    return [kind.strip() for kind in config["CU_KINDS"].split(",") if kind.strip() in KIND_LABELS]


def backend_for(kind: str, config) -> ClusterBackend:
    if kind == "local":
        return LocalClusterBackend(Path(config["CU_WORK_DIR"]) if config["CU_WORK_DIR"] else None)
    if kind == "existing":
        return ExistingClusterBackend(token=config["RAY_CLUSTER_TOKEN"] or None)
    if kind == "kuberay":
        connection = KubernetesConnection(
            api_url=config["KUBERAY_API_URL"], namespace=config["KUBERAY_NAMESPACE"],
            token=Path(config["KUBERAY_TOKEN_FILE"]).read_text().strip(),
            verify=config["KUBERAY_CA_FILE"] or True,
        )
        return KubeRayBackend(connection, image=config["KUBERAY_IMAGE"])
    raise ValueError(f"unknown compute-unit kind {kind!r}")
