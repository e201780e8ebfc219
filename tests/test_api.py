"""The API as a hostile client tries it, every answer checked against the OpenAPI document the
portal generates: tokens (missing, wrong, expired, revoked, read-only), another user's ids,
bad and oversized bodies, idempotent starts, rate limits; and the Tokens page."""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from app.api.rate_limit import WINDOW_SECONDS
from app.models import ApiToken, Execution, User, utcnow
from app.tokens import service as tokens
from tests.factories import (
    Api,
    csrf,
    equipped,
    execution_row,
    make_user,
    reload,
    sign_in_as,
    token_for,
    warehouse_row,
)


@pytest.fixture
def owner(db_engine):
    return make_user(db_engine)


def test_no_token_a_wrong_one_an_expired_or_revoked_one_answer_401(app, client, db_engine, owner):
    for token in (None, "not-a-token", "lkp_" + "a" * 43):
        answer = Api(client, token).call("GET", "/api/v1/warehouses")
        assert answer.status_code == 401 and answer.headers["WWW-Authenticate"].startswith("Bearer")
    text = token_for(app, owner)
    api = Api(client, text)
    assert api.call("GET", "/api/v1/warehouses").status_code == 200
    with Session(db_engine) as db:
        row = db.exec(select(ApiToken).where(ApiToken.token_sha256 == tokens.digest(text))).one()
        assert row.last_used_at is not None and text not in json.dumps(row.model_dump(mode="json"))
        row.expires_at = utcnow() - timedelta(seconds=1)
        db.add(row)
        db.commit()
    assert api.call("GET", "/api/v1/warehouses").status_code == 401
    revoked = token_for(app, owner)
    with app.app_context():
        from app.db import get_db

        tokens.revoke(
            get_db()
            .exec(select(ApiToken).where(ApiToken.token_sha256 == tokens.digest(revoked)))
            .one()
        )
    assert Api(client, revoked).call("GET", "/api/v1/warehouses").status_code == 401


def test_a_script_revokes_the_token_it_calls_with(app, client, db_engine, owner):
    api = Api(client, token_for(app, owner))
    assert api.call("POST", "/api/v1/tokens/current/revoke").status_code == 204
    assert api.call("GET", "/api/v1/warehouses").status_code == 401


def test_a_session_cookie_opens_no_api_call_and_a_token_opens_no_page(
    app, client, db_engine, newcomer
):
    workflow, warehouse, cu = equipped(db_engine, newcomer)
    signed_in = Api(client, None)  # the session cookie is there, the token is not
    assert signed_in.call("GET", "/api/v1/warehouses").status_code == 401
    started = signed_in.call(
        "POST",
        "/api/v1/executions",
        {"workflow_id": workflow.id, "compute_unit_id": cu.id, "warehouse_id": warehouse.id},
    )
    assert started.status_code == 401
    stranger = app.test_client()
    page = stranger.get(
        "/warehouses/", headers={"Authorization": f"Bearer {token_for(app, newcomer)}"}
    )
    assert page.status_code == 302 and "/auth/login" in page.headers["Location"]


def test_a_read_token_reads_and_cannot_change_anything(app, client, db_engine, owner):
    workflow, warehouse, cu = equipped(db_engine, owner)
    api = Api(client, token_for(app, owner, "read"))
    assert api.call("GET", f"/api/v1/compute-units/{cu.id}").get_json()["state"] == "RUNNING"
    for path, body in (
        (
            "/api/v1/executions",
            {"workflow_id": workflow.id, "compute_unit_id": cu.id, "warehouse_id": warehouse.id},
        ),
        (f"/api/v1/compute-units/{cu.id}/terminate", None),
        ("/api/v1/compute-units", {"name": "nope-unit"}),
    ):
        assert api.call("POST", path, body).status_code == 403, path
    assert reload(db_engine, type(cu), cu.id).state == "RUNNING"
    with Session(db_engine) as db:
        assert db.exec(select(Execution).where(Execution.owner_id == owner.id)).all() == []


