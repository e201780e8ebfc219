"""Compute units on Kubernetes: one KubeRay `RayCluster` (ray.io/v1) per compute unit.

The portal creates, reads and deletes the custom resource through the Kubernetes API
with httpx: in a pod it uses its service account (token, CA and namespace mounted at
/var/run/secrets/kubernetes.io/serviceaccount); elsewhere an API URL and token are
configured. The KubeRay operator does the rest: pods, the head Service, restarts.

Each cluster gets its own Ray auth token, kept in a Secret that `spec.authOptions`
names (KubeRay injects it into every Ray container as RAY_AUTH_TOKEN). The head Service
exposes the dashboard (Jobs API) and the Spark host port, both checked against that token.
`spec.authOptions.secretName` exists in the RayCluster CRD from KubeRay 1.6.0 on; an older CRD
has the API server prune it, so `start` checks the object the API server returns and refuses
(and deletes) a cluster that lost it.

UNTESTED AGAINST A LIVE CLUSTER: no Kubernetes cluster runs on the project's machines.
The tests validate every rendered manifest against the RayCluster CRD's openAPIV3Schema
(vendored in tests/specs/kuberay), map recorded `.status` objects to compute-unit states, and check the
HTTP calls against a mock transport. The image must carry this project's `compute`
package, its venv (Ray, RayDP, pyspark) and the jars (LAKEPORT_JARS_DIR), as on a local node.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from decimal import Decimal

import httpx

from app.ray_clusters.base import (
    MIB,
    ClusterBackend,
    ClusterHandle,
    ClusterSpec,
    ClusterStartError,
    ClusterStatus,
    NodeStatus,
    ProgressCallback,
    no_progress,
)
from app.states import UnitState

RAY_VERSION = "2.60.0"
DASHBOARD_PORT = 8265
SPARK_HOST_PORT = 8290
TOKEN_SECRET_KEY = "auth_token"  # the key KubeRay reads from authOptions.secretName
# The first KubeRay whose RayCluster CRD has `spec.authOptions.secretName` (ray-project/kuberay,
# ray-operator/apis/ray/v1/raycluster_types.go `AuthOptions` and
# ray-operator/config/crd/bases/ray.io_rayclusters.yaml: absent at v1.5.0, `mode` only at v1.5.1
# and v1.5.2, `mode`, `secretName` and `enableK8sTokenAuth` from v1.6.0).
KUBERAY_MINIMUM = "1.6.0"
LABEL_OWNER = "lakeport.io/owner"
LABEL_COMPUTE_UNIT = "lakeport.io/compute-unit"
MANAGED_BY = {"app.kubernetes.io/managed-by": "lakeport"}


class KubernetesApiError(RuntimeError):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"Kubernetes API answered {status_code}: {message}")
        self.status_code = status_code


@dataclass(frozen=True)
class KubernetesConnection:
    api_url: str
    token: str
    namespace: str
    verify: str | bool = True  # CA bundle path, or bool


class KubernetesApi:
    """The few Kubernetes API calls the backend makes."""

    def __init__(
        self,
        connection: KubernetesConnection,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.namespace = connection.namespace
        self._http = httpx.Client(
            base_url=connection.api_url.rstrip("/"),
            headers={"Authorization": f"Bearer {connection.token}", "Accept": "application/json"},
            verify=connection.verify,
            timeout=timeout,
            transport=transport,
        )

    def rayclusters(self, name: str = "") -> str:
        return f"/apis/ray.io/v1/namespaces/{self.namespace}/rayclusters" + (
            f"/{name}" if name else ""
        )

    def secrets(self, name: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets" + (f"/{name}" if name else "")

    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    def network_policies(self, name: str = "") -> str:
        return f"/apis/networking.k8s.io/v1/namespaces/{self.namespace}/networkpolicies" + (
            f"/{name}" if name else ""
        )

    def _send(self, method: str, path: str, **kwargs) -> dict:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise KubernetesApiError(0, f"not reachable: {error}") from error
        if not response.is_success:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise KubernetesApiError(response.status_code, message[:500])
        return response.json()

    def create(self, path: str, body: dict) -> dict:
        return self._send("POST", path, json=body)

    def get(self, path: str, **params) -> dict:
        return self._send("GET", path, params=params)

    def delete(self, path: str) -> None:
        """Delete, in the background (the operator removes the pods); a missing object is fine."""
        try:
            self._send("DELETE", path, json={"propagationPolicy": "Background"})
        except KubernetesApiError as error:
            if error.status_code != 404:
                raise


# --------------------------------------------------------------------- manifests
def _label_value(text: str) -> str:
    """A valid label value (≤63 chars of [A-Za-z0-9._-], alphanumeric at both ends)."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    if len(value) > 63:
        value = value[:54].rstrip("-._") + "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return value


