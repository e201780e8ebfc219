"""What the compute-unit tests ask of this machine's processes (Linux /proc)."""

from __future__ import annotations

import os
from pathlib import Path


def process_running(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def rss_bytes(pids: list[int]) -> int:
    """Resident memory of these processes together."""
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf(
                "SC_PAGE_SIZE"
            )
        except FileNotFoundError:
            pass
    return total


def process_argv(pid: int) -> list[str]:
    """The process's command line, one argument each; [] once it has gone."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
    return arguments[:-1] if arguments[-1] == "" else arguments


def process_command_line(pid: int) -> str:
    """The process's command line as one string, arguments joined by spaces; "" once it has gone."""
    return " ".join(process_argv(pid))
