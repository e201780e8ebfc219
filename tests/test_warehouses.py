"""Warehouses end to end: the portal, the Lakekeeper-compatible dev catalog and real SeaweedFS."""
from __future__ import annotations

import logging
import secrets
from dataclasses import replace

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from sqlalchemy import text
from sqlmodel import Session, select

from app import create_app
from app.lakekeeper import LakekeeperError
from app.models import User, Warehouse
from devstack.process import free_port
from devstack.seaweedfs import TEST_USER_KEYS


@pytest.fixture
def app(portal_config, lakehouse):
    return create_app(replace(portal_config, LAKEKEEPER_URL=lakehouse.catalog_url))


def register_form(lakehouse, name: str, user: str = "alice", **overrides) -> dict:
    keys = TEST_USER_KEYS[user]
    form = {
        "name": name, "bucket": keys.bucket, "key_prefix": f"tests/{name}-{secrets.token_hex(3)}",
        "endpoint": lakehouse.s3_endpoint, "region": "us-east-1", "path_style_access": "on",
        "flavor": "s3-compat", "access_key_id": keys.access_key_id, "secret_access_key": keys.secret_access_key,
    }
    form.update(overrides)
    return form


def register(client, auth, lakehouse, name: str, user: str = "alice", **overrides):
    return client.post("/warehouses/", data={**register_form(lakehouse, name, user, **overrides),
                                             "csrf_token": auth.csrf_token()})


def warehouse_row(db_engine, name: str, owner_email: str = "alice@example.test") -> Warehouse | None:
    with Session(db_engine) as db:
        statement = select(Warehouse).join(User, User.id == Warehouse.owner_id).where(
            Warehouse.name == name, User.email == owner_email)
        return db.exec(statement).first()


def lakekeeper_names(app) -> set[str]:
    with app.app_context():
        from app.extensions import lakekeeper

        return {w.name for w in lakekeeper().list_warehouses(include_inactive=True)}


def test_register_then_read_and_write_through_the_catalog_with_pyiceberg(app, client, auth, lakehouse, db_engine):
    auth.login("alice")
    response = register(client, auth, lakehouse, "roundtrip")
    assert response.status_code == 302, response.get_data(as_text=True)
    row = warehouse_row(db_engine, "roundtrip")
    assert row is not None and row.lakekeeper_id and row.status == "active"
    assert row.lakekeeper_name in lakekeeper_names(app)

    catalog = load_catalog("independent", type="rest", uri=f"{lakehouse.catalog_url}/catalog",
                           warehouse=row.lakekeeper_name, token=lakehouse.service_token(),
                           **{"header.X-Iceberg-Access-Delegation": "vended-credentials"})
    catalog.create_namespace("results")
    table = catalog.create_table("results.numbers", schema=pa.schema([("n", pa.int64())]))
    table.append(pa.table({"n": [1, 2, 3]}))
    assert sorted(catalog.load_table("results.numbers").scan().to_arrow()["n"].to_pylist()) == [1, 2, 3]

    contents = client.get(f"/warehouses/{row.id}/contents").get_data(as_text=True)
    assert "results" in contents and "numbers" in contents and ">3<" in contents


def test_wrong_secret_is_refused_with_no_row(client, auth, lakehouse, db_engine):
    auth.login("alice")
    response = register(client, auth, lakehouse, "wrongsecret", secret_access_key="definitely-not-the-secret")
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    assert "could not" in page.lower() or "credentials" in page.lower()
    assert "definitely-not-the-secret" not in page
    assert warehouse_row(db_engine, "wrongsecret") is None


def test_test_connection_reports_each_check(client, auth, lakehouse):
    auth.login("alice")
    good = client.post("/warehouses/test-connection",
                       data=register_form(lakehouse, "probe"), headers={"X-CSRFToken": auth.csrf_token()})
    assert good.status_code == 200
    page = good.get_data(as_text=True)
    for check in ("write", "read", "list", "delete"):
        assert f'data-testid="check-{check}"' in page
    assert "Connection works." in page
    bad = client.post("/warehouses/test-connection",
                      data=register_form(lakehouse, "probe", secret_access_key="wrong-secret-key"),
                      headers={"X-CSRFToken": auth.csrf_token()})
    assert "Connection failed." in bad.get_data(as_text=True)
    assert "wrong-secret-key" not in bad.get_data(as_text=True)


def test_inline_validation_of_a_field(client, auth):
    auth.login("alice")
    token = {"X-CSRFToken": auth.csrf_token()}
    bad = client.post("/warehouses/validate/bucket", data={"bucket": "Not_A_Bucket"}, headers=token)
    assert "Not a valid bucket name" in bad.get_data(as_text=True)
    good = client.post("/warehouses/validate/bucket", data={"bucket": "alice-lake"}, headers=token)
    assert "role=\"alert\"" not in good.get_data(as_text=True)
    # Secrets are never sent for inline validation.
    assert client.post("/warehouses/validate/secret_access_key", data={}, headers=token).status_code == 404


