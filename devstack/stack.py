"""The local stack: every service a developer or an evaluator needs, on loopback ports.

    SeaweedFS (S3 + its Iceberg REST catalog)
    the OpenID Connect provider (npm oidc-provider) with test users alice, bob (group analytics),
    carol (no group) and olive (group lakeport-admins: an operator)
    the Lakekeeper-compatible dev catalog (a development stand-in for Lakekeeper)
    PostgreSQL when reachable (a database of this stack's own), else SQLite
    the portal (gunicorn serving wsgi:app, several web workers as shipped)
    the worker (`flask --app wsgi lakeport worker`: every piece of background work)

`LocalStack` is used by `python -m devstack` and by the browser tests, which run a
second stack on free ports beside a developer's.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.fernet import Fernet

from app.config import PROJECT_ROOT
from app.db import upgrade_database
from devstack.database import local_database_urls
from devstack.devcatalog import DevCatalogConfig, devcatalog_process
from devstack.oidc_provider import TEST_USERS, OidcProviderConfig, oidc_provider_process
from devstack.process import ManagedProcess, free_port, http_ok, port_is_open
from devstack.seaweedfs import GRPC_PORT_OFFSET, TEST_USER_KEYS, SeaweedConfig, seaweedfs_process


@dataclass
class StackPorts:
    """Loopback ports of one stack. SeaweedFS also opens each of its ports + 10000 for gRPC."""

    portal: int
    oidc: int
    catalog: int
    s3: int
    iceberg: int
    seaweed_master: int
    seaweed_volume: int
    seaweed_filer: int
    seaweed_admin: int

    @classmethod
    def from_base(cls, base: int) -> "StackPorts":
        names = [f.name for f in cls.__dataclass_fields__.values()]
        return cls(**{name: base + offset for offset, name in enumerate(names)})

    @classmethod
    def free(cls) -> "StackPorts":
        names = [f.name for f in cls.__dataclass_fields__.values()]
        ports = {}
        for name in names:
            port = free_port()
            # SeaweedFS's ports need their gRPC companions (+10000) free as well.
            while name.startswith(("seaweed", "s3", "iceberg")) and (
                port + GRPC_PORT_OFFSET > 65535 or port_is_open(port + GRPC_PORT_OFFSET)
            ):
                port = free_port()
            ports[name] = port
        return cls(**ports)


@dataclass
class StackSecrets:
    """Generated per stack: nothing here is a real credential, and nothing is written to disk."""

    portal_secret_key: str = field(default_factory=lambda: secrets.token_hex(32))
    portal_client_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    service_client_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))


class LocalStack:
    def __init__(
        self,
        var_dir: Path,
        ports: StackPorts,
        database_url: str | None = None,
        portal_settings: dict[str, str] | None = None,
        database_owner_url: str | None = None,
    ) -> None:
        self.var_dir = Path(var_dir)
        self.ports = ports
        # More LAKEPORT_* settings for the portal and the worker (e.g. the browser tests' timings).
        self.portal_settings = portal_settings or {}
        self.secrets = StackSecrets()
        self.database_url = database_url
        # The role that migrates, where the portal's own role may not (given with the database,
        # or start() decides it with the database).
        self.database_owner_url = database_owner_url
        self.log_dir = self.var_dir / "logs"
        self.processes: list[ManagedProcess] = []
        self.oidc = OidcProviderConfig(
            port=ports.oidc,
            portal_base_urls=[self.portal_url],
            portal_client_secret=self.secrets.portal_client_secret,
            service_client_secret=self.secrets.service_client_secret,
        )
        self.seaweed = SeaweedConfig(
            self.var_dir / "seaweedfs",
            s3_port=ports.s3,
            iceberg_port=ports.iceberg,
            master_port=ports.seaweed_master,
            volume_port=ports.seaweed_volume,
            filer_port=ports.seaweed_filer,
            admin_port=ports.seaweed_admin,
        )
        self.catalog = DevCatalogConfig.for_seaweedfs(
            self.seaweed,
            port=ports.catalog,
            oidc_issuer=self.oidc.issuer,
            data_dir=self.var_dir / "devcatalog",
            encryption_key=Fernet.generate_key().decode(),
        )

    @property
    def portal_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.portal}"

    @property
    def catalog_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.catalog}"

    def portal_environment(self) -> dict[str, str]:
        """The portal's configuration for this stack, as environment variables (see app/config.py)."""
        assert self.database_url, "start() decides the database"
        return {
            "LAKEPORT_SECRET_KEY": self.secrets.portal_secret_key,
            "LAKEPORT_DATABASE_URL": self.database_url,
            "LAKEPORT_PUBLIC_URL": self.portal_url,
            "LAKEPORT_OIDC_ISSUER": self.oidc.issuer,
            "LAKEPORT_OIDC_CLIENT_SECRET": self.secrets.portal_client_secret,
            "LAKEPORT_LAKEKEEPER_URL": self.catalog_url,
            "LAKEPORT_LAKEKEEPER_CLIENT_SECRET": self.secrets.service_client_secret,
            # The stack's SeaweedFS is on loopback.
            "LAKEPORT_OUTBOUND_ALLOW_LOOPBACK": "true",
            # Local compute units reach the catalog and, through this, SeaweedFS's S3; nothing else.
            "LAKEPORT_CU_ALLOWED_ENDPOINTS": urlsplit(self.seaweed.s3_endpoint).netloc,
            "LAKEPORT_DEV_STORAGE_HINT": json.dumps(self.storage_hint()),
            **self.portal_settings,
        }

    def storage_hint(self) -> dict:
        """Where the register page points new users: this stack's S3, each test user's bucket and
        its fixed, documented development keys (they open only this stack's SeaweedFS)."""
        return {
            "endpoint": self.seaweed.s3_endpoint,
            "region": self.seaweed.region,
            "path_style": True,
            "buckets": {
                TEST_USERS[keys.user].email: keys.bucket for keys in TEST_USER_KEYS.values()
            },
            "development_keys": {
                keys.bucket: {
                    "access_key_id": keys.access_key_id,
                    "secret_access_key": keys.secret_access_key,
                }
                for keys in TEST_USER_KEYS.values()
            },
        }

    def _run(self, process: ManagedProcess, timeout: float = 30.0) -> None:
        self.processes.append(process)
        process.start(timeout)

    def start(self, *, with_portal: bool = True, say=print) -> "LocalStack":
        self.var_dir.mkdir(parents=True, exist_ok=True)
        try:
            say(
                f"starting SeaweedFS (S3 {self.seaweed.s3_endpoint}, Iceberg REST {self.seaweed.iceberg_url})"
            )
            self._run(seaweedfs_process(self.seaweed, self.log_dir), timeout=60)
            say(f"starting the OpenID Connect provider on {self.oidc.issuer}")
            self._run(oidc_provider_process(self.oidc, self.log_dir))
            say(f"starting the Lakekeeper-compatible dev catalog on {self.catalog_url}")
            self._run(devcatalog_process(self.catalog, self.log_dir), timeout=60)
            if self.database_url is None:
                self.database_url, self.database_owner_url = local_database_urls(self.var_dir)
            say(f"migrating the database ({self.database_url.split('://')[0]})")
            upgrade_database(
                self.database_owner_url or self.database_url,
                portal_url=self.database_url if self.database_owner_url else None,
            )
            if with_portal:
                say(f"starting the portal on {self.portal_url} and its worker")
                self.start_worker()
                self.start_web_portal()
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self) -> None:
        """The worker process alone (e.g. beside a portal in another process)."""
        self._run(self.worker_process())

    def restart_worker(self, **settings: str) -> None:
        """The worker process again, with `settings` (LAKEPORT_* names) added to the portal's;
        what the old one was doing is taken over by the new one."""
        if (worker := self.process("worker")) is not None:
            worker.stop()
            self.processes.remove(worker)
        self.portal_settings = {**self.portal_settings, **settings}
        self.start_worker()

    def start_web_portal(self) -> None:
        """The portal's web workers under gunicorn, without a worker process (e.g. beside an
        in-process one)."""
        self._run(self.portal_process())

    def portal_process(self) -> ManagedProcess:
        return ManagedProcess(
            "portal",
            # As shipped (gunicorn.conf.py: web workers, threads), on this stack's loopback port.
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--config",
                str(PROJECT_ROOT / "gunicorn.conf.py"),
                "--bind",
                f"127.0.0.1:{self.ports.portal}",
                # The access log names the web worker (pid) that answered each request.
                "--access-logformat",
                '%(h)s pid=%(p)s "%(r)s" %(s)s %(b)s %(M)sms',
                # gunicorn's control socket is one path per user: two stacks side by side would share it.
                "--no-control-socket",
                "wsgi:app",
            ],
            log_dir=self.log_dir,
            cwd=PROJECT_ROOT,
            env=self.portal_environment(),
            ready=http_ok(f"{self.portal_url}/auth/login"),
        )

    def worker_process(self) -> ManagedProcess:
        """The process that does the background work; local compute units are its children."""
        return ManagedProcess(
            "worker",
            [sys.executable, "-m", "flask", "--app", "wsgi", "lakeport", "worker"],
            log_dir=self.log_dir,
            cwd=PROJECT_ROOT,
            env=self.portal_environment(),
            # Time to finish a step of a unit's start before it is killed; what it leaves is taken over.
            stop_timeout=20.0,
        )

    def process(self, name: str) -> ManagedProcess | None:
        return next((process for process in self.processes if process.name == name), None)

    def stop(self) -> None:
        worker = self.process("worker")
        if worker is not None:
            # The worker first, so that it starts nothing more; then this stack's own units
            # (its own database holds only those), then the rest.
            worker.stop()
            self.stop_compute_units()
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def stop_compute_units(self) -> None:
        """Local compute units are Ray clusters this stack's worker started; they go down with the stack
        (only this stack's: its database holds no other), through the portal's own command."""
        stopped = subprocess.run(
            [
                sys.executable,
                "-m",
                "flask",
                "--app",
                "wsgi",
                "lakeport",
                "stop-local-units",
                "--reason",
                "the local stack stopped",
            ],
            cwd=PROJECT_ROOT,
            env={**os.environ, **self.portal_environment()},
            capture_output=True,
            text=True,
            timeout=120,
        )
        if stopped.returncode != 0:
            print(
                f"stopping the local compute units failed: {stopped.stderr.strip()[-500:]}",
                flush=True,
            )
        elif not stopped.stdout.startswith("stopped 0 "):
            print(stopped.stdout.strip(), flush=True)

    def banner(self) -> str:
        logins = "\n".join(
            f"    {u.username} / {u.password}   ({u.name}{', groups: ' if u.groups else ''}"
            f"{', '.join(u.groups)})"
            for u in TEST_USERS.values()
        )
        s3_keys = "\n".join(
            f"    {k.user}: bucket {k.bucket}, access key {k.access_key_id}, secret {k.secret_access_key}"
            for k in TEST_USER_KEYS.values()
        )
        return (
            f"\nLakeport is running: {self.portal_url}\n\n"
            f"  test logins (identity provider {self.oidc.issuer}):\n{logins}\n\n"
            f"  S3 (SeaweedFS) at {self.seaweed.s3_endpoint}, region {self.seaweed.region}, path-style;\n"
            f"  development keys for registering warehouses:\n{s3_keys}\n\n"
            f"  Lakekeeper-compatible dev catalog (development stand-in for Lakekeeper): {self.catalog_url}\n"
            f"  database: {self.database_url}\n"
            f"  logs: {self.log_dir}\n\n"
            "Press Ctrl-C to stop everything.\n"
        )
