"""The catalog's grants converge with the portal's shares, against the dev catalog's real grants
and roles, on PostgreSQL: two share changes of one warehouse at once take turns, so a revoke is
never undone by a change that read the shares before it; drift made in the catalog behind the
portal's back is repaired by one pass of the worker, with an audit event per repair, and shown on
the owner's page; a group's role nothing is shared with any more is deleted; a failed catalog
write has the worker check the grants soon; a sign-in asks the catalog only about changed groups."""

from __future__ import annotations

import json
import threading
import time

import pytest
from sqlmodel import Session, select

from app.extensions import lakekeeper
from app.lakekeeper.client import LakekeeperClient
from app.lakekeeper.errors import LakekeeperError, LakekeeperUnavailable
from app.lakekeeper.resources import WarehouseAssignment
from app.lakekeeper.tokens import lakekeeper_user_id
from app.models import AuditEvent, GroupRole, Warehouse, WarehouseShare
from app.warehouses import sharing
from app.warehouses import work as warehouse_work
from app.worker import Worker
from tests.factories import csrf, make_user, reload, set_groups, share, sign_in_as


def shares_in_database(db_engine, warehouse: Warehouse) -> list[WarehouseShare]:
    with Session(db_engine) as db:
        return list(
            db.exec(select(WarehouseShare).where(WarehouseShare.warehouse_id == warehouse.id))
        )


def catalog_agrees(app, db_engine, warehouse: Warehouse) -> tuple[set, set]:
    """The warehouse's assignments in the catalog, and those its committed shares imply."""
    with app.app_context():
        found = set(lakekeeper().warehouse_assignments(warehouse.lakekeeper_id))
        wanted = set(sharing.catalog_assignments(reload(db_engine, Warehouse, warehouse.id)))
    return found, wanted


def events_since(db_engine, first_id: int, action_prefix: str) -> list[AuditEvent]:
    with Session(db_engine) as db:
        return list(
            db.exec(
                select(AuditEvent)
                .where(AuditEvent.id > first_id, AuditEvent.action.startswith(action_prefix))
                .order_by(AuditEvent.id)
            )
        )


def last_event_id(db_engine) -> int:
    with Session(db_engine) as db:
        return db.exec(select(AuditEvent.id).order_by(AuditEvent.id.desc())).first() or 0


