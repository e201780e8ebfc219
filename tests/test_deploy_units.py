"""Compute units in the production compose file (deploy/): the `existing` Ray cluster `ray-head`,
the worker that drives it, the token they share and the network that confines it.

No container runs here (no Docker engine). compose.yaml is read as `docker compose` reads it
(tests/test_deploy_compose.py's interpolation, .env.example with stand-ins), and each wire is
followed the way the portal follows it: the worker's listing is parsed by the portal's own parser
and attached to by the `existing` backend against a stand-in of the head's dashboard that answers
only at the service's address and only to the token compose hands the head; the head's start
script runs under bash with a stand-in `ray`.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from app.config import PROJECT_ROOT, SETTINGS, Config
from app.ray_clusters.base import ClusterSpec, ClusterStartError
from app.ray_clusters.existing import ExistingClusterBackend
from app.ray_clusters.listed import parse_listed_clusters
from app.ray_clusters.local import allowed_endpoints
from app.states import UnitState
from tests.deploy_files import (
    COMPOSE,
    DEPLOY,
    DOCKERFILE,
    ENV_EXAMPLE,
    FILLED_ENV,
    PORTAL_ENV,
    PYPROJECT,
    RAW,
    SERVICES,
    environment,
    image_pins,
    pins,
)

WORKER, HEAD = SERVICES["worker"], SERVICES["ray-head"]
WORKER_ENV, HEAD_ENV = environment(WORKER), environment(HEAD)
SECRETS = COMPOSE.get("secrets", {})
NETWORKS = COMPOSE.get("networks", {})
HEAD_SCRIPT = HEAD["command"][0]  # `$$` already undone, as compose hands it to the shell


def networks_of(service: dict) -> set[str]:
    """The networks a service joins; a service that names none is on `default`."""
    joined = service.get("networks") or ["default"]
    return set(joined if isinstance(joined, list) else joined.keys())


def mounts_of(service: dict) -> dict[str, dict]:
    """The secrets a service mounts, by source, in the long form (target defaulted as compose does)."""
    found = {}
    for entry in service.get("secrets", []):
        entry = {"source": entry} if isinstance(entry, str) else dict(entry)
        target = entry.get("target") or entry["source"]
        entry["target"] = target if target.startswith("/") else f"/run/secrets/{target}"
        found[entry["source"]] = entry
    return found


def expanded_ports(entries: list) -> set[int]:
    ports = set()
    for entry in entries:
        first, _, last = str(entry).partition("-")
        ports |= set(range(int(first), int(last or first) + 1))
    return ports


def command_option(script: str, name: str) -> str:
    match = re.search(rf"--{name}=(\S+)", script)
    assert match, f"the head's `ray start` sets no --{name}"
    return match.group(1).strip('"')


(LISTED,) = json.loads(WORKER_ENV["LAKEPORT_RAY_CLUSTERS"])
(TOKEN_SECRET,) = [
    name for name, mount in mounts_of(WORKER).items() if mount["target"] == LISTED["token_file"]
]


def worker_listing(token_file: Path) -> str:
    """The worker's LAKEPORT_RAY_CLUSTERS with its token file where this test wrote the secret."""
    return json.dumps([{**LISTED, "token_file": str(token_file)}])


def test_the_listed_cluster_is_the_ray_head_service_on_a_network_the_worker_shares():
    address = urlsplit(LISTED["address"])
    assert SERVICES.get(address.hostname) is HEAD
    assert address.port == int(command_option(HEAD_SCRIPT, "dashboard-port"))
    assert (
        command_option(HEAD_SCRIPT, "dashboard-host") == "0.0.0.0"
    )  # Ray's default is loopback only
    shared = networks_of(WORKER) & networks_of(HEAD)
    assert shared, "the worker cannot reach the Ray head"
    assert all(name in NETWORKS for name in shared)


def test_the_portal_lists_the_same_cluster_without_its_token():
    (portal_listed,) = json.loads(PORTAL_ENV["LAKEPORT_RAY_CLUSTERS"])
    assert "token" not in portal_listed and "token_file" not in portal_listed
    assert portal_listed == {key: value for key, value in LISTED.items() if key != "token_file"}
    kinds = Config.from_env(PORTAL_ENV).CU_KINDS.split(",")
    assert kinds == ["existing"]  # `local` needs privileges this stack does not give (README.md)


