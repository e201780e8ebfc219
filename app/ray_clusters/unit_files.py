"""Files in a local compute unit's directory, handled as hostile input.

A unit owns its directory: users' code in it can replace any file there with a symbolic
link, a FIFO, a device node, a huge file or a directory, at any moment. The portal (root on
most machines) still reads the unit's node records and logs there and drops the Spark host's
start request. So every such access goes through `UnitDir`, which:

- walks the path one component at a time from a descriptor of the unit's directory, with
  O_NOFOLLOW on each, so no link the unit made is followed, not even in a parent directory;
- opens with O_NONBLOCK and then accepts only a regular file (`fstat`), so a FIFO never
  blocks the portal and a device is never read;
- reads at most a given number of bytes (the tail of a log, the head of a record);
- creates files with O_EXCL, never truncating or writing through something already there.

What the portal writes for itself (its bridges' log, the unit's Ray token, the generated
/etc files) lives in the unit's *portal directory*, which the unit cannot see.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeUnitFile(OSError):
    """A path in a unit's directory is not the plain file or directory the portal expects."""


class UnitDir:
    """A unit's directory, reached only without following what the unit put there."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def _open_parent(self, relative: str) -> tuple[int, str]:
        """A descriptor of `relative`'s parent directory (walked without following links) and
        the last component's name. The caller closes the descriptor."""
        parts = PurePosixPath(relative).parts
        if (
            not parts
            or PurePosixPath(relative).is_absolute()
            or any(part in (".", "..") for part in parts)
        ):
            raise ValueError(f"not a path inside a unit's directory: {relative!r}")
        fd = os.open(self.path, _DIR)
        try:
            for part in parts[:-1]:
                next_fd = os.open(part, _DIR, dir_fd=fd)
                os.close(fd)
                fd = next_fd
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafeUnitFile(
                    error.errno, f"not a directory the portal made: {relative}"
                ) from None
            raise
        return fd, parts[-1]

    def _open_regular(self, relative: str) -> int:
        parent, name = self._open_parent(relative)
        try:
            fd = os.open(name, _READ, dir_fd=parent)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise UnsafeUnitFile(error.errno, f"a link, not a file: {relative}") from None
            raise
        finally:
            os.close(parent)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafeUnitFile(errno.EINVAL, f"not a regular file: {relative}")
        return fd

    def read_head(self, relative: str, limit: int) -> bytes:
        """At most the first `limit` bytes of a regular file (OSError if there is none)."""
        fd = self._open_regular(relative)
        try:
            return os.read(fd, limit)
        finally:
            os.close(fd)

    def read_tail(self, relative: str, limit: int) -> bytes:
        """At most the last `limit` bytes of a regular file (OSError if there is none)."""
        fd = self._open_regular(relative)
        try:
            os.lseek(fd, max(0, os.fstat(fd).st_size - limit), os.SEEK_SET)
            return os.read(fd, limit)
        finally:
            os.close(fd)

    def exists(self, relative: str) -> bool:
        """Whether anything is at `relative` (not following a final link)."""
        try:
            parent, name = self._open_parent(relative)
        except OSError:
            return False
        try:
            os.stat(name, dir_fd=parent, follow_symlinks=False)
            return True
        except OSError:
            return False
        finally:
            os.close(parent)

    def create_replacing(self, relative: str, content: bytes = b"", mode: int = 0o600) -> None:
        """Create a file holding `content`, replacing whatever non-directory the unit put at its
        name (a link is removed, never written through); never truncates anything."""
        parent, name = self._open_parent(relative)
        try:
            for _ in range(3):  # the unit may race to put something back
                try:
                    fd = os.open(name, _CREATE, mode, dir_fd=parent)
                    with os.fdopen(fd, "wb") as file:
                        file.write(content)
                    return
                except FileExistsError:
                    if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                        raise UnsafeUnitFile(
                            errno.EISDIR, f"a directory, not a file: {relative}"
                        ) from None
                    os.unlink(name, dir_fd=parent)  # removes a link itself, not its target
            raise UnsafeUnitFile(
                errno.EEXIST, f"could not create {relative}: something keeps appearing there"
            )
        finally:
            os.close(parent)

    def write_new(self, relative: str, data: bytes, mode: int = 0o600) -> None:
        """Write a file that must not exist yet (the portal's own files, made before the unit runs)."""
        parent, name = self._open_parent(relative)
        try:
            fd = os.open(name, _CREATE, mode, dir_fd=parent)
        finally:
            os.close(parent)
        with os.fdopen(fd, "wb") as file:
            file.write(data)


def make_portal_dir(unit_dir: Path) -> Path:
    """Where the portal keeps a unit's own files: beside the units' dirs, in a root-only
    directory that no unit's sandbox binds (a unit can neither see nor change it)."""
    portal_dir = unit_dir.parent / ".portal" / unit_dir.name
    portal_dir.parent.mkdir(mode=0o700, exist_ok=True)
    portal_dir.parent.chmod(0o700)
    portal_dir.mkdir(mode=0o700)
    return portal_dir