def test_another_users_ids_answer_404_everywhere(app, client, db_engine, owner):
    theirs_workflow, theirs_warehouse, theirs_cu = equipped(db_engine, owner)
    theirs = execution_row(
        db_engine, owner, theirs_workflow, theirs_warehouse, theirs_cu, state="RUNNING", run_id="r"
    )
    me = make_user(db_engine)
    mine_workflow, mine_warehouse, mine_cu = equipped(db_engine, me)
    api = Api(client, token_for(app, me))
    for path in (
        f"/api/v1/warehouses/{theirs_warehouse.id}",
        f"/api/v1/compute-units/{theirs_cu.id}",
        f"/api/v1/workflows/{theirs_workflow.id}",
        f"/api/v1/executions/{theirs.id}",
    ):
        assert api.call("GET", path).status_code == 404, path
    for path in (
        f"/api/v1/compute-units/{theirs_cu.id}/terminate",
        f"/api/v1/executions/{theirs.id}/cancel",
    ):
        assert api.call("POST", path).status_code == 404, path
    # Their workflow, or their unit or warehouse under my workflow: refused, nothing started.
    for body in (
        {
            "workflow_id": theirs_workflow.id,
            "compute_unit_id": mine_cu.id,
            "warehouse_id": mine_warehouse.id,
        },
        {
            "workflow_id": mine_workflow.id,
            "compute_unit_id": theirs_cu.id,
            "warehouse_id": mine_warehouse.id,
        },
        {
            "workflow_id": mine_workflow.id,
            "compute_unit_id": mine_cu.id,
            "warehouse_id": theirs_warehouse.id,
        },
    ):
        assert api.call("POST", "/api/v1/executions", body).status_code in (400, 404), body
    assert reload(db_engine, Execution, theirs.id).cancel_requested_at is None
    assert reload(db_engine, type(theirs_cu), theirs_cu.id).state == "RUNNING"
    listed = api.call("GET", "/api/v1/executions").get_json()
    assert listed["items"] == []  # mine only


def test_bad_bodies_answer_a_problem_naming_the_field(app, client, db_engine, owner):
    api = Api(client, token_for(app, owner))
    missing = api.call("POST", "/api/v1/executions", {"workflow_id": 1})
    assert missing.status_code == 400 and missing.get_json()["field"] in (
        "compute_unit_id",
        "warehouse_id",
    )
    extra = api.call("POST", "/api/v1/compute-units", {"name": "unit-one", "owner_id": 1})
    assert extra.status_code == 400 and extra.get_json()["field"] == "owner_id"
    assert api.call("POST", "/api/v1/executions", raw=b"{not json").status_code == 400
    bad_name = api.call("POST", "/api/v1/compute-units", {"name": "Bad Name!"})
    assert bad_name.status_code == 400 and bad_name.get_json()["field"] == "name"
    too_many = api.call("POST", "/api/v1/compute-units", {"name": "big-unit", "cpus": 10_000})
    assert too_many.status_code == 400 and too_many.get_json()["field"] == "cpus"
    huge = api.call("POST", "/api/v1/compute-units", raw=b'{"name": "' + b"x" * 200_000 + b'"}')
    assert huge.status_code == 413
    assert api.call("GET", "/api/v1/warehouses?limit=0").status_code == 400
    assert api.call("GET", "/api/v1/warehouses?cursor=forged").get_json()["field"] == "cursor"
    assert api.call("GET", "/api/v1/no-such-thing", documented=False).status_code == 404


def test_lists_are_paged_by_cursor(app, client, db_engine, owner):
    made = [warehouse_row(db_engine, owner).id for _ in range(5)]
    api = Api(client, token_for(app, owner))
    seen, cursor = [], None
    while True:
        page = api.call(
            "GET", "/api/v1/warehouses?limit=2" + (f"&cursor={cursor}" if cursor else "")
        ).get_json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(made, reverse=True)


