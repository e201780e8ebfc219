"""The one base of the errors the portal shows to its users."""

from __future__ import annotations


class UserFacingError(Exception):
    """Something was refused or failed for a reason the user can act on: `message` is for them
    (safe to show: no secret, nothing about hosts they may not reach), `field` names the form
    field at fault, if any. Each feature raises its own subclass."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.field = message, field
