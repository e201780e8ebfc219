"""The production compose file (deploy/): settings, wiring and the Keycloak realm agree.

No container runs here. compose.yaml is read the way `docker compose` reads it, with its variables
filled in from .env.example (empty secrets get stand-ins), and the realm import the way Keycloak
reads it, with its ${...} placeholders filled from the keycloak service's environment.
"""
from __future__ import annotations

import json
import re
from urllib.parse import urlparse

import pytest
import yaml

from app.config import PROJECT_ROOT, SETTINGS, Config

DEPLOY = PROJECT_ROOT / "deploy"
# Compose's forms: $$, ${VAR}, ${VAR:?err}, ${VAR?err}, ${VAR:-default}, ${VAR-default}.
COMPOSE_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?[?-])(?P<arg>[^}]*))?\}")
# Keycloak's realm-import placeholders: ${VAR} or ${VAR:default}.
KEYCLOAK_PLACEHOLDER = re.compile(r"\$\{(?P<name>\w+)(?::(?P<default>[^}]*))?\}")
HEALTH_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
SECRET_NAME = re.compile(r"SECRET|PASSWORD|ENCRYPTION_KEY")


def read_env_example() -> dict[str, str]:
    entries = {}
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            entries[name] = value
    return entries


def interpolate(value, env: dict[str, str]):
    """`value` with compose's variable substitution applied to every string in it."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match["name"], match["op"], match["arg"]
        current = env.get(name)
        # The colon forms treat an empty value as unset.
        if current is not None and not (current == "" and op in (":?", ":-")):
            return current
        if op in (":?", "?"):
            raise KeyError(f"compose would stop: {name} is required ({arg})")
        return arg if op in (":-", "-") else ""

    return COMPOSE_VARIABLE.sub(substitute, value)


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(entry.partition("=")[::2] for entry in env)
    return {key: str(value) for key, value in env.items()}


def depends_on(service: dict) -> dict[str, str]:
    targets = service.get("depends_on") or {}
    if isinstance(targets, list):
        return {name: "service_started" for name in targets}
    return {name: spec.get("condition", "service_started") for name, spec in targets.items()}


ENV_EXAMPLE = read_env_example()
# The stand-ins differ per variable, so a value wired to the wrong variable shows.
FILLED_ENV = {name: value or f"test-{name.lower()}" for name, value in ENV_EXAMPLE.items()}
RAW = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
COMPOSE = interpolate(RAW, FILLED_ENV)
SERVICES = COMPOSE["services"]
PORTAL_ENV = environment(SERVICES["portal"])
LAKEKEEPER_ENV = environment(SERVICES["lakekeeper"])


def realm_as_imported() -> dict:
    keycloak_env = environment(SERVICES["keycloak"])

    def fill(match: re.Match) -> str:
        value = keycloak_env.get(match["name"], match["default"])
        # Keycloak leaves a placeholder it cannot resolve in place; keep it, for the test to find.
        return match.group(0) if value is None else value

    return json.loads(KEYCLOAK_PLACEHOLDER.sub(fill, (DEPLOY / "keycloak" / "lakeport-realm.json").read_text()))


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
    required = {"LAKEPORT_SECRET_KEY", "LAKEPORT_OIDC_CLIENT_SECRET", "LAKEPORT_DATABASE_URL",
                "LAKEPORT_LAKEKEEPER_URL"}
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
                assert re.search(r"\$\{\w+:\?[^}]*\}", value), f"{name}: {variable} is not a required ${{VAR:?}}"
    # Every secret the portal cannot start without is set here; optional ones (a Ray token for
    # attached clusters) belong to deployments that use them.
    assert {setting.env for setting in SETTINGS.values() if setting.secret and setting.default is None} <= checked


def test_env_example_lists_exactly_the_variables_compose_reads():
    text = (DEPLOY / "compose.yaml").read_text()
    referenced = {match["name"] for match in COMPOSE_VARIABLE.finditer(text) if match["name"]}
    required = {match["name"] for match in COMPOSE_VARIABLE.finditer(text) if match["op"] in (":?", "?")}
    assert required <= set(ENV_EXAMPLE), f"missing from .env.example: {sorted(required - set(ENV_EXAMPLE))}"
    assert set(ENV_EXAMPLE) <= referenced, f"unused in compose.yaml: {sorted(set(ENV_EXAMPLE) - referenced)}"
    shipped_secrets = {name for name in ENV_EXAMPLE if SECRET_NAME.search(name) and ENV_EXAMPLE[name]}
    assert not shipped_secrets, f"the example must ship no secret: {sorted(shipped_secrets)}"


def test_every_dependency_exists_and_can_be_met():
    for name, service in SERVICES.items():
        for target, condition in depends_on(service).items():
            assert target in SERVICES, f"{name} depends on unknown service {target}"
            assert condition in HEALTH_CONDITIONS, f"{name} -> {target}: unknown condition {condition}"
            if condition == "service_healthy":
                assert "healthcheck" in SERVICES[target], f"{name} waits for {target}, which has no healthcheck"
            if condition == "service_completed_successfully":
                assert SERVICES[target].get("restart", "no") == "no", f"{target} is waited on to finish, but restarts"


def test_services_address_each_other_by_service_name():
    urls = [PORTAL_ENV["LAKEPORT_DATABASE_URL"], PORTAL_ENV["LAKEPORT_OIDC_ISSUER"],
            PORTAL_ENV["LAKEPORT_LAKEKEEPER_URL"], LAKEKEEPER_ENV["LAKEKEEPER__OPENID_PROVIDER_URI"],
            LAKEKEEPER_ENV["LAKEKEEPER__PG_DATABASE_URL_WRITE"], LAKEKEEPER_ENV["LAKEKEEPER__BASE_URI"]]
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
    bootstrap = SERVICES["lakekeeper-bootstrap"]
    assert environment(bootstrap)["SERVICE_CLIENT_SECRET"] == client["secret"]
    assert f"client_id={client['clientId']}" in bootstrap["command"][0]


def test_audience_mapper_gives_lakekeeper_its_audience():
    audience = LAKEKEEPER_ENV["LAKEKEEPER__OPENID_AUDIENCE"]
    assert PORTAL_ENV["LAKEPORT_LAKEKEEPER_AUDIENCE"] == audience
    for client_id in (PORTAL_ENV["LAKEPORT_OIDC_CLIENT_ID"], PORTAL_ENV["LAKEPORT_LAKEKEEPER_CLIENT_ID"]):
        audiences = {
            mapper["config"]["included.custom.audience"]
            for mapper in CLIENTS[client_id].get("protocolMappers", [])
            if mapper["protocolMapper"] == "oidc-audience-mapper" and mapper["config"]["access.token.claim"] == "true"
        }
        assert audiences == {audience}, client_id


def test_test_users_keep_their_subject_across_reimports():
    users = {user["username"]: user for user in REALM["users"]}
    assert {"alice", "bob"} <= set(users)
    # Lakeport keys users by issuer + subject; a fixed id keeps it when Keycloak re-imports the realm.
    assert all(user.get("id") for user in users.values())
