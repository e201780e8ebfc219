"""Changes at the identity provider reach Lakeport within the bound (app/auth/work.py,
docs/identity.md), tried against the real local provider changed while it runs: bob removed from
`analytics` loses the group's write share on his pages, through his personal token and in the
catalog (the group role's assignees, and a run token of his); a demoted operator loses the
operators' page; a disabled user's session ends and tokens are refused until the next sign-in;
groups nobody confirmed within the bound count as none; a session ends after its absolute
lifetime. The worker's pass is driven directly instead of waiting for its period."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import replace
from datetime import timedelta

import httpx
import pytest
from sqlmodel import Session, select

from app import create_app
from app.auth import provider_grant, work
from app.auth.service import SIGNED_IN_KEY
from app.compute_units import door
from app.extensions import lakekeeper
from app.lakekeeper.tokens import lakekeeper_user_id
from app.models import AuditEvent, Execution, GroupRole, User, Warehouse, utcnow
from app.tokens import service as tokens
from devstack.oidc_provider import TEST_USERS, change_user, sign_in_portal_client
from tests.factories import (
    can_read_and_write,
    csrf,
    execution_row,
    make_user,
    register_warehouse,
    reload,
    share,
    sign_in_as,
    unit_row,
    update_row,
    warehouse_row,
    workflow_for,
)

BOUND, CHECK = 60.0, 20.0


@pytest.fixture
def identity_app(portal_config, lakehouse):
    return create_app(
        replace(
            portal_config,
            LAKEKEEPER_URL=lakehouse.catalog_url,
            IDENTITY_BOUND_SECONDS=BOUND,
            IDENTITY_CHECK_SECONDS=CHECK,
        )
    )


@pytest.fixture
def provider_users(oidc_provider):
    """Changes to the provider's users, undone after the test (other tests expect them as listed)."""
    changed = []

    def change(username: str, **values):
        changed.append(username)
        return change_user(oidc_provider, username, **values)

    yield change
    for username in changed:
        change_user(oidc_provider, username, groups=list(TEST_USERS[username].groups), enabled=True)


def signed_in(app, username: str):
    client = app.test_client()
    answer = sign_in_portal_client(client, username, TEST_USERS[username].password)
    assert answer.status_code == 302, answer.get_data(as_text=True)[:500]
    return client


def user_named(db_engine, username: str) -> User:
    with Session(db_engine) as db:
        return db.exec(select(User).where(User.subject == TEST_USERS[username].sub)).one()


def api(client, token: str, path: str):
    return client.get(f"/api/v1{path}", headers={"Authorization": f"Bearer {token}"})


def start_probe(client, token: str, workflow, warehouse):
    """The API's start of `workflow` into `warehouse` on a unit that does not exist: refused on the
    unit (400) while the workflow is shared with the token's owner, 404 once it is not; nothing starts."""
    return client.post(
        "/api/v1/executions",
        headers={"Authorization": f"Bearer {token}"},
        json={
            "workflow_id": workflow.id,
            "version": 1,
            "compute_unit_id": 2**31 - 1,
            "warehouse_id": warehouse.id,
        },
    )


def revalidate(app) -> None:
    """The worker's identity pass, once (what the worker does every IDENTITY_CHECK_SECONDS)."""
    with app.app_context():
        work.revalidate()


