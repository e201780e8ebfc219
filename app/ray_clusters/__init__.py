"""The Ray clusters behind compute units: one interface (`base.ClusterBackend`), three backends.

- `local.LocalClusterBackend`: an isolated Ray cluster of subprocesses on the portal's machine;
- `existing.ExistingClusterBackend`: a Ray cluster run elsewhere, attached by its dashboard URL;
- `kuberay.KubeRayBackend`: a KubeRay `RayCluster` per compute unit on Kubernetes.

Nothing here needs Flask; the web layer passes configuration in. The unit's Spark host, which
these clusters run, is reached through app/spark_host/.

Modules:
- `base.py` — the one interface, `ClusterBackend`
- `local.py` — the local kind: start, status, terminate
- `local_processes.py` — a local unit's processes and node records, seen from outside
- `local_ports.py` — reserved loopback ports
- `local_limits.py` — the operator's limits policy, applied to a local unit
- `sandbox.py` — the local kind's bubblewrap sandbox
- `unit_files.py` — a unit's directory read and written as hostile input
- `unit_limits.py` — control groups, v1 and v2
- `unit_disk.py` — a unit's directory as a filesystem of its size
- `existing.py` — the existing kind: a Ray cluster run elsewhere
- `listed.py` — the clusters the operator lists for `existing` units
- `kuberay.py` — the KubeRay kind: a `RayCluster` per unit
- `ray_dashboard.py` — health, nodes and resource use of a Ray cluster, from Ray's HTTP APIs
"""
