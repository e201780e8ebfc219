"""No 500 for anyone without a session: every route of the portal, with every method it takes,
asked by a visitor who never signed in, by one whose session cookie was tampered with, and as
an HTMX request; a signed-in user's request without its CSRF token gets the refusal page. Each
answer is a 2xx/3xx/4xx that says what to do, never a server error, and a protected page's
content never reaches a visitor."""

from __future__ import annotations

import re

import pytest

from tests.factories import make_user, sign_in_as

PUBLIC_ENDPOINTS = {
    "static",
    "main.favicon",
    "main.health",
    "auth.login",
    "auth.start",
    "auth.callback",
    "auth.logged_out",
    "api.openapi_json",
}


def concrete_urls(app) -> list[tuple[str, str, str]]:
    """(endpoint, method, URL) for every rule, its variables filled with plausible values."""
    urls = []
    for rule in app.url_map.iter_rules():
        url = rule.rule
        for argument in rule.arguments:
            url = re.sub(rf"<(?:\w+:)?{argument}>", "1", url)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            urls.append((rule.endpoint, method, url))
    return urls


@pytest.mark.parametrize("headers", [{}, {"HX-Request": "true"}], ids=["page", "htmx"])
def test_a_visitor_without_a_session_gets_no_server_error_anywhere(app, client, headers):
    for endpoint, method, url in concrete_urls(app):
        response = client.open(url, method=method, headers=headers)
        assert response.status_code < 500, (method, url, response.status_code)
        if endpoint in PUBLIC_ENDPOINTS:
            continue
        if (
            endpoint.startswith("api.") and endpoint != "api.openapi_docs"
        ):  # the API wants a token, not a session
            assert (
                response.status_code == 401 and response.content_type == "application/problem+json"
            ), (method, url)
            assert "/auth/login" not in response.get_data(as_text=True)
            continue
        if headers:  # htmx: told to navigate to sign-in, with no page in the body
            assert (
                response.status_code == 401 and "/auth/login" in response.headers["HX-Redirect"]
            ), (method, url)
        else:
            assert response.status_code == 302 and "/auth/login" in response.headers["Location"], (
                method,
                url,
            )


def test_the_icon_browsers_ask_for_by_its_old_name_leads_to_the_portals_icon(
    app, client, db_engine
):
    """A browser asks for /favicon.ico whatever the page links: no 404 in its console, signed in or not."""
    signed_in = app.test_client()
    sign_in_as(signed_in, make_user(db_engine))
    for visitor in (client, signed_in):
        answer = visitor.get("/favicon.ico")
        assert answer.status_code == 301 and answer.headers["Location"].endswith(
            "/static/favicon.svg"
        )
        assert visitor.get(answer.headers["Location"]).status_code == 200


def test_a_tampered_or_expired_session_is_asked_to_sign_in(app, client, db_engine):
    user = make_user(db_engine)
    sign_in_as(client, user)
    assert client.get("/compute-units/").status_code == 200
    cookie = client.get_cookie("session")
    client.set_cookie("session", cookie.value[:-4] + "AAAA")  # its signature no longer matches
    for method, url in (
        ("GET", "/compute-units/"),
        ("POST", "/compute-units/"),
        ("POST", "/compute-units/1/terminate"),
    ):
        response = client.open(url, method=method)
        assert response.status_code == 302 and "/auth/login" in response.headers["Location"], (
            method,
            url,
        )
    client.delete_cookie("session")  # an expired cookie is gone from the browser
    assert client.post("/warehouses/1/archive").status_code == 302


def test_a_post_without_its_csrf_token_is_refused_with_a_page(app, client, db_engine):
    sign_in_as(client, make_user(db_engine))
    for url in ("/compute-units/", "/compute-units/1/terminate", "/warehouses/", "/workflows/"):
        page = client.post(url, data={"name": "x"})
        assert page.status_code == 400 and "This form expired" in page.get_data(as_text=True), url
        inline = client.post(url, data={"name": "x"}, headers={"HX-Request": "true"})
        assert inline.status_code == 400 and "This form expired" in inline.get_data(as_text=True), (
            url
        )
