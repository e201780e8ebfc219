"""KubeRay backend without a Kubernetes cluster: manifests against the RayCluster CRD schema,
recorded `.status` objects mapped to compute-unit states, and the API calls on a mock transport."""

from __future__ import annotations

import base64
import copy
import json
import re
from pathlib import Path

import httpx
import jsonschema
import pytest
import yaml

from app.ray_clusters.base import (
    ClusterBackend,
    ClusterHandle,
    ClusterSpec,
    ClusterStartError,
    SparkHostLaunchState,
)
from app.ray_clusters.kuberay import (
    DASHBOARD_PORT,
    KUBERAY_MINIMUM,
    LABEL_COMPUTE_UNIT,
    LABEL_OWNER,
    SPARK_HOST_PORT,
    KubeRayBackend,
    KubernetesConnection,
    cluster_name,
    parse_quantity,
    render_raycluster,
    status_from_raycluster,
)
from app.states import UnitState

CRD_PATH = Path(__file__).resolve().parent / "specs" / "kuberay" / "ray.io_rayclusters.yaml"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
IMAGE = "registry.example/lakeport-cu:1"


def strict(schema: dict) -> dict:
    """The CRD schema, but rejecting fields it does not define, as the API server's pruning
    would silently drop them (a misspelt field would otherwise pass validation)."""
    schema = copy.deepcopy(schema)

    def visit(node: dict) -> None:
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for child in node.get("properties", {}).values():
            visit(child)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                visit(node[key])
        for key in ("anyOf", "allOf", "oneOf"):
            for child in node.get(key, []):
                visit(child)

    visit(schema)
    return schema


@pytest.fixture(scope="module")
def validator() -> jsonschema.Validator:
    crd = yaml.safe_load(CRD_PATH.read_text())
    (v1,) = [version for version in crd["spec"]["versions"] if version["name"] == "v1"]
    return jsonschema.Draft7Validator(strict(v1["schema"]["openAPIV3Schema"]))


def spec(**overrides) -> ClusterSpec:
    values = dict(
        cu_id="42",
        name="etl",
        cpus_per_node=2,
        memory_gb_per_node=4,
        worker_nodes=2,
        owner="alice@example.com",
    )
    values.update(overrides)
    return ClusterSpec(**values)


def render(cluster_spec: ClusterSpec) -> dict:
    return render_raycluster(
        cluster_spec,
        name=cluster_name(cluster_spec.cu_id),
        namespace="lakeport",
        image=IMAGE,
        token_secret="tok",
    )


# ---------------------------------------------------------------------------- manifests
def test_a_cluster_with_workers_renders_a_valid_raycluster(validator):
    manifest = render(spec())

    validator.validate(manifest)
    head = manifest["spec"]["headGroupSpec"]
    (workers,) = manifest["spec"]["workerGroupSpecs"]
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayCluster"
    assert manifest["spec"]["authOptions"] == {"mode": "token", "secretName": "tok"}
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 2
    for group in (head, workers):
        (container,) = group["template"]["spec"]["containers"]
        assert container["image"] == IMAGE
        assert container["resources"]["limits"] == {"cpu": "2", "memory": "4096Mi"}
        assert group["rayStartParams"]["num-cpus"] == "2"
        assert group["template"]["metadata"]["labels"] == manifest["metadata"]["labels"]
    head_ports = {
        port["name"]: port["containerPort"]
        for port in head["template"]["spec"]["containers"][0]["ports"]
    }
    assert head_ports["spark-host"] == SPARK_HOST_PORT and head_ports["dashboard"] == 8265


def test_a_head_only_cluster_renders_without_worker_groups(validator):
    manifest = render(spec(worker_nodes=0))

    validator.validate(manifest)
    assert "workerGroupSpecs" not in manifest["spec"]


def test_the_schema_check_rejects_what_kubernetes_would_drop(validator):
    manifest = render(spec())
    manifest["spec"]["workerGroupSpecs"][0]["rayStartParam"] = {"num-cpus": "2"}  # misspelt

    with pytest.raises(jsonschema.ValidationError, match="rayStartParam"):
        validator.validate(manifest)
    del manifest["spec"]["workerGroupSpecs"][0]["groupName"]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(manifest)


