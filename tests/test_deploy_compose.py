"""The production compose file (deploy/): settings, wiring and the Keycloak realm agree.

No container runs here. compose.yaml is read the way `docker compose` reads it, with its variables
filled in from .env.example (empty secrets get stand-ins), and the realm import the way Keycloak
reads it, with its ${...} placeholders filled from the keycloak service's environment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

from app.config import PROJECT_ROOT, SETTINGS, Config
from tests.deploy_files import (
    COMPOSE,
    COMPOSE_VARIABLE,
    DEPLOY,
    ENV_EXAMPLE,
    PORTAL_ENV,
    RAW,
    SERVICES,
    depends_on,
    environment,
    interpolate,
)

# Keycloak's realm-import placeholders: ${VAR} or ${VAR:default}.
KEYCLOAK_PLACEHOLDER = re.compile(r"\$\{(?P<name>\w+)(?::(?P<default>[^}]*))?\}")
HEALTH_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
SECRET_NAME = re.compile(r"SECRET|PASSWORD|ENCRYPTION_KEY|PRESHARED_KEY|API_KEY")


LAKEKEEPER_ENV = environment(SERVICES["lakekeeper"])
OPENFGA_ENV = environment(SERVICES["openfga"])
BOOTSTRAP = SERVICES["lakekeeper-bootstrap"]
BOOTSTRAP_SCRIPT = BOOTSTRAP["command"][0]


def realm_as_imported() -> dict:
    keycloak_env = environment(SERVICES["keycloak"])

    def fill(match: re.Match) -> str:
        value = keycloak_env.get(match["name"], match["default"])
        # Keycloak leaves a placeholder it cannot resolve in place; keep it, for the test to find.
        return match.group(0) if value is None else value

    return json.loads(
        KEYCLOAK_PLACEHOLDER.sub(fill, (DEPLOY / "keycloak" / "lakeport-realm.json").read_text())
    )


REALM = realm_as_imported()
CLIENTS = {client["clientId"]: client for client in REALM["clients"]}


def published_host_port(service: dict, container_port: int) -> int:
    for mapping in service.get("ports", []):
        *_, host_port, target = str(mapping).split(":")
        if int(target) == container_port:
            return int(host_port)
    raise AssertionError(f"port {container_port} is not published")


def test_interpolation_follows_compose_rules():
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate("$${SET}-${SET}-${EMPTY:-d}-${EMPTY-d}-${UNSET-d}", env) == "${SET}-x-d--d"
    assert interpolate("${EMPTY?must}", env) == ""
    with pytest.raises(KeyError, match="EMPTY"):
        interpolate("${EMPTY:?must}", env)


def test_portal_sets_only_lakeport_settings_that_exist():
    known = {setting.env for setting in SETTINGS.values()}
    lakeport_variables = {name for name in PORTAL_ENV if name.startswith("LAKEPORT_")}
    assert lakeport_variables, "the portal service sets no LAKEPORT_* variable"
    assert lakeport_variables <= known, f"unknown settings: {sorted(lakeport_variables - known)}"


def test_portal_has_its_required_settings_and_validates():
    required = {
        "LAKEPORT_SECRET_KEY",
        "LAKEPORT_OIDC_CLIENT_SECRET",
        "LAKEPORT_DATABASE_URL",
        "LAKEPORT_LAKEKEEPER_URL",
    }
    assert {name for name in required if PORTAL_ENV.get(name)} == required
    config = Config.from_env(PORTAL_ENV)
    config.validate()
    assert config.DATABASE_URL.startswith("postgresql+psycopg://")


def test_secrets_are_required_variables_never_literals():
    checked = set()
    for name, service in RAW["services"].items():
        for variable, value in environment(service).items():
            if SECRET_NAME.search(variable):
                checked.add(variable)
                assert re.search(r"\$\{\w+:\?[^}]*\}", value), (
                    f"{name}: {variable} is not a required ${{VAR:?}}"
                )
    # Every secret the portal cannot start without is set here; optional ones (a Ray token for
    # attached clusters) belong to deployments that use them.
    assert {
        setting.env for setting in SETTINGS.values() if setting.secret and setting.default is None
    } <= checked


def test_env_example_lists_exactly_the_variables_compose_reads():
    text = (DEPLOY / "compose.yaml").read_text()
    referenced = {match["name"] for match in COMPOSE_VARIABLE.finditer(text) if match["name"]}
    # A secret's `environment` source is read by compose too (docker/compose pkg/compose/secrets.go).
    referenced |= {
        secret["environment"]
        for secret in RAW.get("secrets", {}).values()
        if "environment" in secret
    }
    required = {
        match["name"] for match in COMPOSE_VARIABLE.finditer(text) if match["op"] in (":?", "?")
    }
    assert required <= set(ENV_EXAMPLE), (
        f"missing from .env.example: {sorted(required - set(ENV_EXAMPLE))}"
    )
    assert set(ENV_EXAMPLE) <= referenced, (
        f"unused in compose.yaml: {sorted(set(ENV_EXAMPLE) - referenced)}"
    )
    shipped_secrets = {
        name for name in ENV_EXAMPLE if SECRET_NAME.search(name) and ENV_EXAMPLE[name]
    }
    assert not shipped_secrets, f"the example must ship no secret: {sorted(shipped_secrets)}"


def test_every_dependency_exists_and_can_be_met():
    for name, service in SERVICES.items():
        for target, condition in depends_on(service).items():
            assert target in SERVICES, f"{name} depends on unknown service {target}"
            assert condition in HEALTH_CONDITIONS, (
                f"{name} -> {target}: unknown condition {condition}"
            )
            if condition == "service_healthy":
                assert "healthcheck" in SERVICES[target], (
                    f"{name} waits for {target}, which has no healthcheck"
                )
            if condition == "service_completed_successfully":
                assert SERVICES[target].get("restart", "no") == "no", (
                    f"{target} is waited on to finish, but restarts"
                )


def test_services_address_each_other_by_service_name():
    urls = [
        PORTAL_ENV["LAKEPORT_DATABASE_URL"],
        PORTAL_ENV["LAKEPORT_OIDC_ISSUER"],
        PORTAL_ENV["LAKEPORT_LAKEKEEPER_URL"],
        LAKEKEEPER_ENV["LAKEKEEPER__OPENID_PROVIDER_URI"],
        LAKEKEEPER_ENV["LAKEKEEPER__PG_DATABASE_URL_WRITE"],
        LAKEKEEPER_ENV["LAKEKEEPER__BASE_URI"],
    ]
    for url in urls:
        assert urlparse(url).hostname in SERVICES, f"{url}: no such service"
    assert urlparse(PORTAL_ENV["LAKEPORT_LAKEKEEPER_URL"]).hostname == "lakekeeper"


def test_portal_and_lakekeeper_trust_the_same_realm():
    issuer = f"http://keycloak:8080/realms/{REALM['realm']}"
    assert PORTAL_ENV["LAKEPORT_OIDC_ISSUER"] == issuer
    assert LAKEKEEPER_ENV["LAKEKEEPER__OPENID_PROVIDER_URI"] == issuer
    token_url = f"{issuer}/protocol/openid-connect/token"
    assert token_url in SERVICES["lakekeeper-bootstrap"]["command"][0]


def test_public_urls_match_the_published_ports():
    keycloak_url = urlparse(environment(SERVICES["keycloak"])["KC_HOSTNAME"])
    assert keycloak_url.port == published_host_port(SERVICES["keycloak"], 8080)
    portal_url = urlparse(PORTAL_ENV["LAKEPORT_PUBLIC_URL"])
    assert portal_url.port == published_host_port(SERVICES["portal"], 8000)


def test_lakekeeper_is_a_pinned_013_release_that_migrates_then_serves():
    server, migrate = SERVICES["lakekeeper"], SERVICES["lakekeeper-migrate"]
    assert re.fullmatch(r"quay\.io/lakekeeper/catalog:v0\.13\.\d+", server["image"])
    assert migrate["image"] == server["image"]
    assert migrate["command"] == ["migrate"] and server["command"] == ["serve"]
    assert depends_on(server)["lakekeeper-migrate"] == "service_completed_successfully"
    assert environment(migrate).items() <= LAKEKEEPER_ENV.items()


def test_realm_import_resolves_every_placeholder():
    unresolved = KEYCLOAK_PLACEHOLDER.findall(json.dumps(REALM))
    assert not unresolved, f"Keycloak would import these literally: {unresolved}"


def test_portal_client_matches_the_portal():
    client = CLIENTS[PORTAL_ENV["LAKEPORT_OIDC_CLIENT_ID"]]
    public_url = PORTAL_ENV["LAKEPORT_PUBLIC_URL"].rstrip("/")
    assert client["redirectUris"] == [f"{public_url}/auth/callback"]
    assert client["attributes"]["post.logout.redirect.uris"] == f"{public_url}/auth/logged-out"
    assert client["secret"] == PORTAL_ENV["LAKEPORT_OIDC_CLIENT_SECRET"]
    assert client["publicClient"] is False and client["standardFlowEnabled"] is True
    assert client["implicitFlowEnabled"] is False and client["directAccessGrantsEnabled"] is False
    assert client["attributes"]["pkce.code.challenge.method"] == "S256"


def test_service_client_matches_the_portal_and_the_bootstrap():
    client = CLIENTS[PORTAL_ENV["LAKEPORT_LAKEKEEPER_CLIENT_ID"]]
    assert client["serviceAccountsEnabled"] is True and client["standardFlowEnabled"] is False
    assert client["secret"] == PORTAL_ENV["LAKEPORT_LAKEKEEPER_CLIENT_SECRET"]
    assert environment(BOOTSTRAP)["SERVICE_CLIENT_SECRET"] == client["secret"]
    assert f'token_of {client["clientId"]} "$SERVICE_CLIENT_SECRET"' in BOOTSTRAP_SCRIPT


def test_audience_mapper_gives_lakekeeper_its_audience():
    audience = LAKEKEEPER_ENV["LAKEKEEPER__OPENID_AUDIENCE"]
    assert PORTAL_ENV["LAKEPORT_LAKEKEEPER_AUDIENCE"] == audience
    for client_id in (
        PORTAL_ENV["LAKEPORT_OIDC_CLIENT_ID"],
        PORTAL_ENV["LAKEPORT_LAKEKEEPER_CLIENT_ID"],
        "lakekeeper-admin",
    ):
        audiences = {
            mapper["config"]["included.custom.audience"]
            for mapper in CLIENTS[client_id].get("protocolMappers", [])
            if mapper["protocolMapper"] == "oidc-audience-mapper"
            and mapper["config"]["access.token.claim"] == "true"
        }
        assert audiences == {audience}, client_id


def test_test_users_keep_their_subject_across_reimports():
    users = {user["username"]: user for user in REALM["users"]}
    assert {"alice", "bob"} <= set(users)
    # Lakeport keys users by issuer + subject; a fixed id keeps it when Keycloak re-imports the realm.
    assert all(user.get("id") for user in users.values())


# --- Lakekeeper with OpenFGA, and executions acting as their user ----------------------------


def test_lakekeeper_authorizes_with_openfga_as_its_docs_configure_it():
    migrate = environment(SERVICES["lakekeeper-migrate"])
    for env in (
        LAKEKEEPER_ENV,
        migrate,
    ):  # migrate writes the authorization model, serve checks against it
        assert env["LAKEKEEPER__AUTHZ_BACKEND"] == "openfga"
        endpoint = urlparse(env["LAKEKEEPER__OPENFGA__ENDPOINT"])
        assert (endpoint.hostname, endpoint.port) == ("openfga", 8081)  # OpenFGA's gRPC port
        assert env["LAKEKEEPER__OPENFGA__API_KEY"] == OPENFGA_ENV["OPENFGA_AUTHN_PRESHARED_KEYS"]
        assert env["LAKEKEEPER__OPENFGA__STORE_NAME"]
    assert OPENFGA_ENV["OPENFGA_AUTHN_METHOD"] == "preshared"
    for name in (
        "LAKEKEEPER__OPENID_PROVIDER_URI",
        "LAKEKEEPER__OPENID_AUDIENCE",
        "LAKEKEEPER__BASE_URI",
        "LAKEKEEPER__PG_ENCRYPTION_KEY",
        "LAKEKEEPER__PG_DATABASE_URL_READ",
        "LAKEKEEPER__PG_DATABASE_URL_WRITE",
    ):
        assert LAKEKEEPER_ENV.get(name), name
    # Lakeport grants each warehouse to `oidc~<sub>`: Lakekeeper must name users after `sub`.
    assert LAKEKEEPER_ENV["LAKEKEEPER__OPENID_SUBJECT_CLAIM"] == "sub"
    assert depends_on(SERVICES["lakekeeper"])["openfga"] == "service_healthy"
    assert depends_on(SERVICES["lakekeeper-migrate"])["openfga"] == "service_healthy"


def test_openfga_migrates_its_own_database_then_serves():
    migrate, server, database = (
        SERVICES["openfga-migrate"],
        SERVICES["openfga"],
        SERVICES["openfga-db"],
    )
    assert re.fullmatch(
        r"openfga/openfga:v1\.(1[1-9]|[2-9]\d)(\.\d+)?", server["image"]
    )  # Lakekeeper needs >= 1.11
    assert migrate["image"] == server["image"]
    assert migrate["command"] == ["migrate"] and server["command"] == ["run"]
    assert depends_on(server)["openfga-migrate"] == "service_completed_successfully"
    uri = urlparse(OPENFGA_ENV["OPENFGA_DATASTORE_URI"])
    assert OPENFGA_ENV["OPENFGA_DATASTORE_ENGINE"] == "postgres" and uri.hostname == "openfga-db"
    db_env = environment(database)
    assert (uri.username, uri.password, uri.path.lstrip("/")) == (
        db_env["POSTGRES_USER"],
        db_env["POSTGRES_PASSWORD"],
        db_env["POSTGRES_DB"],
    )
    assert environment(migrate).items() <= OPENFGA_ENV.items()
    assert "ports" not in server  # only Lakekeeper talks to OpenFGA


def test_every_client_the_stack_uses_exists_in_the_realm():
    used = {
        PORTAL_ENV["LAKEPORT_OIDC_CLIENT_ID"],
        PORTAL_ENV["LAKEPORT_LAKEKEEPER_CLIENT_ID"],
        PORTAL_ENV["LAKEPORT_LAKEKEEPER_AUDIENCE"],
    }
    used |= set(re.findall(r"token_of ([\w-]+) ", BOOTSTRAP_SCRIPT))
    assert used == {"lakeport-portal", "lakeport-service", "lakekeeper", "lakekeeper-admin"}
    assert used <= set(CLIENTS), f"missing from the realm: {sorted(used - set(CLIENTS))}"
    for client_id in used:
        assert CLIENTS[client_id]["enabled"] is True, client_id
    # The audience the service client exchanges tokens for is a client: Keycloak's `audience` names one.
    assert CLIENTS[LAKEKEEPER_ENV["LAKEKEEPER__OPENID_AUDIENCE"]]["bearerOnly"] is True
    admin = CLIENTS["lakekeeper-admin"]
    assert admin["serviceAccountsEnabled"] is True
    assert admin["secret"] == environment(BOOTSTRAP)["ADMIN_CLIENT_SECRET"]
    service_accounts = {user.get("serviceAccountClientId") for user in REALM["users"]}
    assert {"lakeport-service", "lakekeeper-admin"} <= service_accounts


# --- Keycloak's token exchange with impersonation, as Keycloak 26.0 decides it ----------------
#
# The portal posts `grant_type=token-exchange` with its own token as `subject_token`, the user in
# `requested_subject` and `audience=lakekeeper` (app/lakekeeper/tokens.py). Keycloak's legacy
# exchange (keycloak/keycloak services/src/main/java/org/keycloak/protocol/oidc/
# DefaultTokenExchangeProvider.java, `tokenExchange`) then makes two checks, modelled below:
#
# 1. Impersonation. With a subject_token it calls `users().canImpersonate(requestedUser, client)` on
#    an AdminAuth of the token's user, the service account (services/.../admin/permissions/
#    UserPermissions.java). `canImpersonate()` is true when that user holds realm-management's
#    `impersonation` role (ImpersonationConstants.IMPERSONATION_ROLE, server-spi-private/.../models/
#    ImpersonationConstants.java); otherwise it evaluates the `admin-impersonating.permission.users`
#    permission in a plain `DefaultEvaluationContext(identity, session)`, whose attributes hold no
#    `kc.client.id` (services/.../authorization/common/DefaultEvaluationContext.java). A *client*
#    policy grants only when `kc.client.id` names its client (authz/policy/common/.../client/
#    ClientPolicyProvider.java), so there it never matches and Keycloak answers 403; a *user* policy
#    compares the identity's id (.../user/UserPolicyProvider.java) and can match. Only the direct
#    exchange without a subject_token (`canClientImpersonate`) adds `kc.client.id`.
#    Then `isImpersonatable`: the `user-impersonated.permission.users` permission, evaluated with the
#    impersonated user as the identity; no permission or no policy on it means anyone may be.
# 2. The audience. `exchangeClientToClient` asks `clients().canExchangeTo(client, lakekeeper)`
#    (services/.../admin/permissions/ClientPermissions.java): the `token-exchange` permission on the
#    target client's resource, evaluated *with* `kc.client.id` set, so a client policy works there.
# A NEGATIVE policy turns a grant into a deny and no grant into a permit (server-spi-private/.../
# policy/evaluation/DefaultEvaluation.java).

IMPERSONATION_ROLE = "impersonation"  # ImpersonationConstants.IMPERSONATION_ROLE


def _authz() -> dict:
    return CLIENTS["realm-management"]["authorizationSettings"]


def _policies() -> dict[str, dict]:
    return {policy["name"]: policy for policy in _authz()["policies"]}


def _service_account(client_id: str) -> dict:
    return next(user for user in REALM["users"] if user.get("serviceAccountClientId") == client_id)


def _users_by_name() -> dict[str, dict]:
    return {user["username"]: user for user in REALM["users"]}


def _policy_grants(policy: dict, identity: dict, attributes: dict[str, set[str]]) -> bool:
    """One policy's effect for `identity` (a realm user) under the context's `attributes`."""
    config = policy.get("config", {})
    if policy["type"] == "client":  # ClientPolicyProvider: kc.client.id must name the client
        granted = bool(set(json.loads(config["clients"])) & attributes.get("kc.client.id", set()))
    elif (
        policy["type"] == "user"
    ):  # UserPolicyProvider: the identity's id (import resolves usernames)
        named = set(json.loads(config["users"]))
        granted = identity["username"] in named or identity["id"] in named
    else:
        raise AssertionError(
            f"policy type {policy['type']} is not modelled: extend this test from Keycloak's source"
        )
    return granted != (policy.get("logic", "POSITIVE") == "NEGATIVE")


def _permission_grants(name: str, identity: dict, attributes: dict[str, set[str]]) -> bool | None:
    """The scope permission `name` for `identity`, or None when it is absent or has no policy."""
    permission = _policies().get(name)
    applied = json.loads(permission["config"].get("applyPolicies", "[]")) if permission else []
    if not applied:
        return None
    effects = [_policy_grants(_policies()[policy], identity, attributes) for policy in applied]
    return (
        all(effects)
        if permission.get("decisionStrategy", "UNANIMOUS") == "UNANIMOUS"
        else any(effects)
    )


def keycloak_lets_exchange_as(client_id: str, username: str) -> bool:
    """Would Keycloak 26.0 give `client_id`, exchanging its own service-account token as
    subject_token, a token acting as `username`? (check 1 above)"""
    caller = _service_account(client_id)
    roles = caller.get("clientRoles", {}).get("realm-management", [])
    may_impersonate = IMPERSONATION_ROLE in roles or bool(
        _permission_grants("admin-impersonating.permission.users", caller, attributes={})
    )  # no kc.client.id
    target = _users_by_name()[username]
    impersonatable = _permission_grants("user-impersonated.permission.users", target, attributes={})
    return may_impersonate and impersonatable is not False


def keycloak_lets_exchange_for_audience(client_id: str, audience: str) -> bool:
    """Check 2 above: may `client_id` exchange tokens for the client `audience`?"""
    target = CLIENTS[audience]
    granted = _permission_grants(
        f"token-exchange.permission.client.{target['id']}",
        _service_account(client_id),
        attributes={"kc.client.id": {client_id}},
    )
    resources = {resource["name"] for resource in _authz()["resources"]}
    return bool(granted) and f"client.resource.{target['id']}" in resources


def test_keycloak_features_are_the_legacy_token_exchange_with_permissions_v1():
    features = environment(SERVICES["keycloak"])["KC_FEATURES"].split(",")
    # Impersonation (requested_subject) is legacy token exchange (V1) with fine-grained permissions V1.
    assert {feature.split(":")[0] for feature in features} >= {
        "token-exchange",
        "admin-fine-grained-authz",
    }
    assert not any(feature.endswith(":v2") for feature in features)


def test_the_service_client_may_exchange_its_token_for_one_acting_as_a_person():
    service = PORTAL_ENV["LAKEPORT_LAKEKEEPER_CLIENT_ID"]
    for person in ("alice", "bob"):
        assert keycloak_lets_exchange_as(service, person), person
    assert keycloak_lets_exchange_for_audience(service, PORTAL_ENV["LAKEPORT_LAKEKEEPER_AUDIENCE"])
    # The role is what decides (a client policy on `impersonate` would never match, see above).
    assert IMPERSONATION_ROLE in _service_account(service)["clientRoles"]["realm-management"]
    # Declared in the file: a realm file that lists `realm-management` gets its admin roles only
    # after the users' role mappings are imported (services/.../managers/RealmManager.java,
    # `importRealm`: the impersonation setup is postponed), so the role must not depend on that.
    declared = {role["name"] for role in REALM["roles"]["client"]["realm-management"]}
    assert IMPERSONATION_ROLE in declared


def test_no_other_client_may_exchange_and_nobody_may_become_a_service_account():
    service = PORTAL_ENV["LAKEPORT_LAKEKEEPER_CLIENT_ID"]
    audience = PORTAL_ENV["LAKEPORT_LAKEKEEPER_AUDIENCE"]
    assert not keycloak_lets_exchange_as("lakekeeper-admin", "alice")
    assert not keycloak_lets_exchange_for_audience("lakekeeper-admin", audience)
    # lakekeeper-admin's account is Lakekeeper's server admin: the portal must never act as it.
    for account in ("service-account-lakekeeper-admin", "service-account-lakeport-service"):
        assert not keycloak_lets_exchange_as(service, account), account
    holders = [
        user["username"]
        for user in REALM["users"]
        if IMPERSONATION_ROLE in user.get("clientRoles", {}).get("realm-management", [])
    ]
    assert holders == [_service_account(service)["username"]]
    # Exchanged tokens live an hour (the target client's lifespan), not the realm's five minutes.
    assert CLIENTS[audience]["attributes"]["access.token.lifespan"] == "3600"


def test_a_client_policy_on_impersonate_is_not_enough_with_a_subject_token(monkeypatch):
    # The realm as it was before: `impersonate` allowed through a client policy, no role.
    service = PORTAL_ENV["LAKEPORT_LAKEKEEPER_CLIENT_ID"]
    authz = json.loads(json.dumps(_authz()))
    authz["policies"].append(
        {
            "name": "admin-impersonating.permission.users",
            "type": "scope",
            "logic": "POSITIVE",
            "decisionStrategy": "UNANIMOUS",
            "config": {
                "resources": '["Users"]',
                "scopes": '["impersonate"]',
                "applyPolicies": '["lakeport-service-client"]',
            },
        }
    )
    account = json.loads(json.dumps(_service_account(service)))
    account.pop("clientRoles", None)
    monkeypatch.setitem(CLIENTS["realm-management"], "authorizationSettings", authz)
    monkeypatch.setitem(
        REALM,
        "users",
        [account if u["username"] == account["username"] else u for u in REALM["users"]],
    )
    assert not keycloak_lets_exchange_as(service, "alice")
    # The same permission with a user policy naming the service account would do.
    authz["policies"].append(
        {
            "name": "the-service-account",
            "type": "user",
            "logic": "POSITIVE",
            "config": {"users": json.dumps([account["username"]])},
        }
    )
    authz["policies"][-2]["config"]["applyPolicies"] = '["the-service-account"]'
    assert keycloak_lets_exchange_as(service, "alice")


def test_sign_in_tokens_carry_group_names_and_the_operators_group_exists():
    # keycloak/keycloak services/src/main/java/org/keycloak/protocol/oidc/mappers/GroupMembershipMapper.java:
    # the claim is `claim.name`; `full.path` "true" (its default) writes "/parent/name", anything else
    # the bare name. The portal reads `groups` at each sign-in (app/roles.py).
    mappers = [
        mapper
        for mapper in CLIENTS[PORTAL_ENV["LAKEPORT_OIDC_CLIENT_ID"]]["protocolMappers"]
        if mapper["protocolMapper"] == "oidc-group-membership-mapper"
    ]
    assert len(mappers) == 1
    config = mappers[0]["config"]
    assert config["claim.name"] == "groups" and config["full.path"] == "false"
    assert config["id.token.claim"] == config["userinfo.token.claim"] == "true"
    operators = Config.from_env(PORTAL_ENV).OPERATORS_GROUP
    assert operators in {group["name"] for group in REALM.get("groups", [])}
    members = [
        user["username"] for user in REALM["users"] if f"/{operators}" in user.get("groups", [])
    ]
    assert members == ["alice"]  # a test user, as the README says
    # The operator's check (make deploy-check, E2E_GROUP=analytics) shares with a group bob is in.
    assert [
        user["username"] for user in REALM["users"] if "/analytics" in user.get("groups", [])
    ] == ["bob"]


def test_portal_asks_keycloak_for_no_warehouse_scope():
    # Keycloak knows no `warehouse:<id>` scopes; grants in OpenFGA confine the exchanged token.
    assert Config.from_env(PORTAL_ENV).EXECUTION_TOKEN_WAREHOUSE_SCOPE is False


def test_bootstrap_makes_the_service_identity_project_admin_and_nothing_more():
    assert (
        "is-operator" not in BOOTSTRAP_SCRIPT
    )  # the service identity is no server operator or admin
    bootstrap_call = re.search(
        r'Bearer \$(\w+)"[^\n]*\n[^\n]*accept-terms-of-use', BOOTSTRAP_SCRIPT
    )
    assert bootstrap_call and bootstrap_call.group(1) == "admin"
    assert re.search(
        r'"type\\": \\"project_admin\\", \\"user\\": \\"\$service_id', BOOTSTRAP_SCRIPT
    )
    assert "/management/v1/permissions/project/assignments" in BOOTSTRAP_SCRIPT
    assert re.search(r'Bearer \$service"[^\n]*\n[^\n]*update-if-exists', BOOTSTRAP_SCRIPT)


FAKE_CURL_DIR = PROJECT_ROOT / "tests" / "deploy_fakes"
SERVICE_GRANT = {"type": "project_admin", "user": "oidc~sub-of-token-of-lakeport-service"}


def run_bootstrap(tmp_path, **state) -> tuple[subprocess.CompletedProcess, dict]:
    """The one-shot's script, as compose hands it to `sh -c`, against a Keycloak and a Lakekeeper
    0.13.3 played by tests/deploy_fakes/curl; returns the run and what Lakekeeper then holds."""
    state_file = tmp_path / "lakekeeper.json"
    if not state_file.exists():
        state_file.write_text(json.dumps({"bootstrapped": False, "assignments": [], **state}))
    else:
        state_file.write_text(
            json.dumps({**json.loads(state_file.read_text()), "calls": [], **state})
        )
    env = {
        **environment(BOOTSTRAP),
        "FAKE_LAKEKEEPER_STATE": str(state_file),
        # The fake runs on this interpreter (`env python3` finds it first).
        "PATH": f"{FAKE_CURL_DIR}:{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    run = subprocess.run(
        ["sh", "-c", BOOTSTRAP_SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    return run, json.loads(state_file.read_text())


def test_bootstrap_on_a_new_lakekeeper_bootstraps_then_grants(tmp_path):
    run, lakekeeper = run_bootstrap(tmp_path)
    assert run.returncode == 0, run.stderr
    assert lakekeeper["bootstrapped"] and lakekeeper["server_admin"] == "token-of-lakekeeper-admin"
    assert lakekeeper["assignments"] == [SERVICE_GRANT]


def test_bootstrap_interrupted_before_the_grant_is_finished_by_the_next_run(tmp_path):
    # The first run is stopped right after Lakekeeper's bootstrap (two tokens, info, bootstrap).
    first, lakekeeper = run_bootstrap(tmp_path, stop_after_calls=4)
    assert first.returncode != 0
    assert lakekeeper["bootstrapped"] and lakekeeper["assignments"] == []
    again, lakekeeper = run_bootstrap(tmp_path, stop_after_calls=None)
    assert again.returncode == 0, again.stderr
    assert lakekeeper["assignments"] == [SERVICE_GRANT]
    assert "POST /management/v1/bootstrap" not in lakekeeper["calls"]  # bootstrapped once only


def test_bootstrap_run_again_changes_nothing(tmp_path):
    assert run_bootstrap(tmp_path)[0].returncode == 0
    run, lakekeeper = run_bootstrap(tmp_path)
    assert run.returncode == 0, run.stderr
    assert lakekeeper["assignments"] == [SERVICE_GRANT]
    assert [
        call for call in lakekeeper["calls"] if call.startswith("POST /management/v1/permissions")
    ] == []


def test_compute_units_may_reach_the_stacks_own_storage():
    from app.ray_clusters.local import allowed_endpoints

    readme = (DEPLOY / "README.md").read_text()
    endpoint = urlparse(
        re.search(r"endpoint `(http://[\w.-]+:\d+)`", readme).group(1)
    )  # the first warehouse's
    assert endpoint.hostname in SERVICES
    reachable = {
        (e.host, e.port)
        for e in allowed_endpoints(
            PORTAL_ENV["LAKEPORT_LAKEKEEPER_URL"],
            PORTAL_ENV.get("LAKEPORT_CU_ALLOWED_ENDPOINTS", ""),
        )
    }
    assert (endpoint.hostname, endpoint.port) in reachable
    assert ("lakekeeper", 8181) in reachable


def test_keycloak_runs_in_production_mode_on_its_own_database():
    keycloak, env = SERVICES["keycloak"], environment(SERVICES["keycloak"])
    assert keycloak["command"] == ["start", "--import-realm"]  # not start-dev
    # `start` refuses plain HTTP unless told TLS ends in front of it (keycloak/keycloak
    # quarkus/config-api/src/main/java/org/keycloak/config/HttpOptions.java, `http-enabled`).
    assert env["KC_HTTP_ENABLED"] == "true"
    assert (
        env["KC_DB"] == "postgres"
    )  # DatabaseOptions.java; the default dev-file database is for start-dev
    database = re.fullmatch(r"jdbc:postgresql://([\w-]+):5432/(\w+)", env["KC_DB_URL"])
    assert database and database.group(1) in SERVICES
    db_env = environment(SERVICES[database.group(1)])
    assert (database.group(2), env["KC_DB_USERNAME"], env["KC_DB_PASSWORD"]) == (
        db_env["POSTGRES_DB"],
        db_env["POSTGRES_USER"],
        db_env["POSTGRES_PASSWORD"],
    )
    assert depends_on(keycloak)[database.group(1)] == "service_healthy"
    assert any(
        volume.endswith(":/var/lib/postgresql/data")
        for volume in SERVICES[database.group(1)]["volumes"]
    )


def test_the_readme_names_every_volume_an_operator_must_keep():
    readme = (DEPLOY / "README.md").read_text()
    paragraph = readme[readme.index("`docker compose down` stops everything") :]
    paragraph = paragraph[: paragraph.index("\n\n")]
    named = set(re.findall(r"`([\w-]+-data)`", paragraph))
    assert named == set(COMPOSE["volumes"]), sorted(set(COMPOSE["volumes"]) ^ named)
    for service in SERVICES.values():  # and every service's data sits in one of them
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source.startswith("./") or source in COMPOSE["volumes"], volume


def test_the_worker_runs_the_portals_image_and_settings_with_the_worker_command():
    worker = SERVICES["worker"]
    assert worker["build"] == SERVICES["portal"]["build"]
    assert worker["command"] == ["flask", "--app", "wsgi", "lakeport", "worker"]
    # The same settings, so both see one database and one catalog; the worker's listing of the Ray
    # cluster adds its token file (tests/test_deploy_units.py).
    worker_env = environment(worker)
    assert worker_env.pop("LAKEPORT_RAY_CLUSTERS") != PORTAL_ENV["LAKEPORT_RAY_CLUSTERS"]
    assert worker_env == {
        name: value for name, value in PORTAL_ENV.items() if name != "LAKEPORT_RAY_CLUSTERS"
    }
    assert "ports" not in worker and worker["healthcheck"] == {"disable": True}
    assert (
        depends_on(worker)["portal-migrate"] == "service_completed_successfully"
    )  # migrated first


def test_the_walk_to_a_first_execution_names_what_the_stack_has():
    """deploy/README.md's walk from nothing to a COMPLETED execution, checked against the files
    it relies on: the users it signs in with, the bucket and key variables of the warehouse, the
    Ray cluster of the unit, and the two steps of the workflow, which are those `make deploy-check`
    runs (e2e/deploy_check.py), so the check and the walk prove the same thing."""
    from e2e import deploy_check

    readme = (DEPLOY / "README.md").read_text()
    walk = readme[readme.index("## From nothing to a first COMPLETED execution") :]
    walk = walk[: walk.index("\n### ")]
    users = {
        user["username"]: {c["value"] for c in user.get("credentials", [])}
        for user in REALM["users"]
    }
    signed_in = re.findall(r"\*\*(\w+) / (\w+)\*\*", walk)
    assert ("alice", "wonderland") in signed_in
    for username, password in signed_in:
        assert password in users[username], username
    assert f"Open `{PORTAL_ENV['LAKEPORT_PUBLIC_URL']}`" in walk
    minio_init = environment(SERVICES["minio-init"])
    assert f"| Bucket | `{minio_init['WAREHOUSE_BUCKET']}` |" in walk
    compose_text = (DEPLOY / "compose.yaml").read_text()
    keys = set(re.findall(r"the value of `(S3_WAREHOUSE_\w+)`", walk))
    assert keys == {"S3_WAREHOUSE_ACCESS_KEY", "S3_WAREHOUSE_SECRET_KEY"}
    for variable in keys:  # what minio-init makes the warehouses' key pair, from .env
        assert f"WAREHOUSE_{variable.removeprefix('S3_WAREHOUSE_')}: ${{{variable}:" in compose_text
    clusters = json.loads(environment(SERVICES["worker"])["LAKEPORT_RAY_CLUSTERS"])
    (cluster,) = re.findall(r"Ray cluster `(\w+)`, then \*Start\*", walk)
    assert cluster in {entry["name"] for entry in clusters}
    assert f"Code `{deploy_check.SQL_STEP}`" in walk
    python_step = walk[walk.index("```python\n") + len("```python\n") :]
    python_step = python_step[: python_step.index("```")]
    code = "\n".join(line.removeprefix("  ") for line in python_step.splitlines())
    assert "".join(code.split()) == "".join(deploy_check.PYTHON_STEP.split())
    assert f"Name `{deploy_check.OUTPUT_STEP}`" in walk
    rows = deploy_check.EXPECTED_ROWS
    assert (len(rows), rows[0], rows[-1]) == (10, ["0", "0", "n0"], ["9", "18", "n9"])
    assert "`id` 0-9, `twice` 0-18, `label` `n0`-`n9`" in walk
