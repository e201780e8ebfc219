"""Lakeport's configuration: every setting, read from the environment in one place.

`SETTINGS` is the single reference: each entry names the environment variable, its
default and what it does. docs/configuration.md is generated from it
(`python scripts/configuration_doc.py`; tests/test_docs.py fails when the page is out of date).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, make_dataclass
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
        "LAKEPORT_SECRET_KEY",
        None,
        secret=True,
        help="Signs session cookies and CSRF tokens. Required in production; the local stack generates one.",
    ),
    "DATABASE_URL": Setting(
        "LAKEPORT_DATABASE_URL",
        f"sqlite:///{PROJECT_ROOT / 'var' / 'lakeport.db'}",
        help="SQLAlchemy URL of Lakeport's database. PostgreSQL (`postgresql+psycopg://…`) in production; "
        "SQLite is the zero-setup default. On PostgreSQL, the portal's and the worker's own role: it may "
        "read and write rows, only read and append the audit trail, and change no schema (`deploy/README.md`).",
    ),
    "DATABASE_OWNER_URL": Setting(
        "LAKEPORT_DATABASE_OWNER_URL",
        "",
        help="SQLAlchemy URL of the same PostgreSQL database as the role that owns its tables, used only by "
        "`flask --app wsgi db upgrade` (the deploy's migration job): it migrates, and grants the role of "
        "`LAKEPORT_DATABASE_URL` its rights. Give it only to the migration, never to the portal or the "
        "worker. Empty: one role does both (SQLite, which has no roles, or a database left unsplit).",
    ),
    "PUBLIC_URL": Setting(
        "LAKEPORT_PUBLIC_URL",
        "http://127.0.0.1:5000",
        help="The URL users reach the portal at. Decides the OIDC redirect URI and whether cookies are Secure (https).",
    ),
    "OIDC_ISSUER": Setting(
        "LAKEPORT_OIDC_ISSUER",
        "http://127.0.0.1:8180",
        help="OpenID Connect issuer URL; endpoints are discovered from `<issuer>/.well-known/openid-configuration`.",
    ),
    "OIDC_CLIENT_ID": Setting(
        "LAKEPORT_OIDC_CLIENT_ID", "lakeport-portal", help="The portal's OIDC client id."
    ),
    "OIDC_CLIENT_SECRET": Setting(
        "LAKEPORT_OIDC_CLIENT_SECRET", None, secret=True, help="The portal's OIDC client secret."
    ),
    "OIDC_SCOPES": Setting(
        "LAKEPORT_OIDC_SCOPES", "openid profile email", help="Scopes asked for at sign-in."
    ),
    "OPERATORS_GROUP": Setting(
        "LAKEPORT_OPERATORS_GROUP",
        "lakeport-admins",
        help="Members of this group (the identity provider's `groups` claim, read at each sign-in and "
        "confirmed within `LAKEPORT_IDENTITY_BOUND_SECONDS`) are "
        "operators: they see every unit, execution and warehouse (metadata, never table data), stop any "
        "unit or execution, and read the whole audit trail. Empty: nobody is.",
    ),
    "IDENTITY_BOUND_SECONDS": Setting(
        "LAKEPORT_IDENTITY_BOUND_SECONDS",
        900.0,
        cast=float,
        help="The longest a change at the identity provider (groups, operator status, a disabled user, an "
        "ended session) takes to reach Lakeport: pages, API tokens and the catalog's group roles. Groups "
        "the provider has not confirmed for this long count as none (docs/identity.md).",
    ),
    "IDENTITY_CHECK_SECONDS": Setting(
        "LAKEPORT_IDENTITY_CHECK_SECONDS",
        300.0,
        cast=float,
        help="How often the worker asks the identity provider about each active user again (a refresh "
        "grant with the refresh token of their last sign-in). Below the bound above.",
    ),
    "SESSION_MAX_HOURS": Setting(
        "LAKEPORT_SESSION_MAX_HOURS",
        12.0,
        cast=float,
        help="A browser session ends this long after its sign-in, however active; then the user signs in "
        "again.",
    ),
    "OIDC_TIMEOUT_SECONDS": Setting(
        "LAKEPORT_OIDC_TIMEOUT_SECONDS",
        5.0,
        cast=float,
        help="Timeout for calls from the portal to the identity provider.",
    ),
    "LAKEKEEPER_URL": Setting(
        "LAKEPORT_LAKEKEEPER_URL",
        "http://127.0.0.1:8181",
        help="Base URL of Lakekeeper (without `/management` or `/catalog`). The local stack points it at the "
        "Lakekeeper-compatible dev catalog.",
    ),
    "LAKEKEEPER_PROJECT_ID": Setting(
        "LAKEPORT_LAKEKEEPER_PROJECT_ID",
        "",
        help="Lakekeeper project to use (sent as `x-project-id`); empty means Lakekeeper's default project.",
    ),
    "LAKEKEEPER_AUDIENCE": Setting(
        "LAKEPORT_LAKEKEEPER_AUDIENCE",
        "lakekeeper",
        help="Audience Lakekeeper expects in bearer tokens.",
    ),
    "LAKEKEEPER_CLIENT_ID": Setting(
        "LAKEPORT_LAKEKEEPER_CLIENT_ID",
        "lakeport-service",
        help="Service client (client-credentials grant) the portal uses for Lakekeeper management calls.",
    ),
    "LAKEKEEPER_CLIENT_SECRET": Setting(
        "LAKEPORT_LAKEKEEPER_CLIENT_SECRET", None, secret=True, help="Secret of the service client."
    ),
    "LAKEKEEPER_TIMEOUT_SECONDS": Setting(
        "LAKEPORT_LAKEKEEPER_TIMEOUT_SECONDS",
        10.0,
        cast=float,
        help="Timeout for each call to Lakekeeper.",
    ),
    "VENDED_CREDENTIALS_SECONDS": Setting(
        "LAKEPORT_VENDED_CREDENTIALS_SECONDS",
        900,
        cast=int,
        help="How long the storage credentials Lakekeeper vends for a table last (the warehouse profile's "
        "`sts-token-validity-seconds`, sent when a warehouse is registered with STS on). Compute units "
        "renew them before they expire; a revoked sharee keeps what was vended before for at most this "
        "long. Within STS's 900..43200.",
    ),
    "UPLOAD_MAX_MB": Setting(
        "LAKEPORT_UPLOAD_MAX_MB",
        100,
        cast=int,
        help="Largest CSV or Parquet upload accepted, in MiB.",
    ),
    "CU_MAX_RUNNING_PER_USER": Setting(
        "LAKEPORT_CU_MAX_RUNNING_PER_USER",
        2,
        cast=int,
        help="How many compute units one user may have starting or running at once.",
    ),
    "CU_MAX_CPUS": Setting(
        "LAKEPORT_CU_MAX_CPUS", 2, cast=int, help="Most CPUs a compute unit may ask for per node."
    ),
    "CU_MAX_MEMORY_GB": Setting(
        "LAKEPORT_CU_MAX_MEMORY_GB",
        8.0,
        cast=float,
        help="Most memory (GiB) a compute unit may ask for per node.",
    ),
    "CU_MAX_WORKERS": Setting(
        "LAKEPORT_CU_MAX_WORKERS",
        2,
        cast=int,
        help="Most worker nodes a compute unit may have beside its head.",
    ),
    "CU_IDLE_MINUTES": Setting(
        "LAKEPORT_CU_IDLE_MINUTES",
        60.0,
        cast=float,
        help="A running compute unit with no execution for this long is terminated (0 turns this off).",
    ),
    "CU_START_TIMEOUT_SECONDS": Setting(
        "LAKEPORT_CU_START_TIMEOUT_SECONDS",
        60.0,
        cast=float,
        help="A compute unit that is not healthy this long after its start is marked FAILED.",
    ),
    "CU_WARM_SPARK_ON_START": Setting(
        "LAKEPORT_CU_WARM_SPARK_ON_START",
        True,
        cast=bool,
        help="Start a compute unit's Spark session as soon as the unit is running, so the first execution "
        "does not wait for it (it holds the unit's Spark memory from then on).",
    ),
    "CU_POOL_SIZE": Setting(
        "LAKEPORT_CU_POOL_SIZE",
        0,
        cast=int,
        help="How many local compute units of the pool's size the worker keeps started and warm, with no "
        "owner: a user's new unit of that size is one of them, ready in seconds, and the worker starts "
        "another in its place. A pooled unit counts against no user's limit. 0: no pool.",
    ),
    "CU_POOL_CPUS": Setting(
        "LAKEPORT_CU_POOL_CPUS",
        2,
        cast=int,
        help="CPUs of a pooled unit (its head node; pooled units have no "
        "worker nodes). A new unit asking exactly this size is claimed from the pool.",
    ),
    "CU_POOL_MEMORY_GB": Setting(
        "LAKEPORT_CU_POOL_MEMORY_GB", 4.0, cast=float, help="Memory (GiB) of a pooled unit."
    ),
    "CU_KINDS": Setting(
        "LAKEPORT_CU_KINDS",
        "local,existing",
        help="Kinds of compute unit users may create: `local` (Ray on this machine), `existing` (attach to a "
        "Ray cluster listed in `LAKEPORT_RAY_CLUSTERS`), `kuberay` (a RayCluster on Kubernetes).",
    ),
    "CU_WORK_DIR": Setting(
        "LAKEPORT_CU_WORK_DIR",
        "",
        help="Where local compute units keep their temp dirs and logs; empty means `<system temp>/lakeport-cu` "
        "(Ray's socket paths must stay short).",
    ),
    "CU_TASKS_PER_NODE": Setting(
        "LAKEPORT_CU_TASKS_PER_NODE",
        4096,
        cast=int,
        help="Most processes and threads a local compute unit may have per node (a kernel limit, with its "
        "memory and CPUs; a node running an execution has about 800).",
    ),
    "CU_DISK_GB": Setting(
        "LAKEPORT_CU_DISK_GB",
        10.0,
        cast=float,
        help="Disk (GiB) of a local compute unit's directory, a filesystem of its own: logs, Spark's scratch "
        "space and whatever its users' code writes there.",
    ),
    "CU_CGROUP_PARENT": Setting(
        "LAKEPORT_CU_CGROUP_PARENT",
        "lakeport",
        help="The control group (relative to the cgroup mount) under which local compute units get theirs. "
        "On cgroup v2 it must be one the portal may manage (delegated to it).",
    ),
    "CU_ALLOW_UNLIMITED_UNITS": Setting(
        "LAKEPORT_CU_ALLOW_UNLIMITED_UNITS",
        False,
        cast=bool,
        help="Start local compute units WITHOUT kernel limits when this machine cannot give them (no root, no "
        "cgroups, no loop mounts). Off: such units refuse to start. On, one user's step can take the "
        "machine's memory, CPU, processes and disk.",
    ),
    "RAY_DASHBOARD": Setting(
        "LAKEPORT_RAY_DASHBOARD",
        False,
        cast=bool,
        help="Run the Ray dashboard on local compute units and link to it. Off, a warm unit holds about "
        "0.6 GiB less; the unit's page shows its resources either way.",
    ),
    "RAY_CLUSTERS": Setting(
        "LAKEPORT_RAY_CLUSTERS",
        "",
        secret=True,
        help="Ray clusters `existing` compute units may attach to, as a JSON list: "
        '`[{"name": "shared", "address": "http://ray-head:8265", "token_file": "/run/secrets/ray", '
        '"spark_host_ports": "8290-8299", "users": ["alice@example.org"]}]` '
        "(`token` instead of `token_file`, or neither without Ray token auth; `users` optional, default "
        "everyone). Each unit's Spark host takes one port of the range, opened on the head for the portal.",
    ),
    "KUBERAY_API_URL": Setting(
        "LAKEPORT_KUBERAY_API_URL",
        "https://kubernetes.default.svc",
        help="Kubernetes API server for `kuberay` compute units.",
    ),
    "KUBERAY_NAMESPACE": Setting(
        "LAKEPORT_KUBERAY_NAMESPACE",
        "lakeport",
        help="Namespace the RayCluster resources are created in.",
    ),
    "KUBERAY_IMAGE": Setting(
        "LAKEPORT_KUBERAY_IMAGE",
        "lakeport/compute:0.1.0",
        help="Container image of `kuberay` compute units: `compute/Dockerfile` built and pushed to a registry "
        "the cluster pulls from.",
    ),
    "KUBERAY_TOKEN_FILE": Setting(
        "LAKEPORT_KUBERAY_TOKEN_FILE",
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
        help="Service-account token the portal uses for the Kubernetes API.",
    ),
    "KUBERAY_CA_FILE": Setting(
        "LAKEPORT_KUBERAY_CA_FILE",
        "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        help="CA bundle that signs the Kubernetes API's certificate.",
    ),
    "LOG_LEVEL": Setting("LAKEPORT_LOG_LEVEL", "INFO", help="Python log level of the portal."),
    "OUTBOUND_ALLOW_LOOPBACK": Setting(
        "LAKEPORT_OUTBOUND_ALLOW_LOOPBACK",
        False,
        cast=bool,
        help="Let hosts users name (storage endpoints; not webhooks) be loopback addresses (127.0.0.0/8, ::1). "
        "Off in production; the local stack turns it on for its loopback SeaweedFS.",
    ),
    "OUTBOUND_ALLOW_PRIVATE": Setting(
        "LAKEPORT_OUTBOUND_ALLOW_PRIVATE",
        False,
        cast=bool,
        help="Let hosts users name be private or other non-public addresses (10/8, 172.16/12, 192.168/16, "
        "fc00::/7, 100.64/10). Link-local and cloud metadata addresses are refused regardless.",
    ),
    "WEBHOOK_ALLOWED_HOSTS": Setting(
        "LAKEPORT_WEBHOOK_ALLOWED_HOSTS",
        "",
        help="Comma-separated host names or IP addresses, as webhook URLs write them, that webhooks may reach "
        "although they are loopback, private or one of the portal's own services. Webhooks ignore the "
        "`LAKEPORT_OUTBOUND_ALLOW_*` switches: without this list they reach public addresses only.",
    ),
    "EXECUTION_TOKEN_WAREHOUSE_SCOPE": Setting(
        "LAKEPORT_EXECUTION_TOKEN_WAREHOUSE_SCOPE",
        True,
        cast=bool,
        help="Ask the identity provider to narrow an execution's token (exchanged for its user) to the "
        "warehouse with a `warehouse:<id>` scope, which the dev catalog enforces on top of grants. "
        "Turn off for providers without such dynamic scopes (Keycloak); Lakekeeper ignores the scope.",
    ),
    "WORKER_POLL_SECONDS": Setting(
        "LAKEPORT_WORKER_POLL_SECONDS",
        0.25,
        cast=float,
        help="How often the worker (`flask --app wsgi lakeport worker`) looks in the database for new work; "
        "on PostgreSQL it also starts at once when new work is announced.",
    ),
    "WORKER_LEASE_SECONDS": Setting(
        "LAKEPORT_WORKER_LEASE_SECONDS",
        30.0,
        cast=float,
        help="How long a worker's claim on a piece of work lasts without renewal; after that another worker "
        "takes the work over (a worker that died).",
    ),
    "WORKER_SUPERVISOR_SECONDS": Setting(
        "LAKEPORT_WORKER_SUPERVISOR_SECONDS",
        15.0,
        cast=float,
        help="How often the worker checks running compute units for death and idleness.",
    ),
    "SCHEDULER_SECONDS": Setting(
        "LAKEPORT_SCHEDULER_SECONDS",
        10.0,
        cast=float,
        help="How often the worker looks for schedules' due times (each fires once, whatever the number of "
        "workers).",
    ),
    "GRANTS_RECONCILE_SECONDS": Setting(
        "LAKEPORT_GRANTS_RECONCILE_SECONDS",
        300.0,
        cast=float,
        help="How often the worker compares every warehouse's grants in Lakekeeper with its shares, repairs "
        "what differs and deletes the roles of groups nothing is shared with any more.",
    ),
    "SMTP_HOST": Setting(
        "LAKEPORT_SMTP_HOST",
        "",
        help="The SMTP server that sends schedules' notification emails (empty: no email; webhooks still work).",
    ),
    "SMTP_PORT": Setting("LAKEPORT_SMTP_PORT", 25, cast=int, help="The SMTP server's port."),
    "SMTP_FROM": Setting(
        "LAKEPORT_SMTP_FROM", "lakeport@localhost", help="The sender of notification emails."
    ),
    "USAGE_SAMPLE_SECONDS": Setting(
        "LAKEPORT_USAGE_SAMPLE_SECONDS",
        900.0,
        cast=float,
        help="How often the worker measures each warehouse's live storage (from table metadata) and what "
        "finished executions wrote; pages show these stored samples.",
    ),
    "API_CALLS_PER_MINUTE": Setting(
        "LAKEPORT_API_CALLS_PER_MINUTE",
        120,
        cast=int,
        help="How many API calls (`/api/v1`) one personal access token, and one user with all their tokens, "
        "may make a minute; over it a call answers 429 with `Retry-After`.",
    ),
    "STORAGE_PROBES_PER_MINUTE": Setting(
        "LAKEPORT_STORAGE_PROBES_PER_MINUTE",
        10,
        cast=int,
        help='How many storage connection tests ("Test connection", page or API) one user may start a minute; '
        "at most two run at once per user. Over either, the test is refused (429 in the API).",
    ),
    "CU_ALLOWED_ENDPOINTS": Setting(
        "LAKEPORT_CU_ALLOWED_ENDPOINTS",
        "",
        help="Comma-separated `host:port` endpoints that code on local compute units may connect to besides "
        "the catalog (`LAKEPORT_LAKEKEEPER_URL`), e.g. the S3 endpoint of users' buckets. Nothing else is "
        "reachable from a local unit's sandbox.",
    ),
    "CONSOLE_MAX_ROWS": Setting(
        "LAKEPORT_CONSOLE_MAX_ROWS",
        10_000,
        cast=int,
        help="The most rows of a SQL console query that come back from the unit; past it the query says "
        "how many rows there were. 1 to 100000: the portal refuses to start with more.",
    ),
    "CONSOLE_MAX_BYTES": Setting(
        "LAKEPORT_CONSOLE_MAX_BYTES",
        12 * 2**20,
        cast=int,
        help="The most bytes (as JSON) of a SQL console query's rows that come back from the unit; past "
        "it the query says how many rows there were. 1024 to 12582912 (12 MiB): a unit's answer is "
        "read to 16 MiB at most, rows and the rest of the answer together, so the portal refuses "
        "to start with more.",
    ),
    "DEV_STORAGE_HINT": Setting(
        "LAKEPORT_DEV_STORAGE_HINT",
        "",
        help="Development only, set by the local stack: JSON naming its S3 endpoint, region, each test user's "
        "bucket and that bucket's fixed development keys (which open only the stack's own SeaweedFS), so "
        "the register page can offer them. Empty in production.",
    ),
}


def _setting_field(name: str, setting: Setting) -> tuple[str, Any, Any]:
    kind = setting.cast if setting.default is not None else setting.cast | None
    return name, kind, field(default=setting.default)


# One field per entry of SETTINGS, with its default, so the list of settings is written once.
_SettingFields = make_dataclass(
    "_SettingFields",
    [
        *(_setting_field(name, setting) for name, setting in SETTINGS.items()),
        ("TESTING", bool, field(default=False)),
        # Anything else a test or deployment wants to hand to Flask as-is.
        ("extra", dict[str, Any], field(default_factory=dict)),
    ],
)


class Config(_SettingFields):
    """The portal's settings. `Config.from_env()` is the only place that reads the environment."""

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
        missing = [
            SETTINGS[n].env for n in ("SECRET_KEY", "OIDC_CLIENT_SECRET") if not getattr(self, n)
        ]
        if missing:
            raise ValueError("Lakeport needs these settings: " + ", ".join(missing))
        from app.ray_clusters.listed import parse_listed_clusters

        try:
            parse_listed_clusters(self.RAY_CLUSTERS)
        except ValueError as error:
            raise ValueError(f"{SETTINGS['RAY_CLUSTERS'].env}: {error}") from None
        from app.ray_clusters.local_limits import LocalLimits

        try:
            LocalLimits(
                tasks_per_node=self.CU_TASKS_PER_NODE, disk_bytes=int(self.CU_DISK_GB * 2**30)
            )
        except ValueError as error:
            names = f"{SETTINGS['CU_TASKS_PER_NODE'].env} or {SETTINGS['CU_DISK_GB'].env}"
            raise ValueError(f"{names}: {error}") from None
        if self.CU_POOL_SIZE < 0 or (
            self.CU_POOL_SIZE
            and not (
                1 <= self.CU_POOL_CPUS <= self.CU_MAX_CPUS
                and 0.5 <= self.CU_POOL_MEMORY_GB <= self.CU_MAX_MEMORY_GB
            )
        ):
            raise ValueError(
                f"{SETTINGS['CU_POOL_SIZE'].env}: at least 0, and a pooled unit's size "
                f"({SETTINGS['CU_POOL_CPUS'].env}, {SETTINGS['CU_POOL_MEMORY_GB'].env}) within "
                "the largest a user may ask for"
            )
        if not 0 < self.IDENTITY_CHECK_SECONDS < self.IDENTITY_BOUND_SECONDS:
            raise ValueError(
                f"{SETTINGS['IDENTITY_CHECK_SECONDS'].env}: above 0 and below "
                f"{SETTINGS['IDENTITY_BOUND_SECONDS'].env}"
            )
        from compute.run.query import MAX_BYTES_CARRIED, MAX_ROWS_CARRIED

        if not 1 <= self.CONSOLE_MAX_ROWS <= MAX_ROWS_CARRIED:
            raise ValueError(
                f"{SETTINGS['CONSOLE_MAX_ROWS'].env}: within 1..{MAX_ROWS_CARRIED} (the most "
                "rows a unit's answer carries)"
            )
        if not 1024 <= self.CONSOLE_MAX_BYTES <= MAX_BYTES_CARRIED:
            raise ValueError(
                f"{SETTINGS['CONSOLE_MAX_BYTES'].env}: within 1024..{MAX_BYTES_CARRIED} "
                f"({MAX_BYTES_CARRIED // 2**20} MiB): a unit's answer is read to 16 MiB at most, "
                "the rows and the rest of the answer together"
            )
        if self.SESSION_MAX_HOURS <= 0:
            raise ValueError(f"{SETTINGS['SESSION_MAX_HOURS'].env}: must be above 0")
        if not 900 <= self.VENDED_CREDENTIALS_SECONDS <= 43200:  # STS's DurationSeconds range
            raise ValueError(
                f"{SETTINGS['VENDED_CREDENTIALS_SECONDS'].env}: within 900..43200 (STS's range)"
            )
        from app.database_roles import portal_role

        try:
            portal_role(self.DATABASE_URL, self.DATABASE_OWNER_URL)
        except ValueError as error:
            raise ValueError(f"{SETTINGS['DATABASE_OWNER_URL'].env}: {error}") from None
        if self.API_CALLS_PER_MINUTE < 1:
            raise ValueError(f"{SETTINGS['API_CALLS_PER_MINUTE'].env}: must be at least 1")
        if self.STORAGE_PROBES_PER_MINUTE < 1:
            raise ValueError(f"{SETTINGS['STORAGE_PROBES_PER_MINUTE'].env}: must be at least 1")

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