@pytest.mark.parametrize(
    "owner, cu_id",
    [
        ("alice@example.com", "42"),
        ("Ünïcode User <x@y>", "Weird ID / with spaces"),
        ("o" * 200, "c" * 200),
    ],
)
def test_names_and_labels_are_valid_for_kubernetes(owner, cu_id):
    manifest = render(spec(owner=owner, cu_id=cu_id))
    labels = manifest["metadata"]["labels"]
    name = manifest["metadata"]["name"]

    assert all(len(value) <= 63 and LABEL_VALUE.match(value) for value in labels.values())
    assert labels[LABEL_OWNER] and labels[LABEL_COMPUTE_UNIT]
    assert DNS_1123.match(name) and len(f"{name}-head-svc") <= 63
    assert cluster_name(cu_id) == name  # stable, so a restarted portal finds it again
    assert cluster_name(cu_id + "x") != name


# ----------------------------------------------------------------- recorded statuses
def raycluster(status: dict, workers: int = 2, **metadata) -> dict:
    obj = render(spec(worker_nodes=workers))
    obj["metadata"].update(metadata)
    obj["status"] = status
    return obj


def condition(kind: str, status: str, reason: str, message: str = "") -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-20T10:00:00Z",
        "observedGeneration": 1,
    }


PROVISIONING = {
    "conditions": [
        condition("HeadPodReady", "False", "HeadPodNotFound", "Head Pod not found"),
        condition(
            "RayClusterProvisioned",
            "False",
            "RayClusterPodsProvisioning",
            "RayCluster Pods are being provisioned for first time",
        ),
    ],
    "desiredCPU": "6",
    "desiredMemory": "12Gi",
    "desiredWorkerReplicas": 2,
    "maxWorkerReplicas": 2,
    "minWorkerReplicas": 2,
    "observedGeneration": 1,
    "lastUpdateTime": "2026-11-20T10:00:01Z",
}
READY = {
    "availableWorkerReplicas": 2,
    "readyWorkerReplicas": 2,
    "desiredWorkerReplicas": 2,
    "conditions": [
        condition("HeadPodReady", "True", "HeadPodRunningAndReady"),
        condition(
            "RayClusterProvisioned",
            "True",
            "AllPodRunningAndReadyFirstTime",
            "All Ray Pods are ready for the first time",
        ),
    ],
    "desiredCPU": "6",
    "desiredMemory": "12Gi",
    "desiredGPU": "0",
    "desiredTPU": "0",
    "endpoints": {"client": "10001", "dashboard": "8265", "gcs-server": "6379", "metrics": "8080"},
    "head": {
        "podIP": "10.244.0.12",
        "podName": "lakeport-cu-42-head-7x2kq",
        "serviceIP": "10.96.14.2",
        "serviceName": "lakeport-cu-42-head-svc",
    },
    "state": "ready",
    "stateTransitionTimes": {"ready": "2026-11-20T10:01:12Z"},
    "observedGeneration": 1,
    "lastUpdateTime": "2026-11-20T10:01:12Z",
}
QUOTA_EXCEEDED = {
    "conditions": [
        condition("HeadPodReady", "False", "HeadPodNotFound", "Head Pod not found"),
        condition("RayClusterProvisioned", "False", "RayClusterPodsProvisioning"),
        condition(
            "ReplicaFailure",
            "True",
            "FailedCreateHeadPod",
            'pods "lakeport-cu-42-head-4f8bd" is forbidden: exceeded quota: compute, '
            "requested: limits.cpu=2, used: limits.cpu=8, limited: limits.cpu=8",
        ),
    ],
    "desiredCPU": "6",
    "desiredMemory": "12Gi",
    "desiredWorkerReplicas": 2,
}
HEAD_LOST = {
    **READY,
    "readyWorkerReplicas": 2,
    "conditions": [
        condition("HeadPodReady", "False", "HeadPodNotFound", "Head Pod not found"),
        condition("RayClusterProvisioned", "True", "AllPodRunningAndReadyFirstTime"),
    ],
}
WORKER_RESTARTING = {
    **READY,
    "availableWorkerReplicas": 1,
    "readyWorkerReplicas": 1,
}
SUSPENDED = {
    "conditions": [
        condition("RayClusterProvisioned", "True", "AllPodRunningAndReadyFirstTime"),
        condition("RayClusterSuspended", "True", "RayClusterSuspended"),
    ],
    "state": "suspended",
}
# KubeRay before 1.2 reports only the state.
LEGACY_READY = {
    "state": "ready",
    "readyWorkerReplicas": 2,
    "desiredCPU": "6",
    "desiredMemory": "12Gi",
}


