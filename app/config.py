"""Lakeport's configuration: every setting, read from the environment in one place.

`SETTINGS` is the single reference: each entry names the environment variable, its
default and what it does. The README's configuration table is generated from it
(`python -m app.config`), so the two cannot drift apart.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Setting:
    env: str
    default: Any
    help: str
    cast: type = str
    secret: bool = False


def _bool(value: str) -> bool:
    if value.strip().lower() in {"1", "true", "yes", "on"}:
        return True
    if value.strip().lower() in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"not a boolean: {value!r}")


SETTINGS: dict[str, Setting] = {
    "SECRET_KEY": Setting(
        "LAKEPORT_SECRET_KEY", None, secret=True,
        help="Signs session cookies and CSRF tokens. Required in production; the local stack generates one."),
    "DATABASE_URL": Setting(
        "LAKEPORT_DATABASE_URL", f"sqlite:///{PROJECT_ROOT / 'var' / 'lakeport.db'}",
        help="SQLAlchemy URL of Lakeport's database. PostgreSQL (`postgresql+psycopg://…`) in production; "
             "SQLite is the zero-setup default."),
    "PUBLIC_URL": Setting(
        "LAKEPORT_PUBLIC_URL", "http://127.0.0.1:5000",
        help="The URL users reach the portal at. Decides the OIDC redirect URI and whether cookies are Secure (https)."),
    "OIDC_ISSUER": Setting(
        "LAKEPORT_OIDC_ISSUER", "http://127.0.0.1:8180",
        help="OpenID Connect issuer URL; endpoints are discovered from `<issuer>/.well-known/openid-configuration`."),
    "OIDC_CLIENT_ID": Setting("LAKEPORT_OIDC_CLIENT_ID", "lakeport-portal", help="The portal's OIDC client id."),
    "OIDC_CLIENT_SECRET": Setting(
        "LAKEPORT_OIDC_CLIENT_SECRET", None, secret=True, help="The portal's OIDC client secret."),
    "OIDC_SCOPES": Setting("LAKEPORT_OIDC_SCOPES", "openid profile email", help="Scopes asked for at sign-in."),
    "OIDC_TIMEOUT_SECONDS": Setting(
        "LAKEPORT_OIDC_TIMEOUT_SECONDS", 5.0, cast=float,
        help="Timeout for calls from the portal to the identity provider."),
    "LAKEKEEPER_URL": Setting(
        "LAKEPORT_LAKEKEEPER_URL", "http://127.0.0.1:8181",
        help="Base URL of Lakekeeper (without `/management` or `/catalog`). The local stack points it at the "
             "Lakekeeper-compatible dev catalog."),
    "LAKEKEEPER_PROJECT_ID": Setting(
        "LAKEPORT_LAKEKEEPER_PROJECT_ID", "",
        help="Lakekeeper project to use (sent as `x-project-id`); empty means Lakekeeper's default project."),
    "LAKEKEEPER_AUDIENCE": Setting(
        "LAKEPORT_LAKEKEEPER_AUDIENCE", "lakekeeper", help="Audience Lakekeeper expects in bearer tokens."),
    "LAKEKEEPER_CLIENT_ID": Setting(
        "LAKEPORT_LAKEKEEPER_CLIENT_ID", "lakeport-service",
        help="Service client (client-credentials grant) the portal uses for Lakekeeper management calls."),
    "LAKEKEEPER_CLIENT_SECRET": Setting(
        "LAKEPORT_LAKEKEEPER_CLIENT_SECRET", None, secret=True, help="Secret of the service client."),
    "LAKEKEEPER_TIMEOUT_SECONDS": Setting(
        "LAKEPORT_LAKEKEEPER_TIMEOUT_SECONDS", 10.0, cast=float, help="Timeout for each call to Lakekeeper."),
    "LOG_LEVEL": Setting("LAKEPORT_LOG_LEVEL", "INFO", help="Python log level of the portal."),
}


@dataclass
class Config:
    """The portal's settings. `Config.from_env()` is the only place that reads the environment."""

    SECRET_KEY: str | None = None
    DATABASE_URL: str = SETTINGS["DATABASE_URL"].default
    PUBLIC_URL: str = SETTINGS["PUBLIC_URL"].default
    OIDC_ISSUER: str = SETTINGS["OIDC_ISSUER"].default
    OIDC_CLIENT_ID: str = SETTINGS["OIDC_CLIENT_ID"].default
    OIDC_CLIENT_SECRET: str | None = None
    OIDC_SCOPES: str = SETTINGS["OIDC_SCOPES"].default
    OIDC_TIMEOUT_SECONDS: float = SETTINGS["OIDC_TIMEOUT_SECONDS"].default
    LAKEKEEPER_URL: str = SETTINGS["LAKEKEEPER_URL"].default
    LAKEKEEPER_PROJECT_ID: str = SETTINGS["LAKEKEEPER_PROJECT_ID"].default
    LAKEKEEPER_AUDIENCE: str = SETTINGS["LAKEKEEPER_AUDIENCE"].default
    LAKEKEEPER_CLIENT_ID: str = SETTINGS["LAKEKEEPER_CLIENT_ID"].default
    LAKEKEEPER_CLIENT_SECRET: str | None = None
    LAKEKEEPER_TIMEOUT_SECONDS: float = SETTINGS["LAKEKEEPER_TIMEOUT_SECONDS"].default
    LOG_LEVEL: str = SETTINGS["LOG_LEVEL"].default
    TESTING: bool = False
    # Anything else a test or deployment wants to hand to Flask as-is.
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> "Config":
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, setting in SETTINGS.items():
            raw = environ.get(setting.env)
            if raw is None:
                continue
            cast = _bool if setting.cast is bool else setting.cast
            try:
                values[name] = cast(raw)
            except ValueError as exc:
                raise ValueError(f"{setting.env}: {exc}") from None
        values.update(overrides)
        return cls(**values)

    @property
    def uses_https(self) -> bool:
        return self.PUBLIC_URL.startswith("https://")

    def validate(self) -> None:
        """Refuse to start with settings that cannot work, naming the variable to fix."""
        missing = [SETTINGS[n].env for n in ("SECRET_KEY", "OIDC_CLIENT_SECRET") if not getattr(self, n)]
        if missing:
            raise ValueError("Lakeport needs these settings: " + ", ".join(missing))

    def flask_mapping(self) -> dict[str, Any]:
        """The settings as Flask config keys, plus the cookie and CSRF policy derived from them."""
        mapping = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        mapping.update(
            SESSION_COOKIE_HTTPONLY=True,
            SESSION_COOKIE_SAMESITE="Lax",
            SESSION_COOKIE_SECURE=self.uses_https,
            REMEMBER_COOKIE_HTTPONLY=True,
            REMEMBER_COOKIE_SAMESITE="Lax",
            REMEMBER_COOKIE_SECURE=self.uses_https,
            PREFERRED_URL_SCHEME="https" if self.uses_https else "http",
            WTF_CSRF_HEADERS=["X-CSRFToken"],
            WTF_CSRF_SSL_STRICT=self.uses_https,
        )
        mapping.update(self.extra)
        return mapping


def settings_reference_markdown() -> str:
    """The configuration reference table for the README."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for setting in SETTINGS.values():
        default = "(required)" if setting.default is None else f"`{setting.default}`"
        if setting.env == "LAKEPORT_DATABASE_URL":
            default = "`sqlite:///<checkout>/var/lakeport.db`"
        rows.append(f"| `{setting.env}` | {default} | {setting.help} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_reference_markdown())
