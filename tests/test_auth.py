"""Single sign-on against the real local OpenID Connect provider."""

from __future__ import annotations

import logging
import secrets
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import httpx
from sqlmodel import Session, select

from app import create_app
from app.models import User
from devstack.oidc_provider import cancel_login_via_form


def test_pages_need_a_signed_in_user(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/auth/login?next=/")


def test_sign_in_uses_code_flow_with_pkce_state_and_nonce(auth):
    query = parse_qs(urlsplit(auth.start()).query)
    assert query["response_type"] == ["code"]
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) >= 43
    assert query["state"][0] and query["nonce"][0]
    assert "openid" in query["scope"][0].split()


def test_alice_signs_in_and_sees_her_name(auth, client, db_engine):
    response = auth.login("alice")
    assert response.status_code == 302 and response.headers["Location"] == "/"
    page = client.get("/").get_data(as_text=True)
    assert "Alice Liddell" in page
    with Session(db_engine) as db:
        user = db.exec(select(User).where(User.email == "alice@example.test")).one()
        assert user.subject and user.issuer.startswith("http://127.0.0.1:")


def test_name_and_email_are_refreshed_on_each_sign_in(auth, client, db_engine):
    auth.login("bob")
    with Session(db_engine) as db:
        bob = db.exec(select(User).where(User.email == "bob@example.test")).one()
        bob.name, bob.email = "Stale Name", "stale@example.test"
        db.add(bob)
        db.commit()
        bob_id = bob.id
    auth.logout()
    auth.login("bob")
    with Session(db_engine) as db:
        bob = db.get(User, bob_id)
        assert (bob.name, bob.email) == ("Bob Builder", "bob@example.test")
        assert len(db.exec(select(User).where(User.subject == bob.subject)).all()) == 1


def test_sign_in_returns_to_the_page_asked_for(auth):
    response = auth.login("alice", next_path="/health")
    assert response.headers["Location"] == "/health"


def test_next_never_leaves_the_site(auth):
    response = auth.login("alice", next_path="https://evil.example/")
    assert response.headers["Location"] == "/"


def test_wrong_password_shows_the_provider_error_and_issues_no_code(auth):
    response = auth.provider_login(auth.start(), "alice", "not-her-password")
    assert "Invalid username or password" in response.text
    assert "code=" not in str(response.headers.get("Location", ""))


def test_tampered_state_is_refused(auth, client):
    landing = auth.provider_login(auth.start(), "alice", auth.passwords["alice"])
    parts = urlsplit(str(landing.headers["Location"]))
    query = parse_qs(parts.query)
    response = client.get(parts.path, query_string={"code": query["code"][0], "state": "tampered"})
    assert response.status_code == 400
    assert "Sign-in expired" in response.get_data(as_text=True)
    assert client.get("/").status_code == 302  # still signed out


def test_replayed_code_is_refused(auth, client):
    landing = auth.provider_login(auth.start(), "alice", auth.passwords["alice"])
    redirect_url = str(landing.headers["Location"])
    assert auth.callback(redirect_url).status_code == 302
    auth.logout()
    # Same code and state again: the state was used up with the first callback.
    assert auth.callback(redirect_url).status_code == 400
    # Same code under a fresh, valid state: the provider itself refuses the used code.
    fresh_state = parse_qs(urlsplit(auth.start()).query)["state"][0]
    old_code = parse_qs(urlsplit(redirect_url).query)["code"][0]
    response = client.get("/auth/callback", query_string={"code": old_code, "state": fresh_state})
    assert response.status_code == 400
    assert "did not accept this sign-in" in response.get_data(as_text=True)
    assert client.get("/").status_code == 302


def test_cancelled_sign_in_shows_a_clear_page(auth, client):
    with httpx.Client(timeout=10) as browser:
        landing = cancel_login_via_form(browser, auth.start())
    assert "error=access_denied" in landing.headers["Location"]
    response = auth.callback(str(landing.headers["Location"]))
    assert response.status_code == 400
    assert "Sign-in cancelled" in response.get_data(as_text=True)
    assert client.get("/").status_code == 302


def test_htmx_request_with_expired_session_gets_hx_redirect(auth, client):
    auth.login("alice")
    client.delete_cookie("session")
    response = client.get("/", headers={"HX-Request": "true"})
    assert response.status_code == 401
    assert response.headers["HX-Redirect"].startswith("/auth/login")
    assert response.get_data(as_text=True) == ""


def test_logout_ends_local_and_provider_session(auth, client):
    auth.login("alice")
    response = auth.logout()
    assert response.status_code == 302
    end_session = urlsplit(response.headers["Location"])
    query = parse_qs(end_session.query)
    assert query["post_logout_redirect_uri"] == ["http://127.0.0.1:5999/auth/logged-out"]
    assert client.get("/").status_code == 302


def test_state_changing_requests_need_a_csrf_token(auth, client):
    auth.login("alice")
    response = client.post("/auth/logout")
    assert response.status_code == 400
    assert client.get("/").status_code == 200  # still signed in: the forged logout did nothing
    htmx = client.post(
        "/auth/logout", headers={"HX-Request": "true", "X-CSRFToken": auth.csrf_token()}
    )
    assert htmx.status_code == 302


def test_security_headers_and_cookie_flags(auth, client):
    response = auth.login("alice")
    cookie = response.headers.get("Set-Cookie", "")
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    page = client.get("/")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert "<script>" not in page.get_data(as_text=True)


def test_no_secret_or_token_reaches_the_logs(auth, portal_config, caplog):
    caplog.set_level(logging.DEBUG)
    landing = auth.provider_login(auth.start(), "alice", auth.passwords["alice"])
    code = parse_qs(urlsplit(str(landing.headers["Location"])).query)["code"][0]
    auth.callback(str(landing.headers["Location"]))
    # httpx/httpcore here are the test's stand-in browser, not the portal.
    logged = "\n".join(
        r.getMessage() for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))
    )
    assert "signed in" in logged
    for secret in (code, portal_config.OIDC_CLIENT_SECRET, auth.passwords["alice"]):
        assert secret not in logged


def test_provider_down_shows_a_clear_page(portal_config, closed_port):
    down = create_app(replace(portal_config, OIDC_ISSUER=f"http://127.0.0.1:{closed_port}"))
    response = down.test_client().get("/auth/login/start")
    assert response.status_code == 503
    assert "Identity provider unreachable" in response.get_data(as_text=True)
    assert "Traceback" not in response.get_data(as_text=True)


def test_health_reports_database_and_provider(client, portal_config, closed_port):
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json == {
        "status": "ok",
        "checks": {"database": "ok", "identity_provider": "ok"},
    }
    broken = create_app(
        replace(
            portal_config,
            OIDC_ISSUER=f"http://127.0.0.1:{closed_port}",
            SECRET_KEY=secrets.token_hex(8),
        )
    )
    response = broken.test_client().get("/health")
    assert response.status_code == 503
    assert response.json["checks"]["identity_provider"] == "unreachable"
