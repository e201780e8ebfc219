"""Which Ray cluster backend serves each kind of compute unit, built from the portal's settings."""
from __future__ import annotations

from pathlib import Path

from app.ray_clusters.base import ClusterBackend
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
        from app.ray_clusters.existing import ExistingClusterBackend

        return ExistingClusterBackend()
    if kind == "kuberay":
        from app.ray_clusters.kuberay import KubeRayBackend

        return KubeRayBackend(api_url=config["KUBERAY_API_URL"], namespace=config["KUBERAY_NAMESPACE"],
                              image=config["KUBERAY_IMAGE"], token_file=config["KUBERAY_TOKEN_FILE"])
    raise ValueError(f"unknown compute-unit kind {kind!r}")
