"""One interface for the Ray clusters behind compute units, whatever runs them.

The portal records a compute unit (CU) in its database and drives it through a
`ClusterBackend`:

    handle = backend.start(spec, progress)   # blocks until the cluster is healthy, or raises ClusterStartError
    backend.status(handle)                   # RUNNING, or FAILED with a reason a person can read
    backend.terminate(handle)                # stops exactly this cluster's processes / resources

A `ClusterHandle` is everything needed to find the cluster again. It serialises to JSON
so the portal can store it with the CU; after a portal restart `backend.adopt(handle)`
tells whether the cluster survived (RUNNING) or not (FAILED).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, ClassVar

from app.ray_clusters.unit_limits import LimitsReport, LimitUsage, UnitLimits
from app.states import UnitState

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class SparkHostLaunch:
    """Start the unit's Spark host together with its cluster rather than after it (local
    clusters: the host's JVMs then start while the head's dashboard still comes up). What the
    backend decides itself (the host's port and address) is not here; the namespace follows
    from `nonce` (see `ClusterHandle.spark_host_namespace`)."""

    nonce: str
    secret_sha256: str
    executors: int
    executor_cores: int
    executor_memory: str
    warm_timeout_s: float
    with_cluster: bool = True  # False: planned, but started only when asked (`launch_spark_host`)


class SparkHostLaunchState(str, Enum):
    NONE = "NONE"  # the backend starts no host with the cluster: bootstrap it (Ray Jobs)
    STARTING = "STARTING"  # started with the cluster, not ready yet
    ENDED = "ENDED"  # its launcher is done: the host answers, or it failed (then bootstrap)


@dataclass(frozen=True)
class ClusterSpec:
    """What the user asked for. Sizes are per node; the head node counts as a node."""

    cu_id: str
    name: str
    cpus_per_node: int = 1
    memory_gb_per_node: float = 2.0
    worker_nodes: int = 0
    owner: str = ""  # the owning user, for labels on Kubernetes objects
    cluster_name: str = ""  # existing clusters only: the operator-listed cluster to attach to
    spark_host_port: int | None = (
        None  # existing clusters only: this unit's port of the cluster's range
    )
    # Local clusters only: more of the cluster's loopback ports the portal must reach (bridged out of
    # its sandbox), e.g. the Spark host ports of a local cluster listed as a shared cluster.
    extra_ports: tuple[int, ...] = ()
    include_dashboard: bool = (
        True  # local clusters only (the portal's LAKEPORT_RAY_DASHBOARD): Ray Jobs need it
    )
    spark_host: SparkHostLaunch | None = (
        None  # backends that cannot start it with the cluster ignore it
    )
    start_timeout_s: float = 120.0

    @property
    def node_count(self) -> int:
        return 1 + self.worker_nodes

    @property
    def memory_bytes_per_node(self) -> int:
        return int(self.memory_gb_per_node * GIB)

    @property
    def object_store_bytes(self) -> int:
        """Ray's shared-memory object store, carved out of each node's memory: a tenth,
        at least 128 MiB (Ray's floor is 75 MiB) and at most 2 GiB (Spark moves its data
        through its own block managers; the object store only sees Ray-side transfers)."""
        return min(max(self.memory_bytes_per_node // 10, 128 * MIB), 2 * GIB)


@dataclass
class ClusterHandle:
    """How to reach one cluster again; stored by the portal as JSON.

    `auth_token` is the Ray cluster's token (Ray's token authentication): a secret that
    grants running code on the cluster. It is never part of the JSON: it stays where the
    cluster keeps it (a 0600 file, a Kubernetes Secret, the portal's configuration) and
    `ClusterBackend.restore_token` puts it back. `spark_host_secret` (the unit's own Spark
    host's secret) is never part of it either: the portal derives it again from its own key
    and `spark_host_nonce` (see `app.spark_host.client.with_spark_host_secret`), and from
    `spark_host_claim_nonce` once a pooled unit's host took a key of its own at its claim.
    `details` holds what only its backend reads.
    """

    backend: str
    cu_id: str
    dashboard_url: str | None = None
    auth_token: str | None = None
    spark_host_url: str | None = None
    spark_host_nonce: str | None = None
    spark_host_secret: str | None = None
    spark_host_claim_nonce: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else {}

    @property
    def spark_host_namespace(self) -> str:
        """The Ray namespace of this unit's Spark host actor: one per unit, even on a shared cluster
        (the nonce keeps units of two portal databases with equal ids apart)."""
        return f"lakeport-cu-{self.cu_id}-{(self.spark_host_nonce or '')[:8]}"

    def to_json(self) -> str:
        return json.dumps(
            {**asdict(self), "auth_token": None, "spark_host_secret": None}, sort_keys=True
        )

    @classmethod
    def from_json(cls, text: str) -> ClusterHandle:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class NodeStatus:
    node_id: str
    is_head: bool
    alive: bool
    cpus: float
    memory_bytes: int


@dataclass
class ClusterStatus:
    state: UnitState
    reason: str = ""
    nodes: list[NodeStatus] = field(default_factory=list)
    cpus_total: float = 0.0
    cpus_used: float = 0.0
    memory_total_bytes: int = 0
    memory_used_bytes: int = 0
    progress_step: str = ""
    limits: LimitsReport | None = None  # local units: their kernel limits and use against them
    # The figures in use are the unit's Spark host's to report (app/spark_host/client.py `reported_use`).
    use_from_spark_host: bool = False

    @property
    def alive_nodes(self) -> int:
        return sum(node.alive for node in self.nodes)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ClusterStatus:
        data = json.loads(text)
        limits = data.pop("limits", None)
        return cls(
            **{
                **data,
                "state": UnitState(data["state"]),
                "nodes": [NodeStatus(**node) for node in data.get("nodes") or []],
                "limits": LimitsReport(
                    UnitLimits(**limits["limits"]),
                    LimitUsage(**limits["usage"]),
                    limits["disk_used_bytes"],
                )
                if limits
                else None,
            }
        )


class ClusterStartError(RuntimeError):
    """The cluster did not come up; the message is the reason to show (and nothing is left running)."""


ProgressCallback = Callable[[str], None]


def no_progress(step: str) -> None:
    """The default progress callback: nobody listens."""


class ClusterBackend(ABC):
    kind: ClassVar[str]

    @abstractmethod
    def start(self, spec: ClusterSpec, progress: ProgressCallback = no_progress) -> ClusterHandle:
        """Bring the cluster up and return once it is healthy; raise ClusterStartError otherwise."""

    @abstractmethod
    def status(self, handle: ClusterHandle) -> ClusterStatus:
        """Current state. A cluster that died is FAILED with a reason."""

    @abstractmethod
    def terminate(self, handle: ClusterHandle) -> None:
        """Stop the cluster (or detach from it) and free what it held. Idempotent."""

    # The cluster outlives the unit (terminate only detaches): the portal stops the unit's Spark
    # host first, or its session would keep holding the cluster's resources.
    detaches_only: ClassVar[bool] = False

    def spark_host_launch(self, handle: ClusterHandle) -> SparkHostLaunchState:
        """Whether the unit's Spark host was started with the cluster, and how far that got."""
        return SparkHostLaunchState.NONE

    def launch_spark_host(self, handle: ClusterHandle) -> bool:
        """Have the cluster start the unit's Spark host (again) itself, as it would have with the
        cluster; False if this backend cannot (then the host is bootstrapped through Ray Jobs)."""
        return False

    def spark_host_launch_log(self, handle: ClusterHandle) -> str:
        """The last lines its launcher wrote, to say why a host started with the cluster failed."""
        return ""

    def limit_usage(self, handle: ClusterHandle) -> LimitUsage | None:
        """What the unit uses against its kernel limits now (None: this kind has none the portal reads)."""
        return None

    def over_limit(self, handle: ClusterHandle, before: LimitUsage | None) -> str | None:
        """Which of its limits the unit went over since `before` (a `limit_usage`), in words."""
        return None

    def restore_token(self, handle: ClusterHandle) -> ClusterHandle:
        """Put the cluster's token back into a handle read from JSON (see `ClusterHandle`)."""
        return handle

    def adopt(self, handle: ClusterHandle) -> ClusterStatus:
        """Take over a cluster started by an earlier portal process."""
        self._check_handle(handle)
        return self.status(self.restore_token(handle))

    def _check_handle(self, handle: ClusterHandle) -> None:
        if handle.backend != self.kind:
            raise ValueError(
                f"a {handle.backend!r} handle cannot be used with the {self.kind!r} backend"
            )