def test_bob_removed_from_analytics_loses_its_share_on_pages_token_and_catalog(
    identity_app, lakehouse, db_engine, provider_users
):
    app = identity_app
    provider_users("bob", groups=["analytics"])
    bob_client = signed_in(app, "bob")
    bob = user_named(db_engine, "bob")
    assert bob.refresh_token_sealed and "builder" not in bob.refresh_token_sealed
    owner = make_user(db_engine)
    owner_client = app.test_client()
    sign_in_as(owner_client, owner)
    warehouse = reload(
        db_engine,
        Warehouse,
        register_warehouse(owner_client, lakehouse, f"team-{secrets.token_hex(2)}"),
    )
    assert (
        share(owner_client, warehouse, kind="group", group="analytics", level="write").status_code
        == 200
    )
    workflow = workflow_for(db_engine, owner)
    assert (
        owner_client.post(
            f"/workflows/{workflow.id}/shares",
            headers={"HX-Request": "true"},
            data={
                "kind": "group",
                "group": "analytics",
                "level": "run",
                "csrf_token": csrf(owner_client),
            },
        ).status_code
        == 200
    )
    with app.app_context():
        token = tokens.create(bob, "nightly", "run", 30).text
        with Session(db_engine) as db:
            role_id = db.exec(
                select(GroupRole.lakekeeper_role_id).where(GroupRole.group_name == "analytics")
            ).one()
        assert lakeport_id(bob) in lakekeeper().role_members(role_id)
        run_token = door.run_token(warehouse, bob)
    assert bob_client.get(f"/warehouses/{warehouse.id}").status_code == 200
    assert (
        start_probe(bob_client, token, workflow, warehouse).status_code == 400
    )  # shared: only the unit is wrong
    assert can_read_and_write(lakehouse, warehouse, run_token) == (200, 200)

    provider_users("bob", groups=[])  # an administrator removes bob from analytics at the provider
    revalidate(app)  # the worker's next pass, at most IDENTITY_CHECK_SECONDS later

    bob = user_named(db_engine, "bob")
    assert bob.group_names == [] and bob.suspended_at is None
    assert utcnow() - bob.groups_checked_at < timedelta(seconds=5)
    assert bob_client.get("/").status_code == 200  # still signed in, only without the group
    assert bob_client.get(f"/warehouses/{warehouse.id}").status_code == 404
    assert (
        start_probe(bob_client, token, workflow, warehouse).status_code == 404
    )  # no longer shared
    assert api(bob_client, token, "/workflows").status_code == 200  # the token itself still works
    with app.app_context():
        assert lakeport_id(bob) not in lakekeeper().role_members(role_id)
    # A run's token minted before: the warehouse is no longer there for it (unseen answers as
    # missing, 404, as Lakekeeper v0.13.3 does: devstack/devcatalog/README.md).
    assert can_read_and_write(lakehouse, warehouse, run_token) == (404, 404)
    with Session(db_engine) as db:
        event = db.exec(
            select(AuditEvent)
            .where(AuditEvent.action == "user.groups_change", AuditEvent.object_id == str(bob.id))
            .order_by(AuditEvent.id.desc())
        ).first()
    assert json.loads(event.detail) == {"before": ["analytics"], "after": []}

    provider_users("bob", groups=["analytics"])  # and back: the next pass gives the share back
    revalidate(app)
    assert bob_client.get(f"/warehouses/{warehouse.id}").status_code == 200
    with app.app_context():
        assert lakeport_id(bob) in lakekeeper().role_members(role_id)


def test_runs_through_a_group_left_at_the_provider_stop_with_the_reason(
    identity_app, lakehouse, db_engine, provider_users
):
    """bob's queued runs into a warehouse, and of a workflow, shared with `analytics` end once the
    provider says he left it; his run into his own warehouse goes on."""
    app = identity_app
    provider_users("bob", groups=["analytics"])
    signed_in(app, "bob")
    bob = user_named(db_engine, "bob")
    owner = make_user(db_engine)
    owner_client = app.test_client()
    sign_in_as(owner_client, owner)
    warehouse = reload(
        db_engine,
        Warehouse,
        register_warehouse(owner_client, lakehouse, f"grp-{secrets.token_hex(2)}"),
    )
    assert (
        share(owner_client, warehouse, kind="group", group="analytics", level="write").status_code
        == 200
    )
    shared_workflow = workflow_for(db_engine, owner)
    assert (
        owner_client.post(
            f"/workflows/{shared_workflow.id}/shares",
            headers={"HX-Request": "true"},
            data={
                "kind": "group",
                "group": "analytics",
                "level": "run",
                "csrf_token": csrf(owner_client),
            },
        ).status_code
        == 200
    )
    own_workflow, cu = workflow_for(db_engine, bob), unit_row(db_engine, bob)
    into_shared = execution_row(db_engine, bob, own_workflow, warehouse, cu, state="QUEUED")
    own_warehouse = warehouse_row(db_engine, bob)
    of_shared = execution_row(db_engine, bob, shared_workflow, own_warehouse, cu, state="QUEUED")
    own = execution_row(db_engine, bob, own_workflow, own_warehouse, cu, state="QUEUED")

    provider_users("bob", groups=[])
    revalidate(app)

    stopped = reload(db_engine, Execution, into_shared.id)
    assert (stopped.state, stopped.reason) == (
        "FAILED",
        f"the warehouse {warehouse.name} is no longer shared with you",
    )
    stopped = reload(db_engine, Execution, of_shared.id)
    assert (stopped.state, stopped.reason) == (
        "FAILED",
        f"the workflow {shared_workflow.name} is no longer shared with you",
    )
    assert reload(db_engine, Execution, own.id).state == "QUEUED"


