"""Clients to the outside world, one per app, built from its configuration.

The modules that talk to each system hold the protocol; this module only wires them
to an app: `lakekeeper()` is the app's Lakekeeper client.
"""

from __future__ import annotations

from flask import Flask, current_app

from app.lakekeeper.client import LakekeeperClient
from app.lakekeeper.tokens import ClientCredentialsTokenSource


def init_app(app: Flask) -> None:
    config = app.config
    token_source = ClientCredentialsTokenSource(
        client_id=config["LAKEKEEPER_CLIENT_ID"],
        client_secret=config["LAKEKEEPER_CLIENT_SECRET"] or "",
        issuer=config["OIDC_ISSUER"],
        audience=config["LAKEKEEPER_AUDIENCE"],
        narrow_to_warehouse=config["EXECUTION_TOKEN_WAREHOUSE_SCOPE"],
        timeout=config["OIDC_TIMEOUT_SECONDS"],
    )
    app.extensions["lakekeeper"] = LakekeeperClient(
        config["LAKEKEEPER_URL"],
        token_source,
        project_id=config["LAKEKEEPER_PROJECT_ID"] or None,
        timeout=config["LAKEKEEPER_TIMEOUT_SECONDS"],
        # Refuse a Lakekeeper release the portal does not support, at first use (not at start, so
        # that the portal starts, and says why, while the catalog is still coming up).
        check_version=True,
    )


def lakekeeper() -> LakekeeperClient:
    return current_app.extensions["lakekeeper"]