def test_the_worker_attaches_a_unit_to_the_head_with_the_secrets_token(tmp_path):
    """The worker's listing, parsed as the worker parses it, against a stand-in for the head's
    dashboard that answers at the service's address, with the token compose gives the head."""
    token = "test-ray-cluster-token"
    (tmp_path / "ray_token").write_text(token + "\n")  # compose copies the value as it is in .env
    head_address = LISTED["address"]
    asked = []

    def ray_head(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if f"{request.url.scheme}://{request.url.host}:{request.url.port}" != head_address:
            return httpx.Response(502)
        if request.headers.get("Authorization") != f"Bearer {token}":
            return httpx.Response(401)
        if request.url.path == "/api/v0/nodes":
            node = {
                "node_id": "head",
                "is_head_node": True,
                "state": "ALIVE",
                "resources_total": {
                    "CPU": float(command_option(HEAD_SCRIPT, "num-cpus")),
                    "memory": 8 * 2**30,
                },
            }
            return httpx.Response(200, json={"data": {"result": {"result": [node]}}})
        if request.url.path == "/api/cluster_status":
            return httpx.Response(
                200,
                json={"data": {"clusterStatus": {"loadMetricsReport": {"usage": {"CPU": [0, 4]}}}}},
            )
        return httpx.Response(404)

    config = Config.from_env(
        {**WORKER_ENV, "LAKEPORT_RAY_CLUSTERS": worker_listing(tmp_path / "ray_token")}
    )
    config.validate()
    backend = ExistingClusterBackend(
        parse_listed_clusters(config.RAY_CLUSTERS), transport=httpx.MockTransport(ray_head)
    )
    (cluster,) = backend.clusters.values()
    handle = backend.start(
        ClusterSpec(
            cu_id="compose-unit",
            name="first",
            cluster_name=cluster.name,
            spark_host_port=cluster.ports()[0],
        )
    )
    assert backend.status(handle).state == UnitState.RUNNING
    spark_host = urlsplit(handle.spark_host_url)
    assert SERVICES.get(spark_host.hostname) is HEAD
    assert spark_host.port in expanded_ports(HEAD["expose"])
    assert "/api/v0/nodes" in asked

    # The portal's listing has no token: it could not drive the cluster, and does not have to.
    portal_side = ExistingClusterBackend(
        parse_listed_clusters(PORTAL_ENV["LAKEPORT_RAY_CLUSTERS"]),
        transport=httpx.MockTransport(ray_head),
    )
    with pytest.raises(ClusterStartError, match="refused the cluster token"):
        portal_side.start(
            ClusterSpec(
                cu_id="from-portal",
                name="x",
                cluster_name=cluster.name,
                spark_host_port=cluster.ports()[0],
            )
        )


def test_the_spark_host_ports_are_reachable_from_the_units_network_only():
    listed_ports = set(parse_listed_clusters(PORTAL_ENV["LAKEPORT_RAY_CLUSTERS"])[0].ports())
    assert listed_ports <= expanded_ports(HEAD["expose"])
    assert int(urlsplit(LISTED["address"]).port) in expanded_ports(HEAD["expose"])
    assert "ports" not in HEAD  # nothing published on the machine's interfaces
    (network,) = networks_of(HEAD)
    assert NETWORKS[network].get("internal") is True
    assert network != "default" and networks_of(SERVICES["portal"]).isdisjoint({network})


def test_the_units_network_reaches_the_catalog_and_minio_and_nothing_else():
    (network,) = networks_of(HEAD)
    members = {name for name, service in SERVICES.items() if network in networks_of(service)}
    endpoints = allowed_endpoints(
        PORTAL_ENV["LAKEPORT_LAKEKEEPER_URL"], PORTAL_ENV["LAKEPORT_CU_ALLOWED_ENDPOINTS"]
    )
    reachable = {endpoint.host for endpoint in endpoints}
    assert reachable == {"lakekeeper", "minio"}
    assert members == {"ray-head", "worker"} | reachable
    # The allowed endpoints are the stack's MinIO and nothing else, on the port MinIO serves S3 on.
    assert {(e.host, e.port) for e in endpoints} == {("lakekeeper", 8181), ("minio", 9000)}
    assert SERVICES["minio"]["command"] == ["server", "/data"]  # no --address: S3 on :9000
    readme = (DEPLOY / "README.md").read_text()
    assert "endpoint `http://minio:9000`" in readme  # the first warehouse the README registers


def test_the_token_secret_reaches_the_worker_and_the_head_and_nothing_else():
    holders = {name for name, service in SERVICES.items() if TOKEN_SECRET in mounts_of(service)}
    assert holders == {"worker", "ray-head"}
    source = RAW["secrets"][TOKEN_SECRET]["environment"]
    assert source in ENV_EXAMPLE and ENV_EXAMPLE[source] == ""  # the example ships no token
    text = (DEPLOY / "compose.yaml").read_text()
    assert not re.search(rf"\$\{{{source}\b", text)  # never in an environment or a command line
    head_mount = mounts_of(HEAD)[TOKEN_SECRET]
    assert (
        HEAD_ENV["RAY_AUTH_MODE"] == "token"
        and HEAD_ENV["RAY_AUTH_TOKEN_PATH"] == head_mount["target"]
    )
    assert "RAY_AUTH_TOKEN" not in HEAD_ENV


def test_each_holder_of_the_token_can_read_it_and_only_its_own_user():
    portal_uid = re.search(
        r"useradd [^\n]*--uid (\d+) lakeport", (PROJECT_ROOT / "Dockerfile").read_text()
    ).group(1)
    worker_mount, head_mount = mounts_of(WORKER)[TOKEN_SECRET], mounts_of(HEAD)[TOKEN_SECRET]
    assert (worker_mount["uid"], worker_mount["gid"]) == (
        portal_uid,
        portal_uid,
    )  # useradd's own group
    # rayproject/ray's user: RAY_UID=1000, RAY_GID=100 (ray-project/ray docker/base-deps/Dockerfile).
    assert (head_mount["uid"], head_mount["gid"]) == ("1000", "100")
    assert re.search(r"^USER ray$", DOCKERFILE, re.MULTILINE)
    assert worker_mount["mode"] == head_mount["mode"] == 0o400


def test_the_head_runs_the_compute_image_at_the_versions_the_portal_pins():
    build = HEAD["build"]
    assert (
        DEPLOY / build["context"] / build["dockerfile"]
    ).resolve() == PROJECT_ROOT / "compute" / "Dockerfile"
    assert HEAD["image"] == SETTINGS["KUBERAY_IMAGE"].default  # the units' one image
    project = pins(PYPROJECT["project"]["dependencies"])
    image = image_pins()
    for package in ("ray", "raydp", "pyspark", "pyiceberg"):
        assert image[package] == project[package], package
    # The worker (the portal's image, pyproject's Ray) submits the Spark host's Ray Job to this head.
    assert re.search(
        rf"^FROM rayproject/ray:{re.escape(project['ray'])}-py\d+$", DOCKERFILE, re.MULTILINE
    )


def run_head_script(tmp_path, token: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The head's start script under bash, with stand-ins for `ray` (records its arguments) and
    `python` (the container's address)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ray").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/ray-args\n')
    (bin_dir / "python").write_text("#!/bin/sh\necho 172.30.0.7\n")
    for stand_in in bin_dir.iterdir():
        stand_in.chmod(0o755)
    (tmp_path / "ray_token").write_text(token)
    env = {
        **HEAD_ENV,
        "RAY_AUTH_TOKEN_PATH": str(tmp_path / "ray_token"),
        "PATH": f"{bin_dir}:/usr/bin:/bin",
    }
    run = subprocess.run(
        ["bash", "-c", HEAD_SCRIPT], env=env, capture_output=True, text=True, timeout=30
    )
    args_file = tmp_path / "ray-args"
    return run, args_file.read_text().splitlines() if args_file.exists() else []


def test_the_head_starts_with_its_address_and_refuses_an_empty_token(tmp_path):
    run, args = run_head_script(tmp_path, "")
    assert run.returncode == 1 and args == []
    assert "RAY_CLUSTER_TOKEN" in run.stderr

    run, args = run_head_script(tmp_path, "a-token")
    assert run.returncode == 0, run.stderr
    assert args[:3] == ["start", "--head", "--block"]
    # The address the Spark hosts bind to (ray.util.get_node_ip_address) and the worker reaches.
    assert "--node-ip-address=172.30.0.7" in args
    assert not any("token" in arg.lower() for arg in args)  # the token stays in its file


def test_the_heads_health_needs_token_authentication_on():
    check = HEAD["healthcheck"]["test"]
    assert check[:3] == ["CMD", "python", "-c"]
    compile(check[3], "healthcheck", "exec")
    assert "/api/gcs_healthz" in check[3] and "'authentication_mode'] == 'token'" in check[3]
    assert int(command_option(HEAD_SCRIPT, "num-cpus")) >= 1


def test_an_empty_or_missing_token_stops_the_worker_with_the_setting_named(tmp_path):
    # README.md's one-liner gives every empty entry of .env.example a random value, this one too.
    assert FILLED_ENV[RAW["secrets"][TOKEN_SECRET]["environment"]]
    (tmp_path / "ray_token").write_text("")
    for token_file, problem in (
        (tmp_path / "ray_token", "is empty"),
        (tmp_path / "absent", "is not a readable file"),
    ):
        with pytest.raises(ValueError, match=f"^LAKEPORT_RAY_CLUSTERS: .*token_file.*{problem}"):
            Config.from_env(
                {**WORKER_ENV, "LAKEPORT_RAY_CLUSTERS": worker_listing(token_file)}
            ).validate()