def lakeport_id(user: User) -> str:
    return lakekeeper_user_id(user.subject)


def test_a_demoted_operator_loses_the_operators_pages(identity_app, db_engine, provider_users):
    app = identity_app
    olive_client = signed_in(app, "olive")
    assert olive_client.get("/operators/").status_code == 200
    provider_users("olive", groups=[])
    revalidate(app)
    assert olive_client.get("/operators/").status_code == 404
    assert olive_client.get("/").status_code == 200
    with app.app_context():
        token = tokens.create(user_named(db_engine, "olive"), "ops", "read", 1).text
    assert api(olive_client, token, "/compute-units").status_code == 200


def test_a_disabled_user_is_signed_out_and_their_tokens_refused_until_they_sign_in(
    identity_app, db_engine, provider_users
):
    app = identity_app
    carol_client = signed_in(app, "carol")
    carol = user_named(db_engine, "carol")
    with app.app_context():
        token = tokens.create(carol, "scripts", "run", 7).text
    assert api(carol_client, token, "/compute-units").status_code == 200

    provider_users("carol", enabled=False)
    revalidate(app)

    carol = user_named(db_engine, "carol")
    assert carol.suspended_at is not None and carol.refresh_token_sealed is None
    page = carol_client.get("/")
    assert page.status_code == 302 and "/auth/login" in page.headers["Location"]
    refused = api(carol_client, token, "/compute-units")
    assert (
        refused.status_code == 401 and "sign in to Lakeport again" in refused.get_json()["detail"]
    )
    with pytest.raises(RuntimeError, match="refused"):  # nor can she sign in again at the provider
        signed_in(app, "carol")

    provider_users("carol", enabled=True)
    carol_client = signed_in(app, "carol")
    assert carol_client.get("/").status_code == 200
    assert api(carol_client, token, "/compute-units").status_code == 200
    assert user_named(db_engine, "carol").suspended_at is None


def test_groups_unconfirmed_for_longer_than_the_bound_count_as_none(
    identity_app, db_engine, provider_users
):
    """A provider that cannot be asked (here: no refresh token to ask with) changes nothing until the
    bound: then the groups count as none at once, and the worker's pass empties them before."""
    app = identity_app
    olive_client = signed_in(app, "olive")
    olive = user_named(db_engine, "olive")
    update_row(
        db_engine,
        User,
        olive.id,
        refresh_token_sealed=None,
        groups_checked_at=utcnow() - timedelta(seconds=BOUND - CHECK / 2),
    )
    assert olive_client.get("/operators/").status_code == 200  # still within the bound
    revalidate(app)  # but not at the next pass: emptied now
    assert user_named(db_engine, "olive").group_names == []
    assert olive_client.get("/operators/").status_code == 404

    olive_client = signed_in(app, "olive")
    update_row(
        db_engine,
        User,
        olive.id,
        refresh_token_sealed=None,
        groups_checked_at=utcnow() - timedelta(seconds=BOUND + 1),
    )
    assert user_named(db_engine, "olive").group_names == ["lakeport-admins"]
    assert olive_client.get("/operators/").status_code == 404  # pages do not wait for the pass


def test_the_refresh_token_is_kept_sealed_and_unreadable_under_another_key(
    identity_app, portal_config, db_engine
):
    signed_in(identity_app, "alice")
    sealed = user_named(db_engine, "alice").refresh_token_sealed
    with identity_app.app_context():
        assert provider_grant.unseal(sealed)
    with create_app(replace(portal_config, SECRET_KEY=secrets.token_hex(16))).app_context():
        assert provider_grant.unseal(sealed) is None


