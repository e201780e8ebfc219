"""Lakeport: the web portal of a multi-tenant lakehouse."""
from __future__ import annotations

import logging
from datetime import timedelta

from flask import Flask, render_template, request
from htmx_flask import Htmx

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
    logging.basicConfig(level=config.LOG_LEVEL, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app.logger.setLevel(config.LOG_LEVEL)

    Htmx(app)

    from app import db, extensions, security
    from app.auth import oidc

    db.init_app(app)
    extensions.init_app(app)
    security.init_app(app)
    oidc.init_app(app)

    from app.auth import bp as auth_bp
    from app.main import bp as main_bp
    from app.compute_units import bp as compute_units_bp
    from app.warehouses import bp as warehouses_bp
    from app.workflows import bp as workflows_bp
    from app.executions import bp as executions_bp
    from app.usage import bp as usage_bp
    from app.tokens import bp as tokens_bp
    from app.schedules import bp as schedules_bp
    from app.audit import bp as audit_bp
    from app.operators import bp as operators_bp
    from app.api import bp as api_bp
    from app.api.openapi import spec as api_spec

    app.register_blueprint(auth_bp)
    app.register_blueprint(main_bp)
    app.register_blueprint(warehouses_bp)
    app.register_blueprint(compute_units_bp)
    app.register_blueprint(workflows_bp)
    app.register_blueprint(executions_bp)
    app.register_blueprint(usage_bp)
    app.register_blueprint(tokens_bp)
    app.register_blueprint(schedules_bp)
    app.register_blueprint(audit_bp)
    app.register_blueprint(operators_bp)
    app.register_blueprint(api_bp)
    security.csrf.exempt(api_bp)  # the API takes no cookie: a bearer token, which no other site can send
    api_spec.register(app)

    register_error_pages(app)
    app.context_processor(navigation)
    register_commands(app)
    return app


def register_commands(app: Flask) -> None:
    import click

    from app.db import upgrade_database

    @app.cli.group("db")
    def db_group():
        """Lakeport's database."""

    @db_group.command("upgrade")
    def db_upgrade():
        """Apply every Alembic migration (`alembic upgrade head`)."""
        upgrade_database(app.config["DATABASE_URL"])
        click.echo("database is at the newest migration")

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
    @click.option("--reason", default="the portal's operator stopped them", help="Recorded as each unit's reason.")
    def stop_local_units(reason: str):
        """Stop every local compute unit of this database at once (when the machine's stack goes
        down: local units are the worker's child processes)."""
        from app.compute_units.supervision import terminate_all_local

        stopped = terminate_all_local(reason)
        click.echo(f"stopped {stopped} local compute unit(s)")


# The page frame's navigation: (label, endpoint), shown for the features this app serves.
NAVIGATION = [
    ("Warehouses", "warehouses.index"),
    ("Compute units", "compute_units.index"),
    ("Workflows", "workflows.index"),
    ("Executions", "executions.index"),
    ("Usage", "usage.index"),
    ("API tokens", "tokens.index"),
]


def navigation() -> dict:
    from flask import current_app

    def has_endpoint(endpoint: str) -> bool:
        return endpoint in current_app.view_functions

    from flask_login import current_user

    from app.roles import is_operator

    items = [(label, endpoint) for label, endpoint in NAVIGATION if has_endpoint(endpoint)]
    return {"navigation": items, "has_endpoint": has_endpoint, "is_operator": is_operator(current_user)}


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
        if request.headers.get("HX-Request") == "true":
            return render_template("_error_inline.html", message=message), code
        return render_template("error.html", title=title, message=message), code

    for code in messages:
        app.register_error_handler(code, render_error)