@pytest.mark.parametrize(
    "recorded, state, reason",
    [
        (PROVISIONING, UnitState.STARTING, ""),
        (READY, UnitState.RUNNING, ""),
        (
            QUOTA_EXCEEDED,
            UnitState.FAILED,
            'FailedCreateHeadPod: pods "lakeport-cu-42-head-4f8bd" is forbidden',
        ),
        (HEAD_LOST, UnitState.FAILED, "the head pod is no longer ready: Head Pod not found"),
        (WORKER_RESTARTING, UnitState.RUNNING, "degraded: 1 of 2 worker pods ready"),
        (SUSPENDED, UnitState.FAILED, "the RayCluster was suspended"),
        (LEGACY_READY, UnitState.RUNNING, ""),
        ({}, UnitState.STARTING, ""),
    ],
)
def test_recorded_statuses_map_to_compute_unit_states(recorded, state, reason):
    status = status_from_raycluster(raycluster(recorded))

    assert status.state == state
    assert status.reason.startswith(reason) if reason else status.reason == ""


def test_a_ready_cluster_reports_its_size():
    status = status_from_raycluster(raycluster(READY))

    assert status.alive_nodes == 3
    assert status.cpus_total == 6.0
    assert status.memory_total_bytes == 12 * 2**30


def test_provisioning_says_what_it_waits_for():
    status = status_from_raycluster(raycluster(PROVISIONING))

    assert status.progress_step == "pods starting: head not ready, 0 of 2 worker pods ready"


def test_a_cluster_being_deleted_is_terminating():
    obj = raycluster(READY, deletionTimestamp="2026-11-20T11:00:00Z")

    assert status_from_raycluster(obj).state == UnitState.TERMINATING


@pytest.mark.parametrize(
    "quantity, value", [("500m", 0.5), ("4Gi", 4 * 2**30), (3, 3), ("1.5", 1.5), ("2k", 2000)]
)
def test_kubernetes_quantities(quantity, value):
    assert parse_quantity(quantity) == pytest.approx(value)


# ----------------------------------------------------------------- API calls (mocked)
class FakeApiServer:
    """Just enough of the Kubernetes API for the backend, with recorded RayCluster statuses."""

    def __init__(
        self,
        validator,
        statuses: list[dict],
        pods: list[dict] | None = None,
        refuse_create: bool = False,
        crd_auth_options: set[str] | None = None,
    ) -> None:
        self.validator = validator
        # The fields an installed CRD defines under spec.authOptions (AUTH_OPTIONS_BY_KUBERAY);
        # the API server prunes the others before it stores and answers. None: the vendored CRD.
        self.crd_auth_options = crd_auth_options
        self.statuses = statuses
        self.pods = pods or []
        self.refuse_create = refuse_create
        self.objects: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer sa-token"
        path = request.url.path
        self.calls.append((request.method, path))
        if request.method == "POST":
            if self.refuse_create:
                return httpx.Response(
                    403,
                    json={
                        "kind": "Status",
                        "message": "rayclusters.ray.io is forbidden: "
                        'User "system:serviceaccount:lakeport:portal" cannot create',
                    },
                )
            body = json.loads(request.content)
            if body["kind"] == "RayCluster":
                self.validator.validate(body)
                if self.crd_auth_options is not None:
                    auth = body["spec"].pop("authOptions")
                    kept = {k: v for k, v in auth.items() if k in self.crd_auth_options}
                    if self.crd_auth_options:  # below 1.5.1 the CRD has no authOptions at all
                        body["spec"]["authOptions"] = kept
            self.objects[f"{path}/{body['metadata']['name']}"] = body
            return httpx.Response(201, json=body)
        if request.method == "GET" and path.endswith("/pods"):
            return httpx.Response(200, json={"items": self.pods})
        if path not in self.objects:
            return httpx.Response(404, json={"kind": "Status", "message": "not found", "code": 404})
        if request.method == "DELETE":
            del self.objects[path]
            return httpx.Response(200, json={"kind": "Status", "status": "Success"})
        obj = dict(self.objects[path])
        if obj["kind"] == "Secret":
            # The API server answers with base64 `data`; `stringData` is write-only.
            data = {
                key: base64.b64encode(value.encode()).decode()
                for key, value in obj["stringData"].items()
            }
            return httpx.Response(
                200, json={**{k: v for k, v in obj.items() if k != "stringData"}, "data": data}
            )
        obj["status"] = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return httpx.Response(200, json=obj)