def test_server_side_validation_rejects_bad_input_without_calling_lakekeeper(client, auth, lakehouse, db_engine):
    auth.login("alice")
    response = register(client, auth, lakehouse, "Bad Name!", bucket="x", endpoint="ftp://nope")
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    assert "lowercase letters" in page and "Not a valid bucket name" in page and "http://" in page


def test_lakekeeper_unreachable_gives_a_clear_error_and_no_row(portal_config, lakehouse, db_engine):
    down = create_app(replace(portal_config, LAKEKEEPER_URL=f"http://127.0.0.1:{free_port()}"))
    from tests.conftest import AuthActions
    from devstack.oidc_provider import TEST_USERS

    client = down.test_client()
    auth = AuthActions(client, {n: u.password for n, u in TEST_USERS.items()})
    auth.login("alice")
    response = register(client, auth, lakehouse, "unreachable")
    assert response.status_code == 422
    assert "unreachable" in response.get_data(as_text=True).lower()
    assert warehouse_row(db_engine, "unreachable") is None


def test_failed_save_deletes_the_warehouse_in_lakekeeper_again(app, client, auth, lakehouse, db_engine, monkeypatch):
    auth.login("alice")
    from sqlmodel import Session as SQLModelSession

    original_commit = SQLModelSession.commit

    def failing_commit(self):
        if any(isinstance(obj, Warehouse) for obj in self.new):
            raise RuntimeError("database went away")
        return original_commit(self)

    monkeypatch.setattr(SQLModelSession, "commit", failing_commit)
    response = register(client, auth, lakehouse, "compensated")
    monkeypatch.undo()
    assert response.status_code == 422
    assert "could not save" in response.get_data(as_text=True)
    assert warehouse_row(db_engine, "compensated") is None
    assert not any(name.endswith("-compensated") for name in lakekeeper_names(app))


def test_lakekeeper_names_are_unique_across_users(app, client, auth, lakehouse, db_engine):
    auth.login("alice")
    assert register(client, auth, lakehouse, "shared-name").status_code == 302
    auth.logout()
    auth.login("bob")
    assert register(client, auth, lakehouse, "shared-name", user="bob").status_code == 302
    with Session(db_engine) as db:
        rows = db.exec(select(Warehouse).where(Warehouse.name == "shared-name")).all()
    assert len(rows) == 2 and rows[0].lakekeeper_name != rows[1].lakekeeper_name


def test_rename_deactivate_activate_and_rotate(app, client, auth, lakehouse, db_engine):
    auth.login("alice")
    register(client, auth, lakehouse, "manage-me")
    row = warehouse_row(db_engine, "manage-me")
    token = {"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"}

    response = client.post(f"/warehouses/{row.id}/rename", data={"name": "managed"}, headers=token)
    assert response.status_code == 200 and response.headers["HX-Redirect"] == f"/warehouses/{row.id}"
    renamed = warehouse_row(db_engine, "managed")
    assert renamed.lakekeeper_name.endswith("-managed") and renamed.lakekeeper_name in lakekeeper_names(app)
    bad = client.post(f"/warehouses/{row.id}/rename", data={"name": "NO"}, headers=token)
    assert bad.status_code == 422

    client.post(f"/warehouses/{row.id}/deactivate", headers=token)
    assert warehouse_row(db_engine, "managed").status == "inactive"
    client.post(f"/warehouses/{row.id}/activate", headers=token)
    assert warehouse_row(db_engine, "managed").status == "active"

    keys = TEST_USER_KEYS["alice"]
    rotated = client.post(f"/warehouses/{row.id}/credentials", headers=token,
                          data={"access_key_id": keys.access_key_id, "secret_access_key": keys.secret_access_key})
    assert rotated.status_code == 200 and "Credentials rotated." in rotated.get_data(as_text=True)
    refused = client.post(f"/warehouses/{row.id}/credentials", headers=token,
                          data={"access_key_id": keys.access_key_id, "secret_access_key": "a-wrong-secret"})
    assert refused.status_code == 422


