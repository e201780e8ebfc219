"""Lakeport: the web portal of a multi-tenant lakehouse.

Modules:
- `config.py` — every setting, read from the environment in one place (docs/configuration.md)
- `db.py` — the engine and the request's session (read-only for GET and HEAD); `get_owned_or_404`
- `database_roles.py` — PostgreSQL's two roles: the owner that migrates, the portal's role
- `models.py` — all tables
- `errors.py` — `UserFacingError`, the base of every error a user sees
- `signals.py` — signals between features (a warehouse closing, a share revoked)
- `states.py` — the states of units, executions and jobs, each defined once
- `transitions.py` — the one compare-and-set state change
- `extensions.py` — the Lakekeeper client and the warehouses' Iceberg catalogs, one per app
- `ports.py` — free loopback ports, shared with the local stack
- `security.py` — CSRF, security headers, sign-in required
- `roles.py` — groups from the identity provider's `groups` claim; who is an operator
- `grantees.py` — whom a warehouse or workflow is shared with, and who may do what with it
- `worker.py` — the worker process: claims the registry's work through leases and runs it
- `work_registry.py` — the worker's registry: the pending work and periodic passes each feature's `work.py` joins
- `leases.py` — compare-and-set leases in `work_leases`
- `network_policy.py` — which hosts the portal may contact when a user names them
- `storage_probe.py` — the "Test connection" probe of a bucket (SigV4 over httpx)
- `iceberg_catalogs.py` — pyiceberg, one REST catalog per warehouse; failures in words
- `iceberg_reader.py` — reading a table: pages by file-level row counts; streamed CSV
- `iceberg_storage.py` — storage figures from snapshot summaries, for usage
- `table_pages.py` — one page of an Iceberg table as every table viewer shows it
- `untrusted.py` — what a unit reports, cleaned and bounded (`clean_text`, `bounded`)
- `charts.py` — server-side SVG of runtime stats
- `live_partials.py` — self-polling partials: when to ask again; 304 for an unchanged poll
- `web.py` — what pages share: the redirect after an action, the shares panel, template filters

Packages (each one's docstring lists its modules):
- `api/` — the JSON API under /api/v1 and its OpenAPI document
- `audit/` — the append-only audit trail and its page
- `auth/` — single sign-on: sign-in, sign-out, the session, the provider's tokens
- `compute_units/` — compute units: their life, the warm pool, the one door to a unit
- `console/` — the SQL console: one statement against a warehouse, on the user's own unit
- `executions/` — runs of a workflow on a unit, their results, logs and comparisons
- `lakekeeper/` — the Lakekeeper client
- `main/` — the dashboard and `/health`
- `operators/` — the operators' view
- `ray_clusters/` — the Ray clusters behind units: one interface, three backends
- `schedules/` — cron schedules and the worker's firing of them
- `spark_host/` — a unit's Spark host as the portal reaches it: transport and warm-up
- `tables/` — a table's health, maintenance policy and story (its page's sections)
- `tokens/` — personal access tokens
- `usage/` — usage accounting and retention
- `warehouses/` — warehouses: registration, sharing, closing, the table explorer
- `workflows/` — workflows, their versions and steps, and data sources
"""

from __future__ import annotations

import logging
from datetime import timedelta

from flask import Flask, current_app, request
from flask_login import current_user
from htmx_flask import Htmx

from app import security, web
from app.config import PROJECT_ROOT, Config


