"""Lakekeeper errors: every failure is a `LakekeeperError` whose `user_message` can be shown to
users; `str(error)` is the technical account for logs. Neither ever contains a secret.
"""

from __future__ import annotations

# Lakekeeper's error types for a storage location it could not write, read and delete with
# the credentials given (storage validation on create and on credential rotation).
_STORAGE_VALIDATION_TYPES = frozenset(
    {
        "IoOperationFailed",
        "ValidationFailedError",
        "IcebergFileIOError",
        "ShortTermCredentialError",
        "InitializeClientError",
        "MissingCredentialError",
        "InvalidLocation",
        "StorageValidationFailed",
    }
)
_USER_MESSAGES = {
    "WarehouseAlreadyExists": "A warehouse with this name already exists in the catalog. Choose another name.",
    "CreateWarehouseStorageProfileOverlap": (
        "This bucket location overlaps an existing warehouse. Use another "
        "bucket, or a key prefix that no other warehouse uses."
    ),
    # Lakekeeper v0.13.3's type for a missing warehouse (crates/lakekeeper/src/service/catalog_store/warehouse.rs).
    "NoSuchWarehouseException": "This warehouse no longer exists in the catalog.",
    "WarehouseHasUnfinishedTasks": (
        "The catalog is still purging this warehouse's dropped tables. Try again in a minute."
    ),
    "WarehouseNotEmpty": (
        "The warehouse still holds namespaces or tables (dropped tables awaiting deletion count "
        "too). Empty it before deleting it."
    ),
    "WarehouseProtected": "The warehouse is protected against deletion in the catalog.",
}
_STORAGE_VALIDATION_MESSAGE = (
    "Lakekeeper could not write to the bucket with these credentials. Check the bucket name, region, "
    "endpoint and key prefix, and that the access key may write, read and delete objects there."
)
_UNEXPECTED_ANSWER_MESSAGE = (
    "The catalog (Lakekeeper) gave an answer the portal does not understand. Contact the operators."
)
_UNREACHABLE_MESSAGE = (
    "The catalog (Lakekeeper) is unreachable. Try again in a moment; if this persists, contact "
    "the operators."
)


class LakekeeperError(Exception):
    """Lakekeeper answered with an error (or, for subclasses, could not be asked).

    `status` is the HTTP status (None when there was no answer), `type` Lakekeeper's error
    type (e.g. `NoSuchWarehouseException`), `message` its technical message, `operation` the
    client method that failed.
    """

    def __init__(self, status: int | None, type: str, message: str, operation: str = "") -> None:
        super().__init__(message)
        self.status, self.type, self.message, self.operation = status, type, message, operation

    def __str__(self) -> str:
        status = f"HTTP {self.status} " if self.status is not None else ""
        return f"{self.operation or 'Lakekeeper call'}: {status}{self.type}: {self.message}"

    @property
    def is_storage_refusal(self) -> bool:
        """Lakekeeper could not use the storage (bucket, keys, endpoint...) it was given."""
        return self.type in _STORAGE_VALIDATION_TYPES

    @property
    def user_message(self) -> str:
        """What went wrong, in words for the portal's users."""
        if self.type in _USER_MESSAGES:
            if self.operation == "rename_warehouse" and self.type == "NoSuchWarehouseException":
                # Lakekeeper renames active warehouses only.
                return "Only active warehouses can be renamed; this one is deactivated or no longer exists."
            return _USER_MESSAGES[self.type]
        if self.type in _STORAGE_VALIDATION_TYPES:
            return _STORAGE_VALIDATION_MESSAGE
        if self.type == "UnexpectedResponse":
            return _UNEXPECTED_ANSWER_MESSAGE
        if "AlreadyExists" in self.type or (
            self.status == 409 and self.operation in ("create_warehouse", "rename_warehouse")
        ):
            return "This name is already taken in the catalog. Choose another name."
        if self.status == 401:
            return "The catalog did not accept the portal's credentials. Contact the operators."
        if self.status == 403:
            return "The catalog refused this operation to the portal. Contact the operators."
        if self.status == 404:
            return "The catalog no longer has this item; it may have been deleted meanwhile."
        if self.status == 503:
            return "The catalog (Lakekeeper) is temporarily unavailable. Try again in a moment."
        if self.status is not None and self.status >= 500:
            return (
                "The catalog (Lakekeeper) failed to process the request. Try again later; if this persists, "
                "contact the operators."
            )
        return f"The catalog rejected the request: {self.message}"


class LakekeeperUnavailable(LakekeeperError):
    """No answer: connection refused or reset, or a timeout.

    `outcome_unknown` is True when a request that is not safe to repeat may have reached
    Lakekeeper before the connection failed (e.g. a create that timed out).
    """

    def __init__(self, message: str, operation: str = "", outcome_unknown: bool = False) -> None:
        super().__init__(None, "Unavailable", message, operation)
        self.outcome_unknown = outcome_unknown

    @property
    def user_message(self) -> str:
        if self.outcome_unknown:
            return (
                "The catalog (Lakekeeper) did not answer in time, so it is unknown whether the change was "
                "made. Refresh the page to check before trying again."
            )
        return _UNREACHABLE_MESSAGE


class ServiceTokenError(LakekeeperError):
    """The identity provider did not issue the portal's service token."""

    @property
    def user_message(self) -> str:
        if self.status is None or self.status >= 500:
            return (
                "The portal could not sign in to the catalog because the identity provider is unreachable. "
                "Try again in a moment."
            )
        if self.operation == "user_token":
            return (
                "The identity provider refused the portal a catalog token acting as this user for one "
                "warehouse. Contact the operators."
            )
        return (
            "The identity provider refused the portal's catalog credentials. Contact the operators."
        )
