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
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except FileNotFoundError:
            pass
    return total