def test_a_revoke_racing_a_share_never_puts_the_revoked_grants_back(team, db_engine, monkeypatch):
    app, _, people, warehouse = team
    (owner, owner_client), (member, _), (carol, _) = (
        people[n] for n in ("owner", "member", "carol")
    )
    assert (
        share(owner_client, warehouse, kind="user", email=carol.email, level="write").status_code
        == 200
    )
    (carols,) = shares_in_database(db_engine, warehouse)
    second_client = app.test_client()
    sign_in_as(second_client, owner)
    tokens = csrf(owner_client), csrf(second_client)

    # Both changes meet here with the grants they computed, if nothing makes them take turns; the
    # share's write then lands after the revoke's. In turns, the first waits in vain (the other is
    # held back until it commits) and the second finds the barrier broken.
    met = threading.Barrier(2, timeout=3)
    write = LakekeeperClient.set_warehouse_assignments
    member_id = lakekeeper_user_id(member.subject)

    def meeting_then_write(self, warehouse_id, wanted):
        try:
            met.wait()
        except threading.BrokenBarrierError:
            pass
        if any(a.user == member_id for a in wanted):
            time.sleep(0.5)
        return write(self, warehouse_id, wanted)

    monkeypatch.setattr(LakekeeperClient, "set_warehouse_assignments", meeting_then_write)
    answers = {}

    def revoke():
        answers["revoke"] = owner_client.post(
            f"/warehouses/{warehouse.id}/shares/{carols.id}/revoke",
            data={"csrf_token": tokens[0]},
            headers={"HX-Request": "true"},
        )

    def share_with_member():
        answers["share"] = second_client.post(
            f"/warehouses/{warehouse.id}/shares",
            headers={"HX-Request": "true"},
            data={"kind": "user", "email": member.email, "level": "read", "csrf_token": tokens[1]},
        )

    threads = [threading.Thread(target=revoke), threading.Thread(target=share_with_member)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert {name: answer.status_code for name, answer in answers.items()} == {
        "revoke": 200,
        "share": 200,
    }
    assert [(row.user_id, row.level) for row in shares_in_database(db_engine, warehouse)] == [
        (member.id, "read")
    ]
    found, wanted = catalog_agrees(app, db_engine, warehouse)
    assert found == wanted
    assert not [a for a in found if a.user == lakekeeper_user_id(carol.subject)]  # the revoke holds
    assert WarehouseAssignment("select", user=member_id) in found


def test_drift_in_the_catalog_is_repaired_by_one_pass_with_an_audit_event_each(team, db_engine):
    app, group, people, warehouse = team
    (owner, owner_client), (member, _), (carol, _) = (
        people[n] for n in ("owner", "member", "carol")
    )
    assert (
        share(owner_client, warehouse, kind="user", email=carol.email, level="read").status_code
        == 200
    )
    assert (
        share(owner_client, warehouse, kind="group", group=group, level="read").status_code == 200
    )
    page = owner_client.get(f"/warehouses/{warehouse.id}").get_data(as_text=True)
    assert "Catalog grants not checked yet" in page
    carol_id, member_id = lakekeeper_user_id(carol.subject), lakekeeper_user_id(member.subject)
    with app.app_context():
        catalog = lakekeeper()
        role_id = next(
            a.role for a in catalog.warehouse_assignments(warehouse.lakekeeper_id) if a.role
        )
        # Behind the portal's back: carol may now write, and no longer select; the group's role
        # has carol instead of its member.
        catalog.update_warehouse_assignments(
            warehouse.lakekeeper_id,
            writes=[WarehouseAssignment("modify", user=carol_id)],
            deletes=[WarehouseAssignment("select", user=carol_id)],
        )
        catalog.update_role_members(role_id, add={carol_id}, remove={member_id})
        first = last_event_id(db_engine)
        warehouse_work.reconcile_grants()
        assert catalog.role_members(role_id) == {member_id}
    found, wanted = catalog_agrees(app, db_engine, warehouse)
    assert found == wanted and WarehouseAssignment("select", user=carol_id) in found

    repairs = [
        (event.object_id, json.loads(event.detail))
        for event in events_since(db_engine, first, "warehouse.")
    ]
    mine = [detail for object_id, detail in repairs if object_id == str(warehouse.id)]
    assert sorted((d.get("change"), d.get("relation") or d.get("user")) for d in mine) == sorted(
        [("added", "select"), ("removed", "modify"), ("added", member_id), ("removed", carol_id)]
    )
    row = reload(db_engine, Warehouse, warehouse.id)
    assert row.grants_agreed_at is not None and row.grants_error == "" and row.grants_due_at is None
    assert f"restored select for {carol.email}" in row.grants_repair
    assert f"removed modify for {carol.email}" in row.grants_repair
    page = owner_client.get(f"/warehouses/{warehouse.id}").get_data(as_text=True)
    assert (
        "Catalog grants last checked" in page
        and "were repaired" in page
        and "removed modify for" in page
    )

    with app.app_context():
        first = last_event_id(db_engine)
        warehouse_work.reconcile_grants()  # nothing differs now: nothing repaired, nothing recorded
    assert [
        e for e in events_since(db_engine, first, "warehouse.") if e.object_id == str(warehouse.id)
    ] == []
    page = owner_client.get(f"/warehouses/{warehouse.id}").get_data(as_text=True)
    assert "they agree with these shares" in page and 'data-agree="yes"' in page
    member_page = people["member"][1].get(f"/warehouses/{warehouse.id}").get_data(as_text=True)
    assert 'data-testid="grants-checked"' not in member_page  # the owner's view only


def test_a_groups_role_nothing_uses_is_deleted_with_its_assignees(team, db_engine):
    app, group, people, warehouse = team
    owner_client, member = people["owner"][1], people["member"][0]
    assert (
        share(owner_client, warehouse, kind="group", group=group, level="read").status_code == 200
    )
    with Session(db_engine) as db:
        role = db.exec(select(GroupRole).where(GroupRole.group_name == group)).one()
    (row,) = shares_in_database(db_engine, warehouse)
    assert owner_client.post(
        f"/warehouses/{warehouse.id}/shares/{row.id}/revoke",
        data={"csrf_token": csrf(owner_client)},
    ).status_code in (200, 302)
    first = last_event_id(db_engine)
    with app.app_context():
        assert lakekeeper().role_members(role.lakekeeper_role_id) == {
            lakekeeper_user_id(member.subject)
        }
        warehouse_work.reconcile_grants()
        with pytest.raises(LakekeeperError) as gone:
            lakekeeper().role_members(role.lakekeeper_role_id)
    assert gone.value.status == 404
    assert reload(db_engine, GroupRole, role.id) is None
    (deleted,) = [
        e
        for e in events_since(db_engine, first, "group_role.delete")
        if e.object_id == str(role.id)
    ]
    assert json.loads(deleted.detail)["group"] == group

    # Shared again: a new role, with the group's member.
    assert (
        share(owner_client, warehouse, kind="group", group=group, level="read").status_code == 200
    )
    with app.app_context():
        (again,) = {
            a.role for a in lakekeeper().warehouse_assignments(warehouse.lakekeeper_id) if a.role
        }
        assert again != role.lakekeeper_role_id
        assert lakekeeper().role_members(again) == {lakekeeper_user_id(member.subject)}


def test_a_catalog_write_whose_answer_was_lost_is_checked_by_the_worker_soon(
    team, db_engine, monkeypatch
):
    app, _, people, warehouse = team
    owner_client, carol = people["owner"][1], people["carol"][0]
    update = LakekeeperClient.update_warehouse_assignments

    def written_then_answer_lost(self, *args, **kwargs):
        update(self, *args, **kwargs)
        raise LakekeeperUnavailable("ReadTimeout: timed out", "update_warehouse_assignments")

    monkeypatch.setattr(LakekeeperClient, "update_warehouse_assignments", written_then_answer_lost)
    refused = share(owner_client, warehouse, kind="user", email=carol.email, level="write")
    monkeypatch.undo()
    assert refused.status_code == 422 and shares_in_database(db_engine, warehouse) == []
    found, wanted = catalog_agrees(app, db_engine, warehouse)
    assert found - wanted == {
        WarehouseAssignment(r, user=lakekeeper_user_id(carol.subject))
        for r in ("describe", "select", "create", "modify")
    }  # the write that was made
    assert reload(db_engine, Warehouse, warehouse.id).grants_due_at is not None

    with app.app_context():
        due = {
            name: (work, subject) for name, work, subject in warehouse_work.pending_grant_checks()
        }
        work, subject = due[f"warehouse-grants:{warehouse.id}"]
        work(subject)
        assert f"warehouse-grants:{warehouse.id}" not in {
            name for name, _, _ in warehouse_work.pending_grant_checks()
        }
    found, wanted = catalog_agrees(app, db_engine, warehouse)
    assert found == wanted
    assert reload(db_engine, Warehouse, warehouse.id).grants_due_at is None
    assert (
        warehouse_work.GRANTS_LEASE in Worker(app)._passes
    )  # and periodically, with the worker's other passes


def test_a_sign_in_asks_the_catalog_only_about_groups_that_changed(team, db_engine, monkeypatch):
    app, group, people, warehouse = team
    owner_client = people["owner"][1]
    groups = [group, *(f"{group}-{n}" for n in range(4))]
    for name in groups:
        assert (
            share(owner_client, warehouse, kind="group", group=name, level="read").status_code
            == 200
        )
    calls = []
    call = LakekeeperClient._call

    def counted(self, operation, *args, **kwargs):
        calls.append(operation)
        return call(self, operation, *args, **kwargs)

    monkeypatch.setattr(LakekeeperClient, "_call", counted)
    newcomer = set_groups(db_engine, make_user(db_engine), [groups[0], groups[1]])
    with Session(db_engine) as db:
        role_of = {role.group_name: role.lakekeeper_role_id for role in db.exec(select(GroupRole))}
    me = lakekeeper_user_id(newcomer.subject)
    with app.app_context():
        sharing.sync_memberships(reload(db_engine, type(newcomer), newcomer.id))
        assert sorted(calls) == [
            "role_members",
            "role_members",
            "update_role_members",
            "update_role_members",
        ]
        calls.clear()
        sharing.sync_memberships(
            reload(db_engine, type(newcomer), newcomer.id)
        )  # the same groups again
        assert calls == []
        newcomer = set_groups(db_engine, newcomer, [groups[0], groups[2], "no-role-for-this-one"])
        sharing.sync_memberships(reload(db_engine, type(newcomer), newcomer.id))
        assert sorted(calls) == [
            "role_members",
            "role_members",
            "update_role_members",
            "update_role_members",
        ]
        monkeypatch.undo()
        inside = {name for name in groups if me in lakekeeper().role_members(role_of[name])}
    assert inside == {groups[0], groups[2]}


def test_an_assignment_change_over_one_openfga_write_goes_in_turns_deletes_first():
    import httpx

    from app.lakekeeper.tokens import ClientCredentialsTokenSource
    from tests.lakekeeper_contract import ContractCheckingTransport
    from tests.stand_ins import (
        BASE_URL,
        PERMISSIONS_PATH,
        PROJECT_ID,
        TOKEN_URL,
        WAREHOUSE_ID,
        IdentityProvider,
        ScriptedServer,
    )

    lakekeeper = ScriptedServer()
    lakekeeper.on("POST", PERMISSIONS_PATH, (204, None))
    tokens = ClientCredentialsTokenSource(
        client_id="lakeport-service",
        client_secret="s",
        token_url=TOKEN_URL,
        transport=httpx.MockTransport(IdentityProvider()),
    )
    client = LakekeeperClient(
        BASE_URL,
        tokens,
        project_id=PROJECT_ID,
        transport=ContractCheckingTransport(httpx.MockTransport(lakekeeper)),
    )
    users = [f"oidc~user-{n:03d}" for n in range(130)]
    writes = [
        WarehouseAssignment(relation, user=user)
        for user in users
        for relation in ("describe", "select")
    ]
    deletes = [WarehouseAssignment("modify", user=user) for user in users[:30]]
    client.update_warehouse_assignments(WAREHOUSE_ID, writes, deletes)
    bodies = [json.loads(request.content) for request in lakekeeper.calls("POST", PERMISSIONS_PATH)]
    assert [len(body["writes"]) + len(body["deletes"]) for body in bodies] == [100, 100, 90]
    assert len(bodies[0]["deletes"]) == 30 and all(not body["deletes"] for body in bodies[1:])
    assert [a for body in bodies for a in body["writes"]] == [a.to_api() for a in writes]
    lakekeeper.requests.clear()
    client.update_warehouse_assignments(
        WAREHOUSE_ID, writes[:2], deletes[:1]
    )  # small: one call, as before
    assert [json.loads(r.content) for r in lakekeeper.requests] == [
        {"writes": [a.to_api() for a in writes[:2]], "deletes": [deletes[0].to_api()]}
    ]


def test_on_sqlite_shares_and_the_worker_check_take_turns_without_waiting_on_each_other(
    portal_config, lakehouse, tmp_path
):
    """SQLite, the zero-setup default, takes the same path: a change takes the writers' turn, and
    nothing inside it writes in a transaction of its own (that would wait for the turn's end)."""
    from dataclasses import replace

    from app import create_app
    from app.db import make_engine, upgrade_database
    from tests.factories import register_warehouse

    url = f"sqlite:///{tmp_path / 'lakeport.db'}"
    upgrade_database(url)
    app = create_app(replace(portal_config, DATABASE_URL=url, LAKEKEEPER_URL=lakehouse.catalog_url))
    engine = make_engine(url)
    group = f"sqlite-{int(time.time() * 1000) % 10**6}"
    owner, member = make_user(engine), set_groups(engine, make_user(engine), [group])
    client = app.test_client()
    sign_in_as(client, owner)
    warehouse = reload(engine, Warehouse, register_warehouse(client, lakehouse, "on-sqlite"))
    started = time.monotonic()
    assert share(client, warehouse, kind="group", group=group, level="write").status_code == 200
    assert (
        share(client, warehouse, kind="user", email=member.email, level="read").status_code == 200
    )
    (by_email,) = [row for row in shares_in_database(engine, warehouse) if row.user_id]
    assert (
        client.post(
            f"/warehouses/{warehouse.id}/shares/{by_email.id}/revoke",
            headers={"HX-Request": "true"},
            data={"csrf_token": csrf(client)},
        ).status_code
        == 200
    )
    with app.app_context():
        member_id = lakekeeper_user_id(member.subject)
        lakekeeper().update_warehouse_assignments(
            warehouse.lakekeeper_id, writes=[WarehouseAssignment("ownership", user=member_id)]
        )
        warehouse_work.reconcile_grants()
        found = set(lakekeeper().warehouse_assignments(warehouse.lakekeeper_id))
        wanted = set(sharing.catalog_assignments(reload(engine, Warehouse, warehouse.id)))
    assert found == wanted and WarehouseAssignment("ownership", user=member_id) not in found
    assert time.monotonic() - started < 4  # no wait on SQLite's busy timeout (5 s) on the way
    assert "removed ownership for" in reload(engine, Warehouse, warehouse.id).grants_repair
    engine.dispose()


def test_a_groups_role_whose_members_could_not_be_set_is_not_left_in_the_catalog(
    team, db_engine, monkeypatch
):
    app, _, people, warehouse = team
    owner_client = people["owner"][1]
    group = f"left-behind-{int(time.time() * 1000) % 10**6}"

    def refused(self, role_id, add=frozenset(), remove=frozenset()):
        raise LakekeeperError(503, "ServiceUnavailable", "OpenFGA is away", "update_role_members")

    monkeypatch.setattr(LakekeeperClient, "update_role_members", refused)
    assert (
        share(owner_client, warehouse, kind="group", group=group, level="read").status_code == 422
    )
    monkeypatch.undo()
    with app.app_context():
        names = lakekeeper()._call(
            "list_roles",
            "GET",
            "/management/v1/role",
            parse=lambda body: [role["name"] for role in body["roles"]],
        )
    assert f"lakeport-group-{group}" not in names
    with Session(db_engine) as db:
        assert db.exec(select(GroupRole).where(GroupRole.group_name == group)).first() is None
    assert shares_in_database(db_engine, warehouse) == []


def test_the_worker_repairs_drift_on_its_own_with_its_periodic_pass(
    team, portal_config, lakehouse, db_engine
):
    from dataclasses import replace

    from app import create_app

    _, _, people, warehouse = team
    carol_id = lakekeeper_user_id(people["carol"][0].subject)
    app = create_app(
        replace(portal_config, LAKEKEEPER_URL=lakehouse.catalog_url, GRANTS_RECONCILE_SECONDS=0.5)
    )
    with app.app_context():
        lakekeeper().update_warehouse_assignments(
            warehouse.lakekeeper_id, writes=[WarehouseAssignment("ownership", user=carol_id)]
        )
    worker = Worker(app).start()
    try:
        deadline = time.monotonic() + 30
        while (
            "removed ownership for" not in reload(db_engine, Warehouse, warehouse.id).grants_repair
        ):
            assert time.monotonic() < deadline, "the worker's pass did not repair the grants"
            time.sleep(0.2)
    finally:
        worker.stop()
    found, wanted = catalog_agrees(app, db_engine, warehouse)
    assert found == wanted and WarehouseAssignment("ownership", user=carol_id) not in found
