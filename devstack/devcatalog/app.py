"""The dev catalog's WSGI application: `create_app()` for gunicorn, `create_app(config)` in code."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from flask import Flask, g, jsonify, request
from werkzeug.exceptions import HTTPException

from devstack.devcatalog import paths
from devstack.devcatalog.auth import Caller, TokenVerifier, require_warehouse
from devstack.devcatalog.catalog import catalog
from devstack.devcatalog.config import ENVIRONMENT_VARIABLE, DevCatalogConfig
from devstack.devcatalog.credential_cache import ShortTermCredentialsCache
from devstack.devcatalog.errors import CatalogError, QueryRejection, refuse_array_query_parameters
from devstack.devcatalog.management import management
from devstack.devcatalog.permissions import permissions
from devstack.devcatalog.seaweed import SeaweedCatalog
from devstack.devcatalog.store import WarehouseStore

log = logging.getLogger("devcatalog")
LABEL = "Lakekeeper-compatible dev catalog (a development stand-in for Lakekeeper, not Lakekeeper)"


@dataclass
class Services:
    store: WarehouseStore
    seaweed: SeaweedCatalog
    tokens: TokenVerifier
    project_admins: frozenset[str]
    credential_cache: ShortTermCredentialsCache


def _warehouse_action() -> str:
    """What the current request does to the warehouse its path names (see auth.WAREHOUSE_ACTIONS)."""
    reads = request.method in ("GET", "HEAD")
    if request.blueprint == "permissions":
        return "manage_grants"
    if request.blueprint == "catalog":
        return "read" if reads else "write"
    return "describe" if reads else "manage"


def _query_rejection(error: QueryRejection):
    return error.body(), 400, {"Content-Type": "text/plain; charset=utf-8"}


def create_app(config: DevCatalogConfig | None = None) -> Flask:
    """The app for `config`, or for the JSON settings in $LAKEPORT_DEVCATALOG_CONFIG."""
    config = config or DevCatalogConfig.from_json(os.environ[ENVIRONMENT_VARIABLE])
    app = Flask("devcatalog")
    app.config["STORAGE_CHECK_TIMEOUT"] = config.storage_check_timeout
    app.config["VENDED_CREDENTIALS_SCOPE"] = config.vended_credentials_scope
    app.config["VENDED_CREDENTIALS_SECONDS"] = config.vended_credentials_seconds
    app.extensions["devcatalog"] = Services(
        store=WarehouseStore(config.store_path, config.encryption_key),
        seaweed=SeaweedCatalog(config),
        tokens=TokenVerifier(config.oidc_issuer, config.audience),
        project_admins=frozenset(config.project_admins),
        credential_cache=ShortTermCredentialsCache(enabled=config.vended_credentials_cache),
    )
    app.register_blueprint(management)
    app.register_blueprint(permissions)
    app.register_blueprint(catalog)
    app.register_error_handler(QueryRejection, _query_rejection)

    @app.get("/health")
    def health():
        return {"status": "ok", "service": LABEL}

    @app.before_request
    def refuse_path_tricks():
        # First, before any grant is checked: the path checked must be the path forwarded.
        paths.segments(paths.raw_path(request))

    @app.before_request
    def require_bearer_token():
        if request.path == "/health":
            return
        services = app.extensions["devcatalog"]
        claims = services.tokens.verify(request.headers.get("Authorization"))
        g.caller = Caller.of(claims, services.project_admins)
        # Lakekeeper's extractors run before its handler's authorization: a refused query comes first.
        refuse_array_query_parameters(request.endpoint, request.args)
        # Every management and catalog route that names a warehouse calls it `warehouse_id`.
        warehouse_id = (request.view_args or {}).get("warehouse_id")
        if warehouse_id is not None:
            require_warehouse(
                warehouse_id,
                _warehouse_action(),
                services.store.relations(warehouse_id, g.caller.user_id),
            )

    @app.errorhandler(CatalogError)
    def catalog_error(error: CatalogError):
        headers = {"WWW-Authenticate": "Bearer"} if error.code == 401 else {}
        return jsonify(error.body()), error.code, headers

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException):
        # Unknown paths, wrong methods, malformed ids: still Lakekeeper's error envelope.
        return catalog_error(
            CatalogError(error.code or 500, error.name.replace(" ", ""), error.description or "")
        )

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per forwarded call is noise
    log.info(
        "%s on %s: tokens from %s (audience %s); project admins %s; tables in SeaweedFS at %s",
        LABEL,
        config.url,
        config.oidc_issuer,
        config.audience,
        ", ".join(config.project_admins),
        config.iceberg_url,
    )
    return app