def cluster_name(cu_id: str) -> str:
    """DNS-1123 name, short enough for `<name>-head-svc` and the pods KubeRay derives from it."""
    slug = re.sub(r"[^a-z0-9-]+", "-", cu_id.lower()).strip("-")[:24].strip("-")
    return f"lakeport-cu-{slug}-{hashlib.sha256(cu_id.encode()).hexdigest()[:6]}"


# Users' code runs in these pods: no Kubernetes API token, no root, no privilege to gain.
# The image's `ray` user (compute/Dockerfile, from rayproject/ray) is uid 1000, group 100.
_POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 100,
    "fsGroup": 100,
    "seccompProfile": {"type": "RuntimeDefault"},
}
_CONTAINER_SECURITY = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
}


def _pod_template(labels: dict[str, str], container: dict) -> dict:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": copy.deepcopy(_POD_SECURITY),
            "containers": [container],
        },
    }


def _ray_container(name: str, spec: ClusterSpec, image: str, ports: list[dict]) -> dict:
    resources = {"cpu": str(spec.cpus_per_node), "memory": f"{spec.memory_bytes_per_node // MIB}Mi"}
    return {
        "name": name,
        "image": image,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": copy.deepcopy(_CONTAINER_SECURITY),
        **({"ports": ports} if ports else {}),
    }


def render_raycluster(
    spec: ClusterSpec, *, name: str, namespace: str, image: str, token_secret: str
) -> dict:
    labels = {
        **MANAGED_BY,
        LABEL_OWNER: _label_value(spec.owner or "unknown"),
        LABEL_COMPUTE_UNIT: _label_value(spec.cu_id),
    }
    start_params = {
        "num-cpus": str(spec.cpus_per_node),
        "object-store-memory": str(spec.object_store_bytes),
    }
    head_ports = [
        {"name": "gcs-server", "containerPort": 6379},
        {"name": "dashboard", "containerPort": DASHBOARD_PORT},
        {"name": "client", "containerPort": 10001},
        {"name": "spark-host", "containerPort": SPARK_HOST_PORT},
    ]
    manifest = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "rayVersion": RAY_VERSION,
            "enableInTreeAutoscaling": False,
            "authOptions": {"mode": "token", "secretName": token_secret},
            "headGroupSpec": {
                "rayStartParams": {**start_params, "dashboard-host": "0.0.0.0"},
                "template": _pod_template(
                    labels, _ray_container("ray-head", spec, image, head_ports)
                ),
            },
        },
    }
    if spec.worker_nodes:
        manifest["spec"]["workerGroupSpecs"] = [
            {
                "groupName": "workers",
                "replicas": spec.worker_nodes,
                "minReplicas": spec.worker_nodes,
                "maxReplicas": spec.worker_nodes,
                "rayStartParams": dict(start_params),
                "template": _pod_template(labels, _ray_container("ray-worker", spec, image, [])),
            }
        ]
    return manifest


