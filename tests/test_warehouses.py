"""Warehouses end to end: the portal, the Lakekeeper-compatible dev catalog and real SeaweedFS."""

from __future__ import annotations

import html
import logging
import re
import secrets
import time
from dataclasses import replace

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from sqlalchemy import text
from sqlmodel import Session, select

from app import create_app
from app.lakekeeper.errors import LakekeeperError
from app.lakekeeper.resources import WarehouseAssignment
from app.lakekeeper.tokens import lakekeeper_user_id
from app.models import User, Warehouse
from devstack.oidc_provider import SERVICE_CLIENT_ID, TEST_USERS
from devstack.seaweedfs import TEST_USER_KEYS
from tests.factories import register, register_form, warehouse_named


@pytest.fixture
def app(portal_config, lakehouse):
    return create_app(replace(portal_config, LAKEKEEPER_URL=lakehouse.catalog_url))


def lakekeeper_names(app) -> set[str]:
    with app.app_context():
        from app.extensions import lakekeeper

        return {
            w.name for w in lakekeeper().list_warehouses()
        }  # active ones: all Lakekeeper 0.13 lists


def test_register_then_read_and_write_through_the_catalog_with_pyiceberg(
    app, client, auth, lakehouse, db_engine
):
    auth.login("alice")
    response = register(client, auth, lakehouse, "roundtrip")
    assert response.status_code == 302, response.get_data(as_text=True)
    row = warehouse_named(db_engine, "roundtrip")
    assert row is not None and row.lakekeeper_id and row.status == "active"
    assert row.lakekeeper_name in lakekeeper_names(app)

    catalog = load_catalog(
        "independent",
        type="rest",
        uri=f"{lakehouse.catalog_url}/catalog",
        warehouse=row.lakekeeper_name,
        token=lakehouse.service_token(),
        **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    catalog.create_namespace("results")
    table = catalog.create_table("results.numbers", schema=pa.schema([("n", pa.int64())]))
    table.append(pa.table({"n": [1, 2, 3]}))
    assert sorted(catalog.load_table("results.numbers").scan().to_arrow()["n"].to_pylist()) == [
        1,
        2,
        3,
    ]

    contents = client.get(f"/warehouses/{row.id}/contents").get_data(as_text=True)
    assert "results" in contents and "numbers" in contents and ">3<" in contents


def test_an_s3_compatible_warehouse_is_registered_with_sts_so_that_units_get_keys(
    app, client, auth, lakehouse, db_engine
):
    """Lakekeeper vends credentials only with `sts-enabled` and remote-signs otherwise, which a
    unit cannot use (v0.13.3 crates/lakekeeper/src/service/storage/s3.rs, generate_table_config)."""
    auth.login("alice")
    assert register(client, auth, lakehouse, "vending").status_code == 302
    with app.app_context():
        from app.extensions import lakekeeper

        profile = (
            lakekeeper()
            .get_warehouse(warehouse_named(db_engine, "vending").lakekeeper_id)
            .storage_profile
        )
    assert (profile.flavor, profile.sts_enabled) == ("s3-compat", True)
    # LAKEPORT_VENDED_CREDENTIALS_SECONDS, 900 by default: the lifetime Lakekeeper asks STS for.
    assert profile.sts_token_validity_seconds == 900


def test_the_vended_credentials_lifetime_setting_reaches_the_warehouses_profile(
    app, client, auth, lakehouse, db_engine
):
    app.config["VENDED_CREDENTIALS_SECONDS"] = 1800
    auth.login("alice")
    assert register(client, auth, lakehouse, "halfhour").status_code == 302
    with app.app_context():
        from app.extensions import lakekeeper

        row = warehouse_named(db_engine, "halfhour")
        profile = lakekeeper().get_warehouse(row.lakekeeper_id).storage_profile
    assert profile.sts_token_validity_seconds == 1800


def test_wrong_secret_is_refused_with_no_row(client, auth, lakehouse, db_engine):
    auth.login("alice")
    response = register(
        client, auth, lakehouse, "wrongsecret", secret_access_key="definitely-not-the-secret"
    )
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    assert "the secret access key does not match" in page
    assert "definitely-not-the-secret" not in page
    assert warehouse_named(db_engine, "wrongsecret") is None


@pytest.mark.parametrize(
    ("override", "field", "diagnosis"),
    [
        # Alice's keys are valid but reach only her bucket: S3 refuses access rather than say "no such bucket".
        ({"bucket": "no-such-bucket-here"}, "bucket", "it does not exist, or the keys may not"),
        (
            {"secret_access_key": "definitely-not-the-secret"},
            "secret_access_key",
            "secret access key does not match",
        ),
        ({"access_key_id": "NOBODYKNOWSME"}, "access_key_id", "does not know this access key id"),
        ({"endpoint": "http://127.0.0.1:{closed_port}"}, "endpoint", "Endpoint unreachable"),
    ],
)
def test_a_storage_refusal_names_the_field_at_fault(
    client, auth, lakehouse, db_engine, closed_port, override, field, diagnosis
):
    """Lakekeeper refuses bad storage with one generic error; the page says which field is wrong."""
    override = {key: value.format(closed_port=closed_port) for key, value in override.items()}
    auth.login("alice")
    response = register(client, auth, lakehouse, "refused", **override)
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    error = re.search(rf'<small class="field-error" id="error-{field}"[^>]*>([^<]*)</small>', page)
    assert error and diagnosis in error.group(1), page
    assert re.search(rf'<input id="{field}"[^>]*aria-invalid="true"', page, re.S)
    assert page.count('aria-invalid="true"') == 1
    assert warehouse_named(db_engine, "refused") is None


def test_test_connection_reports_each_check(client, auth, lakehouse):
    auth.login("alice")
    good = client.post(
        "/warehouses/test-connection",
        data=register_form(lakehouse, "probe"),
        headers={"X-CSRFToken": auth.csrf_token()},
    )
    assert good.status_code == 200
    page = good.get_data(as_text=True)
    for check in ("write", "read", "list", "delete"):
        assert f'data-testid="check-{check}"' in page
    assert "Connection works." in page
    bad = client.post(
        "/warehouses/test-connection",
        data=register_form(lakehouse, "probe", secret_access_key="wrong-secret-key"),
        headers={"X-CSRFToken": auth.csrf_token()},
    )
    assert "Connection failed." in bad.get_data(as_text=True)
    assert "wrong-secret-key" not in bad.get_data(as_text=True)


def test_inline_validation_of_a_field(client, auth):
    auth.login("alice")
    token = {"X-CSRFToken": auth.csrf_token()}
    bad = client.post("/warehouses/validate/bucket", data={"bucket": "Not_A_Bucket"}, headers=token)
    assert "Not a valid bucket name" in bad.get_data(as_text=True)
    good = client.post("/warehouses/validate/bucket", data={"bucket": "alice-lake"}, headers=token)
    assert 'role="alert"' not in good.get_data(as_text=True)
    # Secrets are never sent for inline validation.
    assert (
        client.post("/warehouses/validate/secret_access_key", data={}, headers=token).status_code
        == 404
    )


def test_server_side_validation_rejects_bad_input_without_calling_lakekeeper(
    client, auth, lakehouse, db_engine
):
    auth.login("alice")
    response = register(client, auth, lakehouse, "Bad Name!", bucket="x", endpoint="ftp://nope")
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    assert "lowercase letters" in page and "Not a valid bucket name" in page and "http://" in page


def test_lakekeeper_unreachable_gives_a_clear_error_and_no_row(
    portal_config, lakehouse, db_engine, closed_port
):
    down = create_app(replace(portal_config, LAKEKEEPER_URL=f"http://127.0.0.1:{closed_port}"))
    from devstack.oidc_provider import TEST_USERS
    from tests.factories import AuthActions

    client = down.test_client()
    auth = AuthActions(client, {n: u.password for n, u in TEST_USERS.items()})
    auth.login("alice")
    response = register(client, auth, lakehouse, "unreachable")
    assert response.status_code == 422
    assert "unreachable" in response.get_data(as_text=True).lower()
    assert warehouse_named(db_engine, "unreachable") is None


def test_failed_save_deletes_the_warehouse_in_lakekeeper_again(
    app, client, auth, lakehouse, db_engine, monkeypatch
):
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
    assert warehouse_named(db_engine, "compensated") is None
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
    row = warehouse_named(db_engine, "manage-me")
    token = {"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"}

    response = client.post(f"/warehouses/{row.id}/rename", data={"name": "managed"}, headers=token)
    assert (
        response.status_code == 200 and response.headers["HX-Redirect"] == f"/warehouses/{row.id}"
    )
    renamed = warehouse_named(db_engine, "managed")
    assert renamed.lakekeeper_name.endswith(
        "-managed"
    ) and renamed.lakekeeper_name in lakekeeper_names(app)
    bad = client.post(f"/warehouses/{row.id}/rename", data={"name": "NO"}, headers=token)
    assert bad.status_code == 422

    client.post(f"/warehouses/{row.id}/deactivate", headers=token)
    assert warehouse_named(db_engine, "managed").status == "inactive"
    client.post(f"/warehouses/{row.id}/activate", headers=token)
    assert warehouse_named(db_engine, "managed").status == "active"

    keys = TEST_USER_KEYS["alice"]
    rotated = client.post(
        f"/warehouses/{row.id}/credentials",
        headers=token,
        data={"access_key_id": keys.access_key_id, "secret_access_key": keys.secret_access_key},
    )
    assert rotated.status_code == 200 and "Credentials rotated." in rotated.get_data(as_text=True)
    refused = client.post(
        f"/warehouses/{row.id}/credentials",
        headers=token,
        data={"access_key_id": keys.access_key_id, "secret_access_key": "a-wrong-secret"},
    )
    assert refused.status_code == 422


def test_rotation_checks_the_endpoint_before_lakekeeper_sees_the_keys(
    app, client, auth, lakehouse, db_engine
):
    auth.login("alice")
    register(client, auth, lakehouse, "rotate-policy")
    row = warehouse_named(db_engine, "rotate-policy")
    # The operator tightens the policy after registration: the loopback endpoint is now refused.
    app.config["OUTBOUND_ALLOW_LOOPBACK"] = False
    token = {"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"}
    refused = client.post(
        f"/warehouses/{row.id}/credentials",
        headers=token,
        data={"access_key_id": "SOMEKEY", "secret_access_key": "a-wrong-secret"},
    )
    assert refused.status_code == 422
    page = html.unescape(refused.get_data(as_text=True))
    # Lakekeeper would have refused these keys with its own message; the policy answered first.
    assert "127.0.0.1 is not allowed by this portal's network policy." in page
    assert "IO Operation" not in page and "Connection failed" not in page


def test_archive_then_purge_removes_tables_and_warehouse(app, client, auth, lakehouse, db_engine):
    auth.login("alice")
    register(client, auth, lakehouse, "purge-me")
    row = warehouse_named(db_engine, "purge-me")
    catalog = load_catalog(
        "independent",
        type="rest",
        uri=f"{lakehouse.catalog_url}/catalog",
        warehouse=row.lakekeeper_name,
        token=lakehouse.service_token(),
        **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    for namespace in ("results", "console_logs"):
        catalog.create_namespace(namespace)
        catalog.create_table(f"{namespace}.t1", schema=pa.schema([("n", pa.int64())])).append(
            pa.table({"n": [1]})
        )
    token = {"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"}

    not_archived = client.post(
        f"/warehouses/{row.id}/purge", data={"confirm_name": "purge-me"}, headers=token
    )
    assert not_archived.status_code == 422 and "Archive the warehouse" in not_archived.get_data(
        as_text=True
    )
    client.post(f"/warehouses/{row.id}/archive", headers=token)
    assert warehouse_named(db_engine, "purge-me").status == "archived"
    page = client.get(f"/warehouses/{row.id}").get_data(as_text=True)
    assert "cannot be undone" in page and "results" in page
    # The purge comes right under the title, not after the long sections.
    assert (
        page.index('id="purge-form"')
        < page.index("<strong>Storage</strong>")
        < page.index("Namespaces and tables")
    )

    wrong = client.post(
        f"/warehouses/{row.id}/purge", data={"confirm_name": "purge-m"}, headers=token
    )
    assert wrong.status_code == 422
    assert 'value="purge-m"' in wrong.get_data(as_text=True)  # what was typed stays, to correct
    assert 'aria-describedby="purge-error"' in wrong.get_data(as_text=True)
    done = client.post(
        f"/warehouses/{row.id}/purge", data={"confirm_name": "purge-me"}, headers=token
    )
    assert done.status_code == 200 and done.headers["HX-Redirect"] == "/warehouses/"
    assert warehouse_named(db_engine, "purge-me") is None
    with app.app_context():
        from app.extensions import lakekeeper

        with pytest.raises(LakekeeperError) as missing:
            lakekeeper().get_warehouse(row.lakekeeper_id)
        assert missing.value.status == 404


def test_bob_gets_404_on_every_route_of_alices_warehouse(app, client, auth, lakehouse, db_engine):
    auth.login("alice")
    register(client, auth, lakehouse, "alices-own")
    row = warehouse_named(db_engine, "alices-own")
    auth.logout()
    auth.login("bob")
    token = {"X-CSRFToken": auth.csrf_token()}
    routes = [
        ("GET", ""),
        ("GET", "/contents"),
        ("POST", "/rename"),
        ("POST", "/credentials"),
        ("POST", "/deactivate"),
        ("POST", "/activate"),
        ("POST", "/archive"),
        ("POST", "/purge"),
        ("POST", "/shares"),
        ("POST", "/shares/1/revoke"),
        ("GET", "/closing"),
        ("GET", "/tables/results.anything"),
    ]
    for method, suffix in routes:
        for headers in (token, {**token, "HX-Request": "true"}):
            response = client.open(
                f"/warehouses/{row.id}{suffix}",
                method=method,
                headers=headers,
                data={"name": "stolen", "confirm_name": "alices-own"},
            )
            assert response.status_code == 404, (method, suffix, response.status_code)
    assert "alices-own" not in client.get("/warehouses/").get_data(as_text=True)
    assert warehouse_named(db_engine, "alices-own").status == "active"


def test_no_secret_in_database_logs_or_pages(app, client, auth, lakehouse, db_engine, caplog):
    caplog.set_level(logging.DEBUG)
    secret = TEST_USER_KEYS["alice"].secret_access_key
    auth.login("alice")
    pages = [register(client, auth, lakehouse, "secret-check").get_data(as_text=True)]
    row = warehouse_named(db_engine, "secret-check")
    pages.append(client.get(f"/warehouses/{row.id}", follow_redirects=True).get_data(as_text=True))
    pages.append(client.get("/warehouses/").get_data(as_text=True))
    pages.append(
        client.post(
            "/warehouses/",
            data={**register_form(lakehouse, "BAD NAME"), "csrf_token": auth.csrf_token()},
        ).get_data(as_text=True)
    )
    for page in pages:
        assert secret not in page
    with Session(db_engine) as db:
        for table in ("users", "warehouses", "compute_units", "compute_unit_events"):
            dump = " ".join(str(r) for r in db.exec(text(f"SELECT * FROM {table}")).all())
            assert secret not in dump, table
    assert secret not in caplog.text


def test_a_purge_left_to_drain_is_finished_by_the_worker(
    app, client, auth, lakehouse, db_engine, monkeypatch
):
    from app.warehouses import work as warehouse_work

    auth.login("alice")
    register(client, auth, lakehouse, "draining")
    row = warehouse_named(db_engine, "draining")
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

    monkeypatch.setattr(
        type(real_delete.__self__),
        "delete_warehouse",
        lambda self, warehouse_id: delete_after_tasks_drain(warehouse_id),
    )
    began = time.monotonic()
    pending = client.post(
        f"/warehouses/{row.id}/purge", data={"confirm_name": "draining"}, headers=token
    )
    assert time.monotonic() - began < 5  # the request does not wait for the tasks to drain
    assert pending.status_code == 200 and pending.headers["HX-Redirect"] == f"/warehouses/{row.id}"
    assert (
        calls == [row.lakekeeper_id] and warehouse_named(db_engine, "draining").closing == "purge"
    )
    notice = client.get(f"/warehouses/{row.id}/closing", headers={"HX-Request": "true"})
    assert 'data-closing="purge"' in notice.get_data(
        as_text=True
    ) and 'hx-trigger="every 2s"' in notice.get_data(as_text=True)

    def worker_pass():
        with app.app_context():
            for name, function, subject in warehouse_work.pending_closings():
                if name == f"warehouse-closing:{row.id}":
                    function(subject)

    worker_pass()  # not due yet: the worker asks again a moment later
    assert calls == [row.lakekeeper_id]
    deadline = time.monotonic() + 30
    while warehouse_named(db_engine, "draining") is not None:
        assert time.monotonic() < deadline, calls
        time.sleep(0.2)
        worker_pass()
    assert calls == [row.lakekeeper_id] * 3
    gone = client.get(f"/warehouses/{row.id}/closing", headers={"HX-Request": "true"})
    assert (
        gone.status_code == 404 and gone.headers["HX-Redirect"] == "/warehouses/"
    )  # the page goes to the list


def grants_of(app, warehouse: Warehouse) -> set[WarehouseAssignment]:
    with app.app_context():
        from app.extensions import lakekeeper

        return set(lakekeeper().warehouse_assignments(warehouse.lakekeeper_id))


def test_ownership_in_lakekeeper_follows_the_warehouse_through_its_life(
    app, client, auth, lakehouse, db_engine, monkeypatch
):
    alice = lakekeeper_user_id(TEST_USERS["alice"].sub)
    auth.login("alice")
    register(client, auth, lakehouse, "granted")
    row = warehouse_named(db_engine, "granted")
    # Alice's Lakekeeper identity owns it, and nobody else holds a grant (not the portal that created it).
    assert grants_of(app, row) == {WarehouseAssignment("ownership", user=alice)}
    with app.app_context():
        from app.extensions import lakekeeper

        assert (
            lakekeeper().whoami().id == f"oidc~{SERVICE_CLIENT_ID}"
        )  # a project admin, owning nothing

    token = {"X-CSRFToken": auth.csrf_token(), "HX-Request": "true"}
    client.post(f"/warehouses/{row.id}/rename", data={"name": "still-granted"}, headers=token)
    assert grants_of(app, row) == {WarehouseAssignment("ownership", user=alice)}

    client.post(f"/warehouses/{row.id}/archive", headers=token)
    assert warehouse_named(db_engine, "still-granted").status == "archived"
    assert grants_of(app, row) == {
        WarehouseAssignment("describe", user=alice),
        WarehouseAssignment("select", user=alice),
    }

    with app.app_context():
        real_delete = lakekeeper().delete_warehouse
    grants_at_delete = []

    def delete_and_note_the_grants_left(self, warehouse_id):
        grants_at_delete.append(self.warehouse_assignments(warehouse_id))
        return real_delete(warehouse_id)

    monkeypatch.setattr(
        type(real_delete.__self__), "delete_warehouse", delete_and_note_the_grants_left
    )
    done = client.post(
        f"/warehouses/{row.id}/purge", data={"confirm_name": "still-granted"}, headers=token
    )
    assert done.status_code == 200, done.get_data(as_text=True)
    assert grants_at_delete == [[]]  # revoked before the warehouse went


def test_a_warehouse_whose_owner_cannot_be_granted_it_is_not_created(
    app, client, lakehouse, db_engine
):
    """A user the identity provider does not know gets no token, so no grant: the create is undone."""
    with Session(db_engine, expire_on_commit=False) as db:
        stranger = User(
            issuer="https://elsewhere.invalid", subject=f"unknown-{secrets.token_hex(4)}"
        )
        db.add(stranger)
        db.commit()
    with client.session_transaction() as session:
        session["_user_id"], session["_fresh"] = str(stranger.id), True
    csrf = re.search(r'"X-CSRFToken": "([^"]+)"', client.get("/").get_data(as_text=True)).group(1)
    response = client.post(
        "/warehouses/", data={**register_form(lakehouse, "ungrantable"), "csrf_token": csrf}
    )
    assert response.status_code == 422
    assert "acting as this user" in response.get_data(as_text=True)
    with Session(db_engine) as db:
        assert db.exec(select(Warehouse).where(Warehouse.owner_id == stranger.id)).first() is None
    assert not any(name.endswith("-ungrantable") for name in lakekeeper_names(app))


def test_table_explorer_shows_schema_snapshots_properties_and_first_rows(
    app, client, auth, lakehouse, db_engine
):
    auth.login("alice")
    assert register(client, auth, lakehouse, "explored").status_code == 302
    row = warehouse_named(db_engine, "explored")
    catalog = load_catalog(
        "independent",
        type="rest",
        uri=f"{lakehouse.catalog_url}/catalog",
        warehouse=row.lakekeeper_name,
        token=lakehouse.service_token(),
        **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    for namespace in ("results", "runtime_stats"):
        catalog.create_namespace(namespace)
    table = catalog.create_table(
        "results.cities",
        schema=pa.schema([("id", pa.int64()), ("city", pa.string())]),
        properties={"lakeport.execution-id": "999999", "lakeport.step": "cities"},
    )
    table.append(pa.table({"id": list(range(1, 61)), "city": [f"city {n}" for n in range(1, 61)]}))
    table.append(pa.table({"id": [61], "city": ["last"]}))
    catalog.create_table("runtime_stats.e1_stats", schema=pa.schema([("n", pa.int64())]))

    contents = client.get(f"/warehouses/{row.id}/contents").get_data(as_text=True)
    # Lakeport's bookkeeping namespaces are folded; results is open.
    assert re.search(r'data-namespace="results"\s+open>', contents)
    assert re.search(r'data-namespace="runtime_stats"\s+>', contents)
    assert f"/warehouses/{row.id}/tables/results.cities" in contents

    page = client.get(f"/warehouses/{row.id}/tables/results.cities?size=25&page=3").get_data(
        as_text=True
    )
    schema = page.split('data-testid="table-schema"')[1].split("</table>")[0]
    assert re.search(r"<code>id</code></td><td><code>long</code>", schema)
    assert re.search(r"<code>city</code></td><td><code>string</code>", schema)
    snapshots = page.split('data-testid="table-snapshots"')[1].split("</table>")[0]
    assert snapshots.count("<tr>") == 3 and snapshots.count(">append<") == 2  # header + two appends
    assert re.search(r'class="num">60</td>', snapshots) and re.search(
        r'class="num">1</td>', snapshots
    )
    assert re.search(r'<p class="stat">61</p>', page)
    # The preview is paged like any result: page 3 of 25 rows holds rows 51 to 61.
    assert "Rows 51–61 of" in page and ">61</strong>" in page
    assert re.search(r'<td class="num">51</td><td>city 51</td>', page)
    # Tags of executions that are not hers are not linked.
    assert "lakeport.step" in page and 'href="/executions/999999"' not in page

    # The pager's partial keeps the address bar in step; a new size keeps the first row in view.
    partial = client.get(
        f"/warehouses/{row.id}/tables/results.cities?size=50&row=51", headers={"HX-Request": "true"}
    )
    assert (
        partial.headers["HX-Push-Url"]
        == f"/warehouses/{row.id}/tables/results.cities?page=2&size=50"
    )
    assert "Rows 51–61 of" in partial.get_data(as_text=True)

    assert client.get(f"/warehouses/{row.id}/tables/no-dots").status_code == 404
    missing = client.get(f"/warehouses/{row.id}/tables/results.nothing").get_data(as_text=True)
    assert "does not exist" in missing