def test_a_retried_start_with_the_same_idempotency_key_starts_one_run(
    app, client, db_engine, owner
):
    workflow, warehouse, cu = equipped(db_engine, owner)
    api = Api(client, token_for(app, owner))
    body = {"workflow_id": workflow.id, "compute_unit_id": cu.id, "warehouse_id": warehouse.id}
    first = api.call(
        "POST", "/api/v1/executions", body, headers={"Idempotency-Key": "nightly-2026-11-25"}
    )
    again = api.call(
        "POST", "/api/v1/executions", body, headers={"Idempotency-Key": "nightly-2026-11-25"}
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert (
        first.get_json()["id"] == again.get_json()["id"] and first.get_json()["state"] == "QUEUED"
    )
    other = api.call(
        "POST", "/api/v1/executions", body, headers={"Idempotency-Key": "nightly-2026-11-26"}
    )
    assert other.status_code == 201 and other.get_json()["id"] != first.get_json()["id"]
    with Session(db_engine) as db:
        assert (
            len(db.exec(select(Execution).where(Execution.owner_id == owner.id)).all()) == 2
        )  # one per key
    pinned = api.call("POST", "/api/v1/executions", {**body, "pinned": {"datasets.people": 4242}})
    assert pinned.status_code == 201
    assert json.loads(reload(db_engine, Execution, pinned.get_json()["id"]).pinned_to) == {
        "tables": {"datasets.people": 4242}
    }
    for bad in ({"../etc": 1}, {"datasets.people": -1}, {"datasets.people": "latest"}):
        assert (
            api.call("POST", "/api/v1/executions", {**body, "pinned": bad})
            .get_json()["field"]
            .startswith("pinned")
        )
    cancelled = api.call("POST", f"/api/v1/executions/{first.get_json()['id']}/cancel")
    assert cancelled.status_code == 202 and cancelled.get_json()["state"] == "CANCELLED"
    assert (
        api.call("POST", f"/api/v1/executions/{first.get_json()['id']}/cancel").status_code == 409
    )


def test_going_over_the_rate_limit_answers_429_with_retry_after(app, client, db_engine, owner):
    app.config["API_CALLS_PER_MINUTE"] = 3
    api = Api(client, token_for(app, owner))
    # The limit counts calls per clock minute: start well inside one, so that the six calls
    # below fall into the same window.
    if (left := WINDOW_SECONDS - time.time() % WINDOW_SECONDS) < 10:
        time.sleep(left + 0.1)
    answers = [api.call("GET", "/api/v1/warehouses") for _ in range(5)]
    assert [answer.status_code for answer in answers[:3]] == [200] * 3
    assert answers[3].status_code == 429 and 1 <= int(answers[3].headers["Retry-After"]) <= 61
    # A user's tokens share the user's count.
    assert Api(client, token_for(app, owner)).call("GET", "/api/v1/warehouses").status_code == 429


def test_the_tokens_page_shows_a_token_once_and_revokes_it(app, client, db_engine, newcomer):
    made = client.post(
        "/tokens/", data={"name": "ci", "scope": "run", "days": "7", "csrf_token": csrf(client)}
    )
    page = made.get_data(as_text=True)
    text = re.search(r'data-testid="token-text">(lkp_[^<]+)<', page).group(1)
    assert text not in client.get("/tokens/").get_data(as_text=True)  # shown once
    with Session(db_engine) as db:
        row = db.exec(select(ApiToken).where(ApiToken.owner_id == newcomer.id)).one()
    assert row.token_sha256 == tokens.digest(text) and row.scope == "run"
    assert row.expires_at - row.created_at == timedelta(days=7)
    for days, field in (("91", "days"), ("0", "days")):
        refused = client.post(
            "/tokens/", data={"name": "x", "scope": "run", "days": days, "csrf_token": csrf(client)}
        )
        assert refused.status_code == 422 and 'aria-invalid="true"' in refused.get_data(
            as_text=True
        )
    assert (
        client.post(
            "/tokens/",
            data={"name": "x", "scope": "admin", "days": "7", "csrf_token": csrf(client)},
        ).status_code
        == 422
    )
    api = Api(app.test_client(), text)
    assert api.call("GET", "/api/v1/workflows").status_code == 200
    client.post(f"/tokens/{row.id}/revoke", data={"csrf_token": csrf(client)})
    assert "revoked" in client.get("/tokens/").get_data(as_text=True)
    assert api.call("GET", "/api/v1/workflows").status_code == 401
    stranger = make_user(db_engine)
    other = app.test_client()
    sign_in_as(other, stranger)
    assert (
        other.post(f"/tokens/{row.id}/revoke", data={"csrf_token": csrf(other)}).status_code == 404
    )


def test_the_openapi_document_is_3_1_and_browsable(client, newcomer):
    document = client.get("/api/v1/openapi.json").get_json()
    assert (
        document["openapi"].startswith("3.1")
        and document["components"]["securitySchemes"]["token"]["scheme"] == "bearer"
    )
    assert all(path.startswith("/api/v1/") for path in document["paths"])
    assert {
        "/api/v1/executions",
        "/api/v1/compute-units",
        "/api/v1/warehouses",
        "/api/v1/workflows",
    } <= set(document["paths"])
    page = client.get("/api/v1/docs").get_data(as_text=True)
    assert "POST /api/v1/executions" in page and "<script" not in page.split("</nav>", 1)[-1]


def provider_id_token(oidc_provider, username: str) -> str:
    """An ID token of the test provider for the portal's client (audience: the portal), got as a
    browser and the portal get one: the login form, then the code at the token endpoint."""
    import base64
    import hashlib
    import secrets
    from urllib.parse import parse_qs, urlencode, urlsplit

    import httpx

    from devstack.oidc_provider import (
        PORTAL_CLIENT_ID,
        TEST_USERS,
        login_via_form,
        portal_redirect_uri,
    )
    from tests.services import IN_PROCESS_PORTAL_URL

    discovery = httpx.get(
        f"{oidc_provider.issuer}/.well-known/openid-configuration", timeout=10
    ).json()
    verifier = secrets.token_urlsafe(48)
    challenge = (
        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    )
    redirect_uri = portal_redirect_uri(IN_PROCESS_PORTAL_URL)
    authorize = (
        discovery["authorization_endpoint"]
        + "?"
        + urlencode(
            {
                "client_id": PORTAL_CLIENT_ID,
                "response_type": "code",
                "scope": "openid email profile",
                "redirect_uri": redirect_uri,
                "state": "s",
                "nonce": "n",
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
    )
    with httpx.Client(timeout=10) as browser:
        landing = login_via_form(browser, authorize, username, TEST_USERS[username].password)
    code = parse_qs(urlsplit(landing.headers["Location"]).query)["code"][0]
    answer = httpx.post(
        discovery["token_endpoint"],
        timeout=10,
        auth=(PORTAL_CLIENT_ID, oidc_provider.portal_client_secret),
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        },
    )
    answer.raise_for_status()
    return answer.json()["id_token"]


def test_a_token_of_the_identity_provider_for_the_portal_opens_the_api_and_others_do_not(
    app, client, auth, oidc_provider, lakehouse, db_engine
):
    auth.login("alice")  # Lakeport knows her from a sign-in
    api = Api(app.test_client(), provider_id_token(oidc_provider, "alice"))
    assert api.call("GET", "/api/v1/warehouses").status_code == 200
    assert (
        api.call("POST", "/api/v1/compute-units", {"name": "Bad Name!"}).status_code == 400
    )  # may run
    # A token of the same provider for another audience (the catalog's), and a forged one: refused.
    assert (
        Api(app.test_client(), lakehouse.service_token())
        .call("GET", "/api/v1/warehouses")
        .status_code
        == 401
    )
    header, claims, _ = provider_id_token(oidc_provider, "alice").split(".")
    assert (
        Api(app.test_client(), f"{header}.{claims}.AAAA")
        .call("GET", "/api/v1/warehouses")
        .status_code
        == 401
    )
    # Bob unknown to Lakeport (as if he never signed in, whatever other tests did): the API does
    # not make him a user.
    from devstack.oidc_provider import TEST_USERS

    bob_token = provider_id_token(oidc_provider, "bob")
    with Session(db_engine) as db:
        known = db.exec(select(User.id).where(User.subject == TEST_USERS["bob"].sub)).first()
        if known is not None:
            row = db.get(User, known)
            row.subject = f"away-{row.subject}"
            db.add(row)
            db.commit()
    try:
        assert (
            Api(app.test_client(), bob_token).call("GET", "/api/v1/warehouses").status_code == 401
        )
    finally:
        if known is not None:
            with Session(db_engine) as db:
                row = db.get(User, known)
                row.subject = TEST_USERS["bob"].sub
                db.add(row)
                db.commit()
