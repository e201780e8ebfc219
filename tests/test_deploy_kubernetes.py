"""The Kubernetes manifests (deploy/kubernetes/): settings that fit the identity provider, pods
under the runtime's seccomp profile, and unit DNS that works with NodeLocal DNSCache.

No cluster runs here: the manifests are read as `kubectl apply -k` would apply them.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import yaml

from app.config import Config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
# NodeLocal DNSCache's default listen address (kubernetes/kubernetes
# cluster/addons/dns/nodelocaldns/README.md: "169.254.20.10 by default").
NODELOCAL_DNS = ipaddress.ip_address("169.254.20.10")
CLOUD_METADATA = ipaddress.ip_address("169.254.169.254")


def documents() -> dict[str, dict]:
    return {path.name: yaml.safe_load(path.read_text()) for path in KUBERNETES.glob("*.yaml")}


def portal_settings() -> dict[str, str]:
    docs = documents()
    return {**docs["configmap.yaml"]["data"], **docs["secret.yaml"]["stringData"]}


def is_keycloak_issuer(issuer: str) -> bool:
    # Keycloak serves each realm's issuer at <base>/realms/<realm>.
    return "/realms/" in issuer


def test_execution_tokens_ask_for_no_warehouse_scope_with_a_keycloak_issuer():
    settings = portal_settings()
    assert is_keycloak_issuer(settings["LAKEPORT_OIDC_ISSUER"])
    # Keycloak grants no dynamic `warehouse:<id>` scope: asking for one fails every exchange.
    assert Config.from_env(settings).EXECUTION_TOKEN_WAREHOUSE_SCOPE is False


def test_compose_agrees_for_the_same_provider():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    portal = compose["x-portal-environment"]
    assert is_keycloak_issuer(portal["LAKEPORT_OIDC_ISSUER"])
    assert portal["LAKEPORT_EXECUTION_TOKEN_WAREHOUSE_SCOPE"] == "false"


def test_every_pod_of_the_portal_runs_under_the_runtime_default_seccomp_profile():
    workloads = {
        name: doc for name, doc in documents().items() if doc.get("kind") in ("Deployment", "Job")
    }
    assert {"deployment.yaml", "worker.yaml"} <= set(workloads)
    for name, workload in workloads.items():
        pod = workload["spec"]["template"]["spec"]
        pod_profile = pod.get("securityContext", {}).get("seccompProfile")
        for container in pod["containers"] + pod.get("initContainers", []):
            profile = container.get("securityContext", {}).get("seccompProfile", pod_profile)
            assert profile == {"type": "RuntimeDefault"}, (
                f"{name}: {container['name']} runs with {profile}"
            )
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


def _egress_rules_for_port(policy: dict, port: int, protocol: str) -> list[dict]:
    return [
        rule
        for rule in policy["spec"]["egress"]
        if any(
            p["port"] == port and p.get("protocol", "TCP") == protocol
            for p in rule.get("ports", [])
        )
    ]


def test_unit_pods_reach_dns_through_kube_dns_and_nodelocal_dnscache():
    policy = documents()["unit-networkpolicy.yaml"]
    for protocol in ("UDP", "TCP"):
        (rule,) = _egress_rules_for_port(policy, 53, protocol)
        blocks = [
            ipaddress.ip_network(peer["ipBlock"]["cidr"])
            for peer in rule["to"]
            if "ipBlock" in peer
        ]
        assert any(NODELOCAL_DNS in block for block in blocks), protocol
        assert any(
            peer.get("podSelector", {}).get("matchLabels", {}).get("k8s-app") == "kube-dns"
            for peer in rule["to"]
        )
        # The cache's address only: not the rest of link-local, which holds cloud metadata.
        assert all(block.num_addresses == 1 for block in blocks)


def test_no_unit_egress_reaches_cloud_metadata():
    policy = documents()["unit-networkpolicy.yaml"]
    for rule in policy["spec"]["egress"]:
        for peer in rule["to"]:
            if "ipBlock" in peer:
                block = peer["ipBlock"]
                excepted = [ipaddress.ip_network(cidr) for cidr in block.get("except", [])]
                inside = CLOUD_METADATA in ipaddress.ip_network(block["cidr"])
                assert not inside or any(CLOUD_METADATA in network for network in excepted), block