CONNECTION = KubernetesConnection(
    api_url="https://k8s.test", token="sa-token", namespace="lakeport"
)


def backend_on(server: FakeApiServer) -> KubeRayBackend:
    return KubeRayBackend(
        CONNECTION, image=IMAGE, transport=httpx.MockTransport(server), poll_interval_s=0
    )


def test_start_creates_the_token_secret_and_the_raycluster_then_waits_until_ready(validator):
    server = FakeApiServer(validator, [PROVISIONING, PROVISIONING, READY])
    backend = backend_on(server)
    steps: list[str] = []

    handle = backend.start(spec(), progress=steps.append)

    name = cluster_name("42")
    secret = server.objects[f"/api/v1/namespaces/lakeport/secrets/{name}-ray-token"]
    assert (
        secret["stringData"] == {"auth_token": handle.auth_token} and len(handle.auth_token) == 64
    )
    assert f"/apis/ray.io/v1/namespaces/lakeport/rayclusters/{name}" in server.objects
    assert handle.dashboard_url == f"http://{name}-head-svc.lakeport.svc.cluster.local:8265"
    assert (
        handle.spark_host_url
        == f"http://{name}-head-svc.lakeport.svc.cluster.local:{SPARK_HOST_PORT}"
    )
    assert steps == [
        "creating the RayCluster",
        "pods starting: head not ready, 0 of 2 worker pods ready",
        "pods starting: head not ready, 0 of 2 worker pods ready",
        "cluster ready",
    ]

    stored = ClusterHandle.from_json(handle.to_json())
    assert stored.auth_token is None  # the token lives in the Secret, not in the portal's database
    adopted = backend_on(server).adopt(stored)
    assert adopted.state == UnitState.RUNNING and stored.auth_token == handle.auth_token

    backend.terminate(handle)
    assert server.objects == {}
    assert backend.status(handle).reason == f"RayCluster {name} no longer exists"
    backend.terminate(handle)  # idempotent


def test_a_cluster_that_never_gets_ready_fails_with_the_pod_problem_and_is_deleted(validator):
    pods = [
        {
            "metadata": {"name": "lakeport-cu-42-head-x"},
            "status": {
                "containerStatuses": [
                    {
                        "name": "ray-head",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": "Back-off pulling image",
                            }
                        },
                    }
                ]
            },
        }
    ]
    server = FakeApiServer(validator, [PROVISIONING], pods=pods)

    with pytest.raises(ClusterStartError) as error:
        backend_on(server).start(spec(start_timeout_s=0))

    assert str(error.value) == (
        "did not become healthy within 0 s: pods starting: head not ready, "
        "0 of 2 worker pods ready (lakeport-cu-42-head-x: ImagePullBackOff)"
    )
    assert server.objects == {}


def test_a_replica_failure_during_start_fails_at_once(validator):
    server = FakeApiServer(validator, [PROVISIONING, QUOTA_EXCEEDED])

    with pytest.raises(ClusterStartError, match="exceeded quota"):
        backend_on(server).start(spec())

    assert server.objects == {}


def test_a_forbidden_create_says_so(validator):
    server = FakeApiServer(validator, [READY], refuse_create=True)

    with pytest.raises(
        ClusterStartError,
        match=r"could not create the RayCluster: Kubernetes API answered 403: "
        r"rayclusters.ray.io is forbidden",
    ):
        backend_on(server).start(spec())


