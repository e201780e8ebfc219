"""The deployment's files as tests read them: compose.yaml the way `docker compose` reads it, with
its variables filled in from .env.example (empty secrets get stand-ins), and the pins of the
compute units' image (compute/Dockerfile) and of pyproject.toml."""

from __future__ import annotations

import re
import tomllib

import yaml

from app.config import PROJECT_ROOT

# --------------------------------------------------------------------------- the units' image
DOCKERFILE = (PROJECT_ROOT / "compute" / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
PIN = re.compile(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s;]+)$")


def pins(requirements: list[str]) -> dict[str, str]:
    found = {}
    for requirement in requirements:
        if match := PIN.match(requirement.strip()):
            found[match.group(1).lower()] = match.group(3)
    return found


def image_pins() -> dict[str, str]:
    return pins(re.findall(r'"([^"\s]+==[^"\s]+)"', DOCKERFILE))


# --------------------------------------------------------------------------- compose.yaml
DEPLOY = PROJECT_ROOT / "deploy"
# Compose's forms: $$, ${VAR}, ${VAR:?err}, ${VAR?err}, ${VAR:-default}, ${VAR-default}.
COMPOSE_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?[?-])(?P<arg>[^}]*))?\}")


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