def render_unit_network_policy(name: str, namespace: str, labels: dict[str, str]) -> dict:
    """The unit's own NetworkPolicy: its pods (KubeRay labels each `ray.io/cluster=<name>`) talk
    to each other, Ray's head and workers, and to no other unit's. What else they may reach,
    and who may reach them, is deploy/kubernetes/unit-networkpolicy.yaml's: policies add up."""
    same_unit = [{"podSelector": {"matchLabels": {"ray.io/cluster": name}}}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{name}-within", "namespace": namespace, "labels": labels},
        "spec": {
            "podSelector": {"matchLabels": {"ray.io/cluster": name}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": same_unit}],
            "egress": [{"to": same_unit}],
        },
    }


def render_token_secret(name: str, namespace: str, token: str, labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "type": "Opaque",
        "stringData": {TOKEN_SECRET_KEY: token},
    }


# ------------------------------------------------------------------ status mapping
_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def parse_quantity(value: str | int | None) -> Decimal:
    """A Kubernetes quantity ("500m", "4Gi", 3) as a number."""
    if value in (None, ""):
        return Decimal(0)
    match = _QUANTITY.match(str(value))
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return Decimal(match.group(1)) * _SUFFIX[match.group(2)]


def status_from_raycluster(obj: dict) -> ClusterStatus:
    """Map a RayCluster object (as the API returns it) to a compute-unit status.

    KubeRay ≥1.2 reports conditions: HeadPodReady, RayClusterProvisioned (set once, when all
    pods were first ready), ReplicaFailure (a pod could not be created), RayClusterSuspending
    and RayClusterSuspended. `.status.state` ("ready") is the deprecated summary, used only
    when no conditions are reported.
    """
    if obj.get("metadata", {}).get("deletionTimestamp"):
        return ClusterStatus(UnitState.TERMINATING, progress_step="deleting")
    status = obj.get("status") or {}
    spec = obj.get("spec", {})
    conditions = {condition["type"]: condition for condition in status.get("conditions", [])}

    def is_true(kind: str) -> bool:
        return conditions.get(kind, {}).get("status") == "True"

    desired_workers = sum(group.get("replicas", 0) for group in spec.get("workerGroupSpecs", []))
    ready_workers = status.get("readyWorkerReplicas", 0)
    head_ready = is_true("HeadPodReady") if conditions else status.get("state") == "ready"
    provisioned = is_true("RayClusterProvisioned") if conditions else status.get("state") == "ready"
    figures = _figures(status, head_ready, ready_workers)

    if (
        is_true("RayClusterSuspended")
        or is_true("RayClusterSuspending")
        or status.get("state") == "suspended"
    ):
        return ClusterStatus(UnitState.FAILED, reason="the RayCluster was suspended", **figures)
    if is_true("ReplicaFailure"):
        failure = conditions["ReplicaFailure"]
        return ClusterStatus(
            UnitState.FAILED, reason=f"{failure['reason']}: {failure['message']}", **figures
        )
    if provisioned and not head_ready:
        message = (
            conditions.get("HeadPodReady", {}).get("message") or status.get("reason") or "not ready"
        )
        return ClusterStatus(
            UnitState.FAILED, reason=f"the head pod is no longer ready: {message}", **figures
        )
    if provisioned:
        reason = (
            ""
            if ready_workers >= desired_workers
            else (f"degraded: {ready_workers} of {desired_workers} worker pods ready")
        )
        return ClusterStatus(UnitState.RUNNING, reason=reason, **figures)
    step = (
        f"pods starting: head {'ready' if head_ready else 'not ready'}, "
        f"{ready_workers} of {desired_workers} worker pods ready"
    )
    return ClusterStatus(UnitState.STARTING, progress_step=step, **figures)


def _figures(status: dict, head_ready: bool, ready_workers: int) -> dict:
    """What Kubernetes knows without asking Ray: desired totals, and pods that are ready."""
    nodes = [NodeStatus("head", True, head_ready, 0.0, 0)] if head_ready else []
    nodes += [NodeStatus(f"worker-{i}", False, True, 0.0, 0) for i in range(1, ready_workers + 1)]
    return {
        "nodes": nodes,
        "cpus_total": float(parse_quantity(status.get("desiredCPU"))),
        "memory_total_bytes": int(parse_quantity(status.get("desiredMemory"))),
    }


def _check_auth_options_kept(sent: dict, created: dict) -> None:
    """Refuse a RayCluster whose stored spec lost any of the `authOptions` the portal sent.

    The API server prunes fields a custom resource's schema does not define as it decodes the
    request, so the object a create answers with is the one stored (kubernetes/apiextensions-
    apiserver, pkg/apiserver/customresource_handler.go: `schemaCoercingDecoder.Decode` →
    `unstructuredSchemaCoercer.apply` → `structuralpruning.PruneWithOptions`; KubeRay's CRD does
    not preserve unknown fields). A CRD older than KubeRay 1.6.0 drops `secretName`: KubeRay 1.5.x
    then makes a token of its own, which refuses the portal's (raycluster_controller.go at v1.5.1,
    `reconcileAuthSecret`: a Secret of its own whenever `mode` is `token`), and below 1.5.1 the whole of
    `authOptions` goes and Ray runs without authentication.
    """
    wanted = sent["spec"]["authOptions"]
    kept = (created.get("spec") or {}).get("authOptions") or {}
    lost = [field for field, value in wanted.items() if kept.get(field) != value]
    if lost:
        name = sent["metadata"]["name"]
        fields = ", ".join(f"spec.authOptions.{field}" for field in lost)
        raise ClusterStartError(
            f"the Kubernetes API did not keep {fields} of RayCluster {name}: the cluster's "
            f"RayCluster CRD is older than KubeRay {KUBERAY_MINIMUM}, which Lakeport needs (with "
            "an older one Ray refuses the unit's token, or runs without authentication); "
            f"upgrade the KubeRay operator and its CRDs to {KUBERAY_MINIMUM} or newer"
        )


# ------------------------------------------------------------------------ backend
class KubeRayBackend(ClusterBackend):
    kind = "kuberay"

    def __init__(
        self,
        connection: KubernetesConnection,
        *,
        image: str,
        transport: httpx.BaseTransport | None = None,
        poll_interval_s: float = 2.0,
    ) -> None:
        self.connection = connection
        self.image = image
        self.api = KubernetesApi(connection, transport=transport)
        self.poll_interval_s = poll_interval_s

    def restore_token(self, handle: ClusterHandle) -> ClusterHandle:
        if handle.auth_token is None and handle.details.get("secret"):
            secret = self.api.get(self.api.secrets(handle.details["secret"]))
            handle.auth_token = base64.b64decode(secret["data"][TOKEN_SECRET_KEY]).decode()
        return handle

    def start(self, spec: ClusterSpec, progress: ProgressCallback = no_progress) -> ClusterHandle:
        name = cluster_name(spec.cu_id)
        secret_name = f"{name}-ray-token"
        namespace = self.api.namespace
        token = secrets.token_hex(32)
        service = f"http://{name}-head-svc.{namespace}.svc.cluster.local"
        handle = ClusterHandle(
            backend=self.kind,
            cu_id=spec.cu_id,
            dashboard_url=f"{service}:{DASHBOARD_PORT}",
            auth_token=token,
            spark_host_url=f"{service}:{SPARK_HOST_PORT}",
            details={"namespace": namespace, "name": name, "secret": secret_name},
        )
        manifest = render_raycluster(
            spec, name=name, namespace=namespace, image=self.image, token_secret=secret_name
        )
        deadline = time.monotonic() + spec.start_timeout_s
        try:
            progress("creating the RayCluster")
            labels = manifest["metadata"]["labels"]
            self.api.create(
                self.api.secrets(), render_token_secret(secret_name, namespace, token, labels)
            )
            # Before the pods exist, so that none runs a moment without its policy.
            self.api.create(
                self.api.network_policies(), render_unit_network_policy(name, namespace, labels)
            )
            created = self.api.create(self.api.rayclusters(), manifest)
            _check_auth_options_kept(manifest, created)
            while (status := self.status(handle)).state == UnitState.STARTING:
                progress(status.progress_step)
                if time.monotonic() > deadline:
                    raise ClusterStartError(
                        f"did not become healthy within {spec.start_timeout_s:.0f} s: "
                        f"{status.progress_step}{self._pod_problems(name)}"
                    )
                time.sleep(self.poll_interval_s)
            if status.state != UnitState.RUNNING:
                raise ClusterStartError(status.reason)
        except KubernetesApiError as error:
            self.terminate(handle)
            raise ClusterStartError(f"could not create the RayCluster: {error}") from error
        except ClusterStartError:
            self.terminate(handle)
            raise
        progress("cluster ready")
        return handle

    def status(self, handle: ClusterHandle) -> ClusterStatus:
        self._check_handle(handle)
        try:
            obj = self.api.get(self.api.rayclusters(handle.details["name"]))
        except KubernetesApiError as error:
            if error.status_code == 404:
                name = handle.details["name"]
                return ClusterStatus(UnitState.FAILED, reason=f"RayCluster {name} no longer exists")
            raise
        return status_from_raycluster(obj)

    def terminate(self, handle: ClusterHandle) -> None:
        self._check_handle(handle)
        self.api.delete(self.api.rayclusters(handle.details["name"]))
        self.api.delete(self.api.secrets(handle.details["secret"]))
        self.api.delete(self.api.network_policies(f"{handle.details['name']}-within"))

    def _pod_problems(self, name: str) -> str:
        """Why pods are not ready (image pulls, crash loops), for a start failure's reason."""
        try:
            pods = self.api.get(self.api.pods(), labelSelector=f"ray.io/cluster={name}")
        except KubernetesApiError:
            return ""
        problems = []
        for pod in pods.get("items", []):
            for container in pod.get("status", {}).get("containerStatuses", []):
                waiting = container.get("state", {}).get("waiting")
                if waiting and waiting.get("reason") not in (
                    None,
                    "ContainerCreating",
                    "PodInitializing",
                ):
                    problems.append(f"{pod['metadata']['name']}: {waiting['reason']}")
        return f" ({'; '.join(problems)})" if problems else ""
