"""The portal's Iceberg catalogs: one pyiceberg REST catalog per warehouse (`WarehouseCatalogs`),
created lazily on first use and shared by the portal's threads, for reading results
(app/iceberg_reader.py), measuring storage (app/iceberg_storage.py) and writing datasets
(app/workflows/dataset_tables.py). They authenticate with the portal's service tokens (renewed by the
token source, never stored in a catalog's properties) and ask for vended credentials, so the
portal holds no storage key of any warehouse. `guarded` turns their failures into words for users.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import requests
from flask import current_app
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.rest.auth import AuthManager
from pyiceberg.exceptions import (
    ForbiddenError,
    NoSuchNamespaceError,
    NoSuchTableError,
    OAuthError,
    RESTError,
    ServerError,
    UnauthorizedError,
)

from app.extensions import lakekeeper
from app.lakekeeper.tokens import TokenSource
from compute.contract import ACCESS_DELEGATION, ACCESS_DELEGATION_HEADER
from compute.run.iceberg_rest import CatalogConfiguredRestCatalog


class ResultReadError(Exception):
    """A table could not be read; the message is for the portal's users."""


class TableMissing(ResultReadError):
    """The table (or its namespace) does not exist in the warehouse."""


class TokenSourceAuth(AuthManager):
    """pyiceberg authentication from a token source: each request carries its current token,
    so a catalog outlives the tokens it was created with."""

    def __init__(self, token_source: TokenSource) -> None:
        self._token_source = token_source

    def auth_header(self) -> str:
        return f"Bearer {self._token_source.token()}"


class _TimeoutAdapter(requests.adapters.HTTPAdapter):
    def __init__(self, timeout: float) -> None:
        super().__init__()
        self._timeout = timeout

    def send(self, request, **kwargs):
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout
        return super().send(request, **kwargs)


class _RestCatalogWithTimeouts(CatalogConfiguredRestCatalog):
    """pyiceberg's REST catalog sends requests without a timeout; a portal page must not hang.
    (A table's properties never configure its FileIO here: compute/run/iceberg_rest.py.)"""

    def _create_session(self):
        session = super()._create_session()
        adapter = _TimeoutAdapter(float(self.properties["lakeport.timeout"]))
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session


class WarehouseCatalogs:
    """pyiceberg REST catalogs, one per warehouse (keyed by Lakekeeper's warehouse id).

    `catalog_uri` is Lakekeeper's `<base>/catalog`. A renamed warehouse gets a new catalog;
    `forget` drops one (e.g. after a purge). Creating an entry is atomic.
    """

    def __init__(
        self,
        catalog_uri: str,
        token_source: TokenSource,
        *,
        project_id: str,
        timeout: float = 10.0,
    ) -> None:
        self.catalog_uri = catalog_uri.rstrip("/")
        self._token_source = token_source
        self._project_id = project_id
        self._timeout = timeout
        self._catalogs: dict[str, tuple[str, RestCatalog]] = {}
        self._lock = threading.Lock()

    def catalog(self, lakekeeper_id: str, lakekeeper_name: str) -> RestCatalog:
        with self._lock:
            entry = self._catalogs.get(lakekeeper_id)
            if entry is None or entry[0] != lakekeeper_name:
                entry = (lakekeeper_name, guarded(lambda: self._create(lakekeeper_name)))
                self._catalogs[lakekeeper_id] = entry
            return entry[1]

    def forget(self, lakekeeper_id: str) -> None:
        with self._lock:
            self._catalogs.pop(lakekeeper_id, None)

    def _create(self, lakekeeper_name: str) -> RestCatalog:
        return _RestCatalogWithTimeouts(
            f"lakeport-{lakekeeper_name}",
            uri=self.catalog_uri,
            warehouse=lakekeeper_name,
            auth={
                "type": "custom",
                "impl": f"{__name__}.TokenSourceAuth",
                "custom": {"token_source": self._token_source},
            },
            **{
                "header.x-project-id": self._project_id,
                f"header.{ACCESS_DELEGATION_HEADER}": ACCESS_DELEGATION,
                "lakeport.timeout": str(self._timeout),
                "s3.connect-timeout": str(self._timeout),
                "s3.request-timeout": str(self._timeout),
            },
        )


def catalog_for(warehouse) -> RestCatalog:
    """The current app's catalog of `warehouse` (a Warehouse row), created on first use."""
    catalogs = current_app.extensions.get("iceberg_catalogs")
    if catalogs is None:
        client = lakekeeper()
        # The Lakekeeper client's own token source: one service identity, one token cache.
        catalogs = current_app.extensions.setdefault(
            "iceberg_catalogs",
            WarehouseCatalogs(
                f"{client.base_url}/catalog",
                client.token_source,
                project_id=client.project_id,
                timeout=current_app.config["LAKEKEEPER_TIMEOUT_SECONDS"],
            ),
        )
    return catalogs.catalog(warehouse.lakekeeper_id, warehouse.lakekeeper_name)


def guarded(call: Callable[[], Any]) -> Any:
    """Run a catalog or storage call, turning its failures into a ResultReadError for users."""
    try:
        return call()
    except (NoSuchTableError, NoSuchNamespaceError) as error:
        raise TableMissing("This table does not exist in the warehouse (any more).") from error
    except (ForbiddenError, UnauthorizedError, OAuthError) as error:
        raise ResultReadError("The catalog refused the portal access to this warehouse.") from error
    except (requests.ConnectionError, requests.Timeout, ServerError) as error:
        raise ResultReadError(
            "The catalog (Lakekeeper) is unreachable. Try again in a moment."
        ) from error
    except RESTError as error:
        raise ResultReadError(f"The catalog could not serve this table: {error}") from error
    except OSError as error:
        # pyarrow's S3 errors (refused, expired credentials, missing files) are OSErrors.
        raise ResultReadError(f"The warehouse's storage could not be read: {error}") from error
    except Exception as error:
        # E.g. a Lakekeeper error from the service token source.
        message = getattr(error, "user_message", None)
        if message:
            raise ResultReadError(message) from error
        raise
