"""What a compute unit's page calls its phase: the stored state, plus WARMING.

A RUNNING unit whose Spark session is still starting cannot run anything quickly yet. That
is no stored state: the unit's events say it ("starting its Spark session" with no "ready"
or "did not start" after it), so the phase is derived from them, with the time it began.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from app.models import ComputeUnit, ComputeUnitEvent, UnitState

WARMING = "WARMING"
SPARK_WARMING_EVENT = "starting its Spark session"
SPARK_READY_EVENT = "Spark session ready"
SPARK_FAILED_EVENT = "its Spark session did not start"
# Events that end a warm-up, whichever way it went.
_SPARK_WARM_UP_ENDS = (SPARK_READY_EVENT, SPARK_FAILED_EVENT)


@dataclass(frozen=True)
class Phase:
    name: str  # a UnitState, or WARMING
    since: datetime | None = None

    @property
    def warming(self) -> bool:
        """Running, with its Spark session still starting (templates ask this, not the name)."""
        return self.name == WARMING

    def elapsed_seconds(self, now: datetime | None = None) -> int | None:
        if self.since is None:
            return None
        since = self.since if self.since.tzinfo else self.since.replace(tzinfo=timezone.utc)
        return max(0, int(((now or datetime.now(timezone.utc)) - since).total_seconds()))


def phase_of(cu: ComputeUnit, events_newest_first: list[ComputeUnitEvent]) -> Phase:
    if cu.state != UnitState.RUNNING:
        return Phase(cu.state)
    for event in events_newest_first:
        if event.message.startswith(_SPARK_WARM_UP_ENDS):
            break
        if event.message == SPARK_WARMING_EVENT:
            return Phase(WARMING, event.at)
    return Phase(cu.state)