def test_archive_then_purge_removes_tables_and_warehouse(app, client, auth, lakehouse, db_engine):
    auth.login("alice")
    register(client, auth, lakehouse, "purge-me")
    row = warehouse_row(db_engine, "purge-me")
    catalog = load_catalog("independent", type="rest", uri=f"{lakehouse.catalog_url}/catalog",
                           warehouse=row.lakekeeper_name, token=lakehouse.service_token(),
                           **{"header.X-Iceberg-Access-Delegation": "vended-credentials"})
    for namespace in ("results", "console_logs"):
        catalog.create_namespace(namespace)
        catalog.create_table(f"{namespace}.t1", schema=pa.schema([("n", pa.int64())])).append(pa.table({"n": [1]}))
    token = {"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"}

    not_archived = client.post(f"/warehouses/{row.id}/purge", data={"confirm_name": "purge-me"}, headers=token)
    assert not_archived.status_code == 422 and "Archive the warehouse" in not_archived.get_data(as_text=True)
    client.post(f"/warehouses/{row.id}/archive", headers=token)
    assert warehouse_row(db_engine, "purge-me").status == "archived"
    page = client.get(f"/warehouses/{row.id}").get_data(as_text=True)
    assert "cannot be undone" in page and "results" in page

    wrong = client.post(f"/warehouses/{row.id}/purge", data={"confirm_name": "purge-m"}, headers=token)
    assert wrong.status_code == 422
    done = client.post(f"/warehouses/{row.id}/purge", data={"confirm_name": "purge-me"}, headers=token)
    assert done.status_code == 200 and done.headers["HX-Redirect"] == "/warehouses/"
    assert warehouse_row(db_engine, "purge-me") is None
    with app.app_context():
        from app.extensions import lakekeeper

        with pytest.raises(LakekeeperError) as missing:
            lakekeeper().get_warehouse(row.lakekeeper_id)
        assert missing.value.status == 404


def test_bob_gets_404_on_every_route_of_alices_warehouse(app, client, auth, lakehouse, db_engine):
    auth.login("alice")
    register(client, auth, lakehouse, "alices-own")
    row = warehouse_row(db_engine, "alices-own")
    auth.logout()
    auth.login("bob")
    token = {"X-CSRFToken": auth.csrf_token()}
    routes = [("GET", ""), ("GET", "/contents"), ("POST", "/rename"), ("POST", "/credentials"),
              ("POST", "/deactivate"), ("POST", "/activate"), ("POST", "/archive"), ("POST", "/purge")]
    for method, suffix in routes:
        for headers in (token, {**token, "HX-Request": "true"}):
            response = client.open(f"/warehouses/{row.id}{suffix}", method=method, headers=headers,
                                   data={"name": "stolen", "confirm_name": "alices-own"})
            assert response.status_code == 404, (method, suffix, response.status_code)
    assert "alices-own" not in client.get("/warehouses/").get_data(as_text=True)
    assert warehouse_row(db_engine, "alices-own").status == "active"


def test_no_secret_in_database_logs_or_pages(app, client, auth, lakehouse, db_engine, caplog):
    caplog.set_level(logging.DEBUG)
    secret = TEST_USER_KEYS["alice"].secret_access_key
    auth.login("alice")
    pages = [register(client, auth, lakehouse, "secret-check").get_data(as_text=True)]
    row = warehouse_row(db_engine, "secret-check")
    pages.append(client.get(f"/warehouses/{row.id}", follow_redirects=True).get_data(as_text=True))
    pages.append(client.get("/warehouses/").get_data(as_text=True))
    pages.append(client.post("/warehouses/", data={**register_form(lakehouse, "BAD NAME"),
                                                   "csrf_token": auth.csrf_token()}).get_data(as_text=True))
    for page in pages:
        assert secret not in page
    with Session(db_engine) as db:
        for table in ("users", "warehouses", "compute_units", "compute_unit_events"):
            dump = " ".join(str(r) for r in db.exec(text(f"SELECT * FROM {table}")).all())
            assert secret not in dump, table
    assert secret not in caplog.text


def test_purge_waits_while_lakekeeper_drains_purge_tasks(app, client, auth, lakehouse, db_engine, monkeypatch):
    from app.warehouses import service

    auth.login("alice")
    register(client, auth, lakehouse, "draining")
    row = warehouse_row(db_engine, "draining")
    token = {"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"}
    client.post(f"/warehouses/{row.id}/archive", headers=token)

    with app.app_context():
        from app.extensions import lakekeeper

        real_delete = lakekeeper().delete_warehouse
    answers = [LakekeeperError(409, "WarehouseHasUnfinishedTasks", "purges still running")] * 2
    calls = []

    def delete_after_tasks_drain(warehouse_id):
        calls.append(warehouse_id)
        if answers:
            raise answers.pop()
        return real_delete(warehouse_id)

    monkeypatch.setattr(service, "PURGE_DELETE_PAUSE_SECONDS", 0.01)
    monkeypatch.setattr(type(real_delete.__self__), "delete_warehouse",
                        lambda self, warehouse_id: delete_after_tasks_drain(warehouse_id))
    done = client.post(f"/warehouses/{row.id}/purge", data={"confirm_name": "draining"}, headers=token)
    assert done.status_code == 200 and done.headers["HX-Redirect"] == "/warehouses/"
    assert calls == [row.lakekeeper_id] * 3
    assert warehouse_row(db_engine, "draining") is None