@pytest.mark.parametrize(
    ("kuberay", "lost"),
    [
        ("1.5.1", "spec.authOptions.secretName"),
        ("1.5.0", "spec.authOptions.mode, spec.authOptions.secretName"),
    ],
)
def test_a_cluster_whose_crd_drops_the_token_secret_is_refused_and_deleted(
    validator, kuberay, lost
):
    server = FakeApiServer(
        validator, [PROVISIONING, READY], crd_auth_options=AUTH_OPTIONS_BY_KUBERAY[kuberay]
    )
    steps: list[str] = []

    with pytest.raises(ClusterStartError) as error:
        backend_on(server).start(spec(), progress=steps.append)

    name = cluster_name("42")
    assert str(error.value) == (
        f"the Kubernetes API did not keep {lost} of RayCluster {name}: the cluster's RayCluster "
        f"CRD is older than KubeRay {KUBERAY_MINIMUM}, which Lakeport needs (with an older one "
        "Ray refuses the unit's token, or runs without authentication); upgrade the KubeRay "
        f"operator and its CRDs to {KUBERAY_MINIMUM} or newer"
    )
    assert steps == ["creating the RayCluster"]  # refused before waiting for any pod
    assert ("DELETE", f"/apis/ray.io/v1/namespaces/lakeport/rayclusters/{name}") in server.calls
    assert server.objects == {}  # the cluster, its token Secret and its policy are gone


def test_a_cluster_whose_crd_keeps_the_token_secret_starts(validator):
    server = FakeApiServer(
        validator, [PROVISIONING, READY], crd_auth_options=AUTH_OPTIONS_BY_KUBERAY[KUBERAY_MINIMUM]
    )

    handle = backend_on(server).start(spec())

    name = cluster_name("42")
    stored = server.objects[f"/apis/ray.io/v1/namespaces/lakeport/rayclusters/{name}"]
    assert stored["spec"]["authOptions"] == {"mode": "token", "secretName": f"{name}-ray-token"}
    assert backend_on(server).status(handle).state == UnitState.RUNNING


