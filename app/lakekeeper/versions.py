"""Which Lakekeeper releases the portal works with, and the check of the one it talks to.

The portal speaks Lakekeeper's 0.13 API: its client is checked against the OpenAPI documents of
lakekeeper/lakekeeper tag v0.13.3 (tests/specs/lakekeeper/), which are byte for byte those of
v0.13.0, and it sends what 0.13.x accepts (no array query parameters: see `LakekeeperClient.
role_members`). 0.14 changes that API (the `main` branch's documents differ throughout), so it is
refused until the portal is checked against it.

Lakekeeper reports its version in `GET /management/v1/info` as `lakekeeper-version`, the SemVer of
its crate (crates/lakekeeper/src/api/management/v1/server.rs at v0.13.3: `env!("CARGO_PKG_VERSION")`).
"""

from __future__ import annotations

import re

from app.lakekeeper.errors import LakekeeperError

# The oldest release supported, and the first one that is not.
MINIMUM_LAKEKEEPER = (0, 13, 0)
FIRST_UNSUPPORTED_LAKEKEEPER = (0, 14, 0)
# The release the deployment pins and the vendored documents come from.
TESTED_LAKEKEEPER = "0.13.3"
SUPPORTED_RANGE_TEXT = "0.13.0 up to, not including, 0.14.0"

# SemVer core, with optional pre-release and build parts (a build part changes nothing).
_SEMVER = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


class UnsupportedLakekeeper(LakekeeperError):
    """The catalog runs a Lakekeeper release outside the supported range."""

    def __init__(self, version: str, operation: str = "") -> None:
        super().__init__(
            None,
            "UnsupportedLakekeeperVersion",
            f"Lakekeeper reports version {version!r}; this portal supports Lakekeeper {SUPPORTED_RANGE_TEXT} "
            f"(tested against {TESTED_LAKEKEEPER}). Run a supported Lakekeeper, or a Lakeport release made "
            "for this one.",
            operation,
        )
        self.version = version

    @property
    def user_message(self) -> str:
        return (
            f"The catalog runs a Lakekeeper version ({self.version[:40]}) that this portal does not support "
            f"(supported: {SUPPORTED_RANGE_TEXT}). Contact the operators."
        )


def parse_version(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a SemVer release, or None for anything else, a pre-release included
    (a 0.14.0-rc is not 0.13)."""
    match = _SEMVER.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or match.group(4):
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def is_supported(version: str) -> bool:
    parsed = parse_version(version)
    return parsed is not None and MINIMUM_LAKEKEEPER <= parsed < FIRST_UNSUPPORTED_LAKEKEEPER


def require_supported(version: str, operation: str = "") -> None:
    if not is_supported(version):
        raise UnsupportedLakekeeper(version, operation)
