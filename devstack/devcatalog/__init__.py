"""The Lakekeeper-compatible dev catalog: a development stand-in for Lakekeeper, not Lakekeeper.

Lakekeeper cannot be installed on the machines this project runs on, so the local stack runs
this small service in its place. It serves the parts of Lakekeeper's APIs that the portal and
the Iceberg clients (pyiceberg, Spark) use, following Lakekeeper's OpenAPI documents:

- Management API (`/management/v1`): server info, and warehouses — create (storage validated
  by writing, reading, listing and deleting a probe object, as Lakekeeper does), list, get,
  rename, rotate the storage credential (validated again), deactivate, activate, set the
  delete profile, delete. Storage credentials are kept encrypted (Fernet) in the catalog's
  SQLite store and never returned.
- Iceberg REST catalog (`/catalog/v1`): the config answer (`defaults.prefix` = warehouse id),
  then every namespace and table call is forwarded to SeaweedFS's own Iceberg REST catalog.
- Users (`POST /user` self-provisioning, `GET /whoami`) and warehouse grants
  (`/permissions/warehouse/{id}/assignments`), see `permissions`.
- Bearer JWTs from the OpenID Connect provider, checked against its JWKS and the audience; the
  caller is the user `oidc~<sub>`. Access is decided like Lakekeeper's OpenFGA authorizer does:
  project admins (the portal's service identity) do everything, anyone else reaches only the
  warehouses they hold grants on, others answer 403 `WarehouseActionForbidden`. A token whose
  `scope` names warehouses (`warehouse:<uuid>`, the local provider's narrowing of an
  execution's token) reaches only those, read-only on the Management API (see `auth`).

Where table data lives — a stand-in limitation: SeaweedFS's catalog keeps each warehouse's
tables in an S3 Tables *table bucket* (one per warehouse, created with the warehouse and
removed with it) and refuses table locations outside it. So a table's files are under
`s3://<bucket>-wh-<id>/<namespace>/<table>/`, not under the warehouse's own bucket and key
prefix as with Lakekeeper. The local stack's SeaweedFS lets the keys that own `<bucket>` reach
`<bucket>-wh-*` as well, so engines can use the warehouse's keys. Vended credentials
(SeaweedFS's STS, offered whenever a client asks, `sts-enabled` or not) follow Lakekeeper's
rules: the caller's privilege (read-only with `select` alone), a lifetime (15 minutes unless
the profile's `sts-token-validity-seconds` says otherwise), and the table's location (or, with
`vended_credentials_scope` "warehouse", the warehouse's whole table bucket); each credential names
the table's loadCredentials as its `client.refresh-credentials-endpoint`. README.md here has the
rules and their sources.

Other differences from Lakekeeper: projects are implicit (any UUID); the delete profile is
stored and shown, but tables are always dropped at once (SeaweedFS purges synchronously, so
there are no background tasks and no `WarehouseHasUnfinishedTasks`); remote signing is not
offered (credentials are vended instead); only S3 storage with access-key credentials.

Modules:
- `app.py` — its WSGI app
- `config.py` — its settings
- `auth.py` — bearer JWTs checked as Lakekeeper checks them
- `catalog.py` — the Iceberg REST catalog in front of SeaweedFS's
- `commits.py` — commits hold their tables, so no reader loads half a multi-table commit
- `management.py` — the Management API the portal uses
- `permissions.py` — users and warehouse grants
- `seaweed.py` — table buckets, SeaweedFS's catalog and STS
- `vending.py` — what vended credentials reach and for how long, by Lakekeeper's rules
- `credential_cache.py` — Lakekeeper's cache of short-term storage credentials, modelled
- `store.py` — its SQLite store
- `errors.py` — errors in Lakekeeper's shape
- `paths.py` — paths parsed into segments; dot segments and encoded separators refused
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.config import PROJECT_ROOT
from devstack.devcatalog.app import create_app
from devstack.devcatalog.config import ENVIRONMENT_VARIABLE, DevCatalogConfig
from devstack.process import ManagedProcess, http_ok

__all__ = ["DevCatalogConfig", "create_app", "devcatalog_process"]


def devcatalog_process(config: DevCatalogConfig, log_dir: Path) -> ManagedProcess:
    """The dev catalog (gunicorn on 127.0.0.1:config.port) as a not-yet-started process."""
    return ManagedProcess(
        "devcatalog",
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--bind",
            f"127.0.0.1:{config.port}",
            "--workers",
            "1",
            "--threads",
            "8",
            "--access-logfile",
            "-",
            # Its default socket path is per user, so two stacks side by side would share it.
            "--no-control-socket",
            "devstack.devcatalog.app:create_app()",
        ],
        log_dir=log_dir,
        cwd=PROJECT_ROOT,
        env={ENVIRONMENT_VARIABLE: config.to_json()},
        ready=http_ok(f"{config.url}/health"),
    )