def create_app(config: Config | None = None) -> Flask:
    """The application factory: one app per configuration (tests make many)."""
    config = config or Config.from_env()
    config.validate()
    app = Flask(
        __name__,
        template_folder=str(PROJECT_ROOT / "templates"),
        static_folder="static",
    )
    app.config.from_mapping(config.flask_mapping())
    app.config.setdefault("PERMANENT_SESSION_LIFETIME", timedelta(hours=12))
    logging.basicConfig(
        level=config.LOG_LEVEL, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app.logger.setLevel(config.LOG_LEVEL)

    Htmx(app)

    from app import db, extensions
    from app.auth import oidc

    db.init_app(app)
    extensions.init_app(app)
    security.init_app(app)
    oidc.init_app(app)

    from app import (
        api,
        audit,
        auth,
        compute_units,
        console,
        executions,
        main,
        operators,
        schedules,
        tables,
        tokens,
        usage,
        warehouses,
        workflows,
    )
    from app.api.openapi import spec as api_spec

    for feature in (
        auth,
        main,
        warehouses,
        compute_units,
        workflows,
        executions,
        console,
        usage,
        tables,
        tokens,
        schedules,
        audit,
        operators,
        api,
    ):
        app.register_blueprint(feature.bp)
    security.csrf.exempt(
        api.bp
    )  # the API takes no cookie: a bearer token, which no other site can send
    api_spec.register(app)

    register_error_pages(app)
    app.context_processor(navigation)
    web.init_app(app)  # every template filter and test, and the states templates compare with
    register_commands(app)
    return app


def register_commands(app: Flask) -> None:
    import click

    from app.database_roles import audit_trail_exposure
    from app.db import make_engine, upgrade_database

    @app.cli.group("db")
    def db_group():
        """Lakeport's database."""

    @db_group.command("upgrade")
    def db_upgrade():
        """Apply every Alembic migration (`alembic upgrade head`), as the owner's role
        (LAKEPORT_DATABASE_OWNER_URL) when one is set, granting the portal's role its rights."""
        owner_url = app.config["DATABASE_OWNER_URL"]
        portal_url = app.config["DATABASE_URL"]
        upgrade_database(owner_url or portal_url, portal_url=portal_url if owner_url else None)
        click.echo("database is at the newest migration")
        checked = make_engine(portal_url)
        try:
            if exposure := audit_trail_exposure(checked):
                click.echo(f"warning: {exposure}", err=True)
        finally:
            checked.dispose()

    @app.cli.group("lakeport")
    def lakeport_group():
        """Lakeport's processes besides the web server."""

    @lakeport_group.command("worker")
    def worker_command():
        """Do the background work (compute units, executions, sample data, the supervisor) until
        SIGTERM or Ctrl-C. Web processes only record what is to be done; run one of these beside them."""
        from app.worker import run_worker

        run_worker(app)

    @lakeport_group.command("stop-local-units")
    @click.option(
        "--reason",
        default="the portal's operator stopped them",
        help="Recorded as each unit's reason.",
    )
    def stop_local_units(reason: str):
        """Stop every local compute unit of this database at once (when the machine's stack goes
        down: local units are the worker's child processes)."""
        from app.compute_units.work import terminate_all_local

        stopped = terminate_all_local(reason)
        click.echo(f"stopped {stopped} local compute unit(s)")


# The page frame's navigation: (label, endpoint), shown for the features this app serves.
NAVIGATION = [
    ("Warehouses", "warehouses.index"),
    ("Compute units", "compute_units.index"),
    ("Workflows", "workflows.index"),
    ("Executions", "executions.index"),
    ("Query", "console.index"),
    ("Usage", "usage.index"),
    ("API tokens", "tokens.index"),
]


def navigation() -> dict:
    from app.roles import is_operator

    def has_endpoint(endpoint: str) -> bool:
        return endpoint in current_app.view_functions

    items = [(label, endpoint) for label, endpoint in NAVIGATION if has_endpoint(endpoint)]
    return {
        "navigation": items,
        "has_endpoint": has_endpoint,
        "is_operator": is_operator(current_user),
    }


def register_error_pages(app: Flask) -> None:
    messages = {
        400: ("Bad request", "The request could not be understood."),
        403: ("Not allowed", "You do not have access to this page."),
        404: ("Not found", "There is nothing here, or it is not yours."),
        405: ("Not allowed", "This action is not available here."),
        500: ("Something went wrong", "Lakeport hit an unexpected error. It has been logged."),
    }

    def render_error(error):
        code = getattr(error, "code", 500) or 500
        title, message = messages.get(code, messages[500])
        if code == 500:
            app.logger.exception("unhandled error on %s %s", request.method, request.path)
        if request.path.startswith("/api/"):
            from app.api.problems import problem

            return problem(code, message)
        return security.error_page(title, message, code)

    for code in messages:
        app.register_error_handler(code, render_error)