def test_a_session_ends_at_its_absolute_lifetime_however_active(identity_app):
    app = identity_app
    client = signed_in(app, "alice")
    hours = app.config["SESSION_MAX_HOURS"]
    with client.session_transaction() as session:
        session[SIGNED_IN_KEY] = time.time() - hours * 3600 + 60  # a minute left
    assert client.get("/").status_code == 200
    with client.session_transaction() as session:
        session[SIGNED_IN_KEY] = time.time() - hours * 3600 - 1
    ended = client.get("/warehouses/")
    assert ended.status_code == 302 and "/auth/login" in ended.headers["Location"]
    login = client.get(ended.headers["Location"]).get_data(as_text=True)
    assert f"Sessions last {hours:g} hours" in login
    assert client.get("/").status_code == 302  # the session is gone, not only refused once
    assert signed_in(app, "alice").get("/").status_code == 200


def test_a_provider_that_does_not_answer_suspends_nobody(
    identity_app, portal_config, closed_port, db_engine
):
    signed_in(identity_app, "olive")
    before = user_named(db_engine, "olive")
    away = create_app(
        replace(
            portal_config,
            SECRET_KEY=identity_app.config["SECRET_KEY"],
            OIDC_ISSUER=f"http://127.0.0.1:{closed_port}",
            IDENTITY_BOUND_SECONDS=BOUND,
            IDENTITY_CHECK_SECONDS=CHECK,
        )
    )
    revalidate(away)
    after = user_named(db_engine, "olive")
    assert after.suspended_at is None and after.refresh_token_sealed == before.refresh_token_sealed
    assert (
        after.group_names == ["lakeport-admins"]
        and after.groups_checked_at == before.groups_checked_at
    )


def test_a_sign_in_during_the_pass_wins_over_the_pass(
    identity_app, db_engine, provider_users, monkeypatch
):
    """The pass asked the provider before the user signed in again: what the sign-in stored stays."""
    app = identity_app
    signed_in(app, "bob")
    asked = provider_grant.confirm

    def sign_in_meanwhile(subject, token, http):
        answer = asked(subject, token, http)
        if subject == TEST_USERS["bob"].sub:  # the provider's answer to the pass: bob in no group
            assert answer.claims["groups"] == []
            provider_users("bob", groups=["analytics", "late"])
            signed_in(app, "bob")  # then bob signs in, in the new groups
        return answer

    provider_users("bob", groups=[])
    monkeypatch.setattr(provider_grant, "confirm", sign_in_meanwhile)
    revalidate(app)
    assert user_named(db_engine, "bob").group_names == ["analytics", "late"]


def test_the_worker_runs_the_identity_pass_at_its_period(identity_app):
    from app.worker import Worker

    period, function = Worker(identity_app)._passes[work.LEASE]
    assert (period, function) == (CHECK, work.revalidate)


def test_the_providers_administration_takes_only_the_stacks_secret(oidc_provider):
    """Only the stack may change the provider's users: no secret, a wrong one, or a bad change is
    refused and changes nothing."""
    url = f"{oidc_provider.issuer}/lakeport-admin/users/bob"
    attempts = [
        ({}, {"groups": ["lakeport-admins"]}),
        ({"Authorization": "Bearer " + secrets.token_urlsafe(32)}, {"groups": ["lakeport-admins"]}),
        ({"Authorization": f"Basic {oidc_provider.admin_secret}"}, {"groups": ["lakeport-admins"]}),
    ]
    for headers, change in attempts:
        assert httpx.put(url, json=change, headers=headers, timeout=10).status_code == 401
    stack = {"Authorization": f"Bearer {oidc_provider.admin_secret}"}
    for change in (
        {"groups": "lakeport-admins"},
        {"groups": [""]},
        {"groups": ["x" * 256]},
        {"enabled": "no"},
        [],
    ):
        assert httpx.put(url, json=change, headers=stack, timeout=10).status_code == 400, change
    assert (
        httpx.put(
            f"{oidc_provider.issuer}/lakeport-admin/users/mallory",
            json={},
            headers=stack,
            timeout=10,
        ).status_code
        == 404
    )
    assert httpx.get(url, headers=stack, timeout=10).json() == {
        "username": "bob",
        "groups": list(TEST_USERS["bob"].groups),
        "enabled": True,
    }
