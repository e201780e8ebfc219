"""Operator-listed Ray clusters (`LAKEPORT_RAY_CLUSTERS`): the setting, the create form's choice
and each unit's Spark host port. No Ray runs here (see test_shared_ray_cluster.py for that)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

import pytest
from sqlmodel import Session, select

from app import create_app
from app.compute_units import service as unit_service
from app.config import Config
from app.db import engine
from app.models import ComputeUnit, User
from app.ray_clusters.base import ClusterHandle
from app.ray_clusters.listed import clusters_for, parse_listed_clusters
from app.spark_host.client import SparkHostClient, with_spark_host_secret
from tests.factories import AuthActions

SHARED = {
    "name": "shared",
    "address": "http://ray-head.example:8265/",
    "token": "t0k3n",
    "spark_host_ports": "8290-8297",
}
ALICES = {
    "name": "alices",
    "address": "https://ray.example",
    "spark_host_ports": "9000",
    "users": ["Alice@Example.test"],
}


# ---------------------------------------------------------------- the setting
def test_a_listing_is_parsed_with_ports_users_and_tokens(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    filed = {
        **{key: value for key, value in SHARED.items() if key != "token"},
        "name": "filed",
        "token_file": str(token_file),
    }
    shared, alices, filed = parse_listed_clusters(json.dumps([SHARED, ALICES, filed]))

    assert (shared.address, shared.read_token(), list(shared.ports())) == (
        "http://ray-head.example:8265",
        "t0k3n",
        list(range(8290, 8298)),
    )
    assert (alices.read_token(), list(alices.ports())) == (None, [9000])
    assert filed.read_token() == "from-a-file"
    token_file.write_text("rotated")
    assert filed.read_token() == "rotated"  # read at each use
    assert shared.allows("bob@example.test") and alices.allows("alice@example.test")
    assert not alices.allows("bob@example.test")
    assert parse_listed_clusters("") == ()


@pytest.mark.parametrize(
    "listing, message",
    [
        ("{not json", "not valid JSON"),
        ('{"name": "x"}', "must be a JSON list"),
        ([SHARED, SHARED], "cluster names must be unique: shared listed more than once"),
        ([{**SHARED, "name": "Shared Cluster"}], "cluster 0 ('Shared Cluster'): `name` must be"),
        (
            [{**SHARED, "address": "ray-head:8265"}],
            "cluster 0 ('shared'): `address` must be the dashboard",
        ),
        ([{**SHARED, "token_file": "/etc/hostname"}], "give `token` or `token_file`, not both"),
        ([{**SHARED, "token": ""}], "`token` must be a non-empty string"),
        (
            [{**ALICES, "token_file": "/no/such/file"}],
            "cluster 0 ('alices'): `token_file` '/no/such/file' is not a",
        ),
        (
            [{**SHARED, "spark_host_ports": "8299-8290"}],
            "`spark_host_ports` must be a port or range",
        ),
        (
            [{**SHARED, "spark_host_ports": "80"}],
            "`spark_host_ports` must be a port or range between 1024",
        ),
        ([{**SHARED, "spark_host_ports": 8290}], "`spark_host_ports` must be a port or range"),
        (
            [ALICES, {**SHARED, "users": "alice@example.test"}],
            "cluster 1 ('shared'): `users` must be a list",
        ),
        ([{**SHARED, "tokens": "x"}], "unknown key(s) tokens"),
        ([{**SHARED, "spark_host_ports": None}], "`spark_host_ports` must be"),
    ],
)
def test_a_wrong_listing_is_refused_at_startup_naming_entry_and_field(
    portal_config, listing, message
):
    raw = listing if isinstance(listing, str) else json.dumps(listing)

    with pytest.raises(ValueError) as refused:
        create_app(replace(portal_config, RAY_CLUSTERS=raw))

    assert str(refused.value).startswith("LAKEPORT_RAY_CLUSTERS: ")
    assert message in str(refused.value)


def test_the_listing_comes_from_the_environment_and_holds_no_default_cluster():
    assert Config.from_env({}).RAY_CLUSTERS == ""
    assert Config.from_env(
        {"LAKEPORT_RAY_CLUSTERS": json.dumps([SHARED])}
    ).RAY_CLUSTERS == json.dumps([SHARED])


def test_a_users_clusters_are_those_that_allow_them():
    raw = json.dumps([SHARED, ALICES])
    assert [c.name for c in clusters_for(raw, "ALICE@example.test")] == ["shared", "alices"]
    assert [c.name for c in clusters_for(raw, "bob@example.test")] == ["shared"]


# ------------------------------------------------ the Spark host's secret, per unit
def test_each_unit_gets_its_own_spark_host_secret_which_is_never_stored():
    first = with_spark_host_secret(
        ClusterHandle(backend="existing", cu_id="7", spark_host_url="http://h:1"), "key"
    )
    stored = first.to_json()
    again = with_spark_host_secret(ClusterHandle.from_json(stored), "key")
    other_unit = with_spark_host_secret(ClusterHandle(backend="existing", cu_id="8"), "key")
    same_id_new_nonce = with_spark_host_secret(ClusterHandle(backend="existing", cu_id="7"), "key")

    assert first.spark_host_secret not in stored and len(first.spark_host_secret) == 64
    assert again.spark_host_secret == first.spark_host_secret  # derived again after a restart
    assert again.spark_host_namespace == first.spark_host_namespace
    assert (
        with_spark_host_secret(ClusterHandle.from_json(stored), "other key").spark_host_secret
        != first.spark_host_secret
    )
    assert (
        len(
            {
                first.spark_host_secret,
                other_unit.spark_host_secret,
                same_id_new_nonce.spark_host_secret,
            }
        )
        == 3
    )
    assert (
        len(
            {
                first.spark_host_namespace,
                other_unit.spark_host_namespace,
                same_id_new_nonce.spark_host_namespace,
            }
        )
        == 3
    )
    with pytest.raises(ValueError, match="no Spark host secret"):
        SparkHostClient(ClusterHandle.from_json(stored))


# ------------------------------------------------------------------- the form
@pytest.fixture
def app(portal_config):
    return create_app(
        replace(portal_config, CU_KINDS="local,existing", RAY_CLUSTERS=json.dumps([SHARED, ALICES]))
    )


def create_form(auth, **fields):
    return {
        "name": "attached",
        "kind": "existing",
        "cpus": "1",
        "memory_gb": "1",
        "worker_nodes": "0",
        "csrf_token": auth.csrf_token(),
        **fields,
    }


def test_the_form_offers_only_the_clusters_the_user_may_use(client, auth):
    auth.login("alice")
    alices_page = client.get("/compute-units/new").get_data(as_text=True)
    auth.logout()
    auth.login("bob")
    bobs_page = client.get("/compute-units/new").get_data(as_text=True)

    assert '<option value="shared"' in alices_page and '<option value="alices"' in alices_page
    assert '<option value="shared"' in bobs_page and '<option value="alices"' not in bobs_page
    for page in (alices_page, bobs_page):  # nothing of the listing but names reaches a page
        assert (
            "ray-head.example" not in page and "t0k3n" not in page and 'name="address"' not in page
        )


@pytest.mark.parametrize("cluster", ["alices", "elsewhere", "", "http://ray-head.example:8265"])
def test_a_cluster_not_listed_for_the_user_is_refused_like_a_missing_one(
    client, auth, db_engine, cluster
):
    auth.login("bob")
    with Session(db_engine) as db:
        before = len(db.exec(select(ComputeUnit)).all())

    response = client.post("/compute-units/", data=create_form(auth, ray_cluster=cluster))

    assert response.status_code == 422
    assert "Choose one of the Ray clusters offered here." in response.get_data(as_text=True)
    with Session(db_engine) as db:
        assert len(db.exec(select(ComputeUnit)).all()) == before


def test_without_any_cluster_for_the_user_the_existing_kind_is_not_offered(portal_config, auth):
    alone = create_app(
        replace(portal_config, CU_KINDS="local,existing", RAY_CLUSTERS=json.dumps([ALICES]))
    )
    bob = AuthActions(alone.test_client(), auth.passwords)
    bob.login("bob")
    page = bob.client.get("/compute-units/new").get_data(as_text=True)

    assert '<option value="local"' in page and '<option value="existing"' not in page
    assert 'name="ray_cluster"' not in page
    refused = bob.client.post("/compute-units/", data=create_form(bob, ray_cluster="alices"))
    assert (
        refused.status_code == 422
        and "Choose one of the kinds offered here." in refused.get_data(as_text=True)
    )


# ------------------------------------------------------------- port allocation
def _user(db: Session, email: str) -> User:
    user = db.exec(select(User).where(User.email == email)).first()
    if user is None:
        user = User(issuer="test", subject=email, email=email, name=email)
        db.add(user)
        db.commit()
    return user


def _create_on_cluster(app, email: str, name: str) -> ComputeUnit:
    """What `unit_service.create` does for an existing unit, in a session of its own (a portal process)."""
    with app.app_context(), Session(engine(), expire_on_commit=False) as db:
        cu = unit_service._insert_with_port(
            db,
            _user(db, email),
            {
                "name": name,
                "kind": "existing",
                "cpus": 1,
                "memory_gb": 1.0,
                "worker_nodes": 0,
                "ray_cluster": "shared",
            },
        )
        db.commit()
        return cu


def test_live_units_on_one_cluster_hold_distinct_ports_even_when_created_at_once(app, db_engine):
    with Session(db_engine) as db:  # earlier tests' units on "shared" must not count
        for cu in db.exec(select(ComputeUnit).where(ComputeUnit.ray_cluster == "shared")):
            cu.state = "TERMINATED"
            db.add(cu)
        db.commit()
    with Session(db_engine) as db:
        _user(db, "port-user-0@example.test"), _user(db, "port-user-1@example.test")
    created: list[ComputeUnit] = []
    errors: list[Exception] = []
    start = threading.Barrier(6)

    def create(index: int) -> None:
        start.wait()
        try:
            created.append(
                _create_on_cluster(app, f"port-user-{index % 2}@example.test", f"at-once-{index}")
            )
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=create, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(cu.spark_host_port for cu in created) == list(range(8290, 8296))
    # Two ports left; then the range is full, with a message that says so.
    more = [
        _create_on_cluster(app, "port-user-0@example.test", f"more-{i}").spark_host_port
        for i in range(2)
    ]
    assert more == [8296, 8297]
    with pytest.raises(
        unit_service.ComputeUnitError,
        match="All 8 Spark host ports of the Ray cluster shared are held",
    ):
        _create_on_cluster(app, "port-user-0@example.test", "one-too-many")
    # An ended unit's port is free again; other clusters' and local units' ports do not count.
    with Session(db_engine) as db:
        ended = db.get(ComputeUnit, created[0].id)
        ended.state = "TERMINATED"
        db.add_all(
            [
                ended,
                ComputeUnit(
                    owner_id=ended.owner_id,
                    name="elsewhere",
                    kind="existing",
                    ray_cluster="alices",
                    spark_host_port=8291,
                    state="RUNNING",
                ),
            ]
        )
        db.commit()
    assert (
        _create_on_cluster(app, "port-user-1@example.test", "reuse").spark_host_port
        == created[0].spark_host_port
    )
    with Session(db_engine) as db:
        for cu in db.exec(
            select(ComputeUnit).where(ComputeUnit.ray_cluster.in_(("shared", "alices")))
        ):
            cu.state = "TERMINATED"
            db.add(cu)
        db.commit()