# --------------------------------------------------------------- deploy/kubernetes
DEPLOY_DIR = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
_VERBS = {"POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}


def _permission(request: httpx.Request) -> tuple[str, str, str]:
    """(apiGroup, resource, verb) of one API call, e.g. GET .../rayclusters/x -> ("ray.io", "rayclusters", "get")."""
    parts = request.url.path.strip("/").split("/")
    group = parts[1] if parts[0] == "apis" else ""
    after_namespace = parts[parts.index("namespaces") + 2 :]
    resource = after_namespace[0]
    if request.method in _VERBS:
        return group, resource, _VERBS[request.method]
    if len(after_namespace) > 1:
        return group, resource, "get"
    return group, resource, "watch" if request.url.params.get("watch") in ("1", "true") else "list"


class RecordingApiServer(FakeApiServer):
    """The fake API server, noting the RBAC permission each request needs."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.permissions: set[tuple[str, str, str]] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.permissions.add(_permission(request))
        return super().__call__(request)


def _public_methods(cls) -> set[str]:
    return {
        name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")
    }


def test_the_portal_role_allows_every_call_the_backend_makes(validator):
    """Every method of the backend interface, run against the fake API server: the Role must
    grant each (resource, verb) those requests need, and on Secrets (the clusters' Ray tokens)
    nothing more."""
    role = yaml.safe_load((DEPLOY_DIR / "role.yaml").read_text())
    allowed = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    started = RecordingApiServer(validator, [PROVISIONING, READY])
    backend = backend_on(started)
    handle = backend.start(spec())
    backend.status(handle)
    # KubeRay clusters do not start a Spark host with the cluster: nothing to ask the API server.
    assert backend.spark_host_launch(handle) is SparkHostLaunchState.NONE
    assert backend.spark_host_launch_log(handle) == ""
    assert backend.launch_spark_host(handle) is False  # nor when asked: the host is a Ray Job there
    # Its limits are the pods' own (requests = limits): nothing for the portal to read.
    assert backend.limit_usage(handle) is None and backend.over_limit(handle, None) is None
    stored = ClusterHandle.from_json(
        handle.to_json()
    )  # as the database keeps it: without the token
    backend.restore_token(stored)
    backend.adopt(
        ClusterHandle.from_json(handle.to_json())
    )  # a restarted portal: the token from the Secret
    backend.terminate(handle)
    never_ready = RecordingApiServer(validator, [PROVISIONING])
    with pytest.raises(ClusterStartError):
        backend_on(never_ready).start(spec(start_timeout_s=0))  # also lists pods to explain why
    exercised = {
        "start",
        "status",
        "spark_host_launch",
        "spark_host_launch_log",
        "launch_spark_host",
        "restore_token",
        "adopt",
        "terminate",
        "limit_usage",
        "over_limit",
    }
    # A new method on the interface must be exercised here too.
    assert _public_methods(ClusterBackend) | _public_methods(KubeRayBackend) == exercised

    needed = started.permissions | never_ready.permissions
    assert {("", "pods", "list"), ("", "secrets", "get"), ("", "secrets", "create")} <= needed
    assert needed <= allowed, f"the Role lacks {sorted(needed - allowed)}"
    secrets_needed = {permission for permission in needed if permission[1] == "secrets"}
    assert {permission for permission in allowed if permission[1] == "secrets"} == secrets_needed


def test_the_deployment_runs_as_the_bound_service_account():
    documents = {path.name: yaml.safe_load(path.read_text()) for path in DEPLOY_DIR.glob("*.yaml")}
    kustomization = documents.pop("kustomization.yaml")

    assert sorted(kustomization["resources"]) == sorted(documents)
    account = documents["serviceaccount.yaml"]["metadata"]["name"]
    pod = documents["deployment.yaml"]["spec"]["template"]["spec"]
    binding = documents["rolebinding.yaml"]
    assert pod["serviceAccountName"] == account
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": "lakeport"}
    ]
    assert binding["roleRef"]["name"] == documents["role.yaml"]["metadata"]["name"]
    (container,) = pod["containers"]
    refs = {ref.get("configMapRef", ref.get("secretRef"))["name"] for ref in container["envFrom"]}
    assert refs == {
        documents["configmap.yaml"]["metadata"]["name"],
        documents["secret.yaml"]["metadata"]["name"],
    }


# ------------------------------------------------------------ containment of users' code
# The cluster itself cannot run here: these check the objects the portal creates and the
# manifests it ships against the CRD and against each other.
def test_every_unit_pod_runs_without_an_api_token_as_non_root_without_privileges(validator):
    manifest = render_raycluster(
        spec(worker_nodes=2),
        name="lakeport-cu-7",
        namespace="lakeport",
        image=IMAGE,
        token_secret="t",
    )
    validator.validate(manifest)
    templates = [manifest["spec"]["headGroupSpec"]["template"]] + [
        group["template"] for group in manifest["spec"]["workerGroupSpecs"]
    ]
    for template in templates:
        pod = template["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert (
            pod["securityContext"]["runAsNonRoot"] is True
            and pod["securityContext"]["runAsUser"] != 0
        )
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
    head, worker = templates[0]["spec"]["containers"][0], templates[1]["spec"]["containers"][0]
    head["securityContext"]["capabilities"]["drop"].clear()  # each pod its own copy
    assert worker["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def _selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def test_the_shipped_policy_closes_every_unit_pod_but_for_the_portal_dns_catalog_and_endpoints():
    policy = yaml.safe_load((DEPLOY_DIR / "unit-networkpolicy.yaml").read_text())
    manifest = render_raycluster(
        spec(), name="lakeport-cu-7", namespace="lakeport", image=IMAGE, token_secret="t"
    )
    pod_labels = manifest["spec"]["headGroupSpec"]["template"]["metadata"]["labels"]
    assert policy["kind"] == "NetworkPolicy" and set(policy["spec"]["policyTypes"]) == {
        "Ingress",
        "Egress",
    }
    assert _selects(policy["spec"]["podSelector"], pod_labels)
    deployments = {
        path.stem: yaml.safe_load(path.read_text())
        for path in DEPLOY_DIR.glob("*.yaml")
        if "Deployment" in path.read_text()
    }
    portal_labels = [doc["spec"]["template"]["metadata"]["labels"] for doc in deployments.values()]
    assert not any(
        _selects(policy["spec"]["podSelector"], labels) for labels in portal_labels
    )  # not the portal
    (ingress,) = policy["spec"]["ingress"]
    assert {port["port"] for port in ingress["ports"]} == {SPARK_HOST_PORT, DASHBOARD_PORT}
    assert all(
        any(_selects(peer["podSelector"], labels) for labels in portal_labels)
        for peer in ingress["from"]
    )
    egress_ports = {port["port"] for rule in policy["spec"]["egress"] for port in rule["ports"]}
    assert (
        53 in egress_ports and len(policy["spec"]["egress"]) == 3
    )  # DNS, the catalog, the endpoints


def test_each_unit_gets_its_own_policy_before_its_pods_and_loses_it_with_them(validator):
    server = FakeApiServer(validator, [READY])
    backend = backend_on(server)
    handle = backend.start(spec())
    posts = [path for method, path in server.calls if method == "POST"]
    assert posts.index(backend.api.network_policies()) < posts.index(backend.api.rayclusters())
    policy = server.objects[backend.api.network_policies(f"{handle.details['name']}-within")]
    within = {"matchLabels": {"ray.io/cluster": handle.details["name"]}}
    assert policy["spec"]["podSelector"] == within
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": within}]}]
    assert policy["spec"]["egress"] == [{"to": [{"podSelector": within}]}]
    backend.terminate(handle)
    assert backend.api.network_policies(f"{handle.details['name']}-within") not in server.objects


# ---------------------------------------------------------------- the KubeRay it needs
# What ray-project/kuberay's RayCluster CRD (ray-operator/config/crd/bases/ray.io_rayclusters.yaml)
# holds under spec.authOptions, by tag: below v1.5.1 nothing (no authOptions: Ray runs without
# authentication), v1.5.1 `mode` only (the API server prunes `secretName`, KubeRay makes a token of
# its own and the portal's is refused), v1.6.0 on `mode`, `secretName` and `enableK8sTokenAuth`.
# KubeRay rejects `mode: token` below Ray 2.52.0 (ray-operator/controllers/ray/utils/validation.go).
RAY_MINIMUM = (2, 52, 0)
AUTH_OPTIONS_BY_KUBERAY = {
    "1.5.0": set(),
    "1.5.1": {"mode"},
    "1.6.0": {"mode", "secretName", "enableK8sTokenAuth"},
}


def _auth_options_schema() -> dict:
    crd = yaml.safe_load(CRD_PATH.read_text())
    (v1,) = [version for version in crd["spec"]["versions"] if version["name"] == "v1"]
    return v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["authOptions"]


def test_every_auth_option_the_portal_sets_exists_from_the_stated_kuberay_minimum_on():
    auth = render(spec())["spec"]["authOptions"]
    assert auth == {"mode": "token", "secretName": "tok"}
    schema = _auth_options_schema()  # the vendored CRD (1.7 line) has each of them
    assert (
        set(auth) <= set(schema["properties"]) and "token" in schema["properties"]["mode"]["enum"]
    )
    supported = [
        version for version, fields in AUTH_OPTIONS_BY_KUBERAY.items() if set(auth) <= fields
    ]
    assert min(supported, key=lambda v: tuple(map(int, v.split(".")))) == KUBERAY_MINIMUM
    ray_version = tuple(int(part) for part in render(spec())["spec"]["rayVersion"].split("."))
    assert ray_version >= RAY_MINIMUM


def test_the_deployment_states_the_kuberay_minimum_and_how_to_check_it():
    readme = (DEPLOY_DIR.parent / "README.md").read_text()
    assert f"| KubeRay | {KUBERAY_MINIMUM} |" in readme
    assert f"KubeRay {KUBERAY_MINIMUM} or newer" in readme
    assert "authOptions.properties.secretName" in readme  # the kubectl check of the installed CRD
    assert (
        f"KubeRay operator {KUBERAY_MINIMUM} or newer"
        in (DEPLOY_DIR / "kustomization.yaml").read_text()
    )
    assert f"| Ray | {'.'.join(map(str, RAY_MINIMUM))} |" in readme
