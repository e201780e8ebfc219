"""The Ray clusters behind compute units: one interface (`base.ClusterBackend`), three backends.

- `local.LocalClusterBackend`: an isolated Ray cluster of subprocesses on the portal's machine;
- `existing.ExistingClusterBackend`: a Ray cluster run elsewhere, attached by its dashboard URL;
- `kuberay.KubeRayBackend`: a KubeRay `RayCluster` per compute unit on Kubernetes.

Nothing here needs Flask; the web layer passes configuration in. The unit's Spark host, which
these clusters run, is reached through app/spark_host/.
"""
