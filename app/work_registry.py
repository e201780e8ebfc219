"""The worker's registry: the background work each feature hands the worker (app/worker.py).

A feature joins from its `work.py` (the worker's side of the feature), at import, with two kinds
of entry:

- **a pending-work source** (`pending_source`): a function of no arguments that returns, for the
  rows that ask for work now, `(lease, function, subject)` triples. The worker claims the lease
  (app/leases.py) and calls `function(subject)` in a thread of its own. A lease names one piece of
  work, e.g. `execution:<id>`; a source's leases start with a prefix of its own. The worker asks
  the sources in their `order` (lower first) and claims each source's work before asking the
  next, so a new execution does not wait for the jobs' queries. The orders: `UNITS` first (an
  execution's fate depends on its unit's), then `EXECUTIONS`, then `JOBS` (comparison,
  sample-data and maintenance jobs, in that order: `JOBS + 1`, `JOBS + 2`...), then `CATALOG`
  (closing warehouses, grants), then `NOTIFICATIONS`.
- **a periodic pass** (`periodic_pass`): a function of no arguments run every `period_setting`
  seconds (a key of the app's config, e.g. "SCHEDULER_SECONDS") by one worker at a time, under
  the lease `lease`. `first` says when the first pass after the worker starts comes: `AT_ONCE`,
  `SOON` (after the lesser of its period and WORKER_SUPERVISOR_SECONDS) or `AFTER_A_PERIOD`.

A feature's `work.py`, for example:

    from app import work_registry

    def pending_work() -> list[tuple[str, Callable[[int], None], int]]: ...
    def reconcile() -> None: ...

    work_registry.pending_source("grants", work_registry.CATALOG + 1, pending_work)
    work_registry.periodic_pass(LEASE, "GRANTS_RECONCILE_SECONDS", reconcile, FirstPass.SOON)

An entry is keyed by its name (a source's) or lease (a pass's): joining again under the same
key replaces the entry, so importing a module twice, or a feature taking over an entry the
worker registered for it, never runs the work twice. The worker imports every feature's
`work.py` before its first pass (`app/worker.py: _join_the_features`, one import line per
feature), then only reads this registry. Until a feature has its `work.py`, the worker
registers that feature's existing functions there under the same names, only where the registry
has no entry of that name: a feature that joins deletes its lines there and adds its import.

The names in use (a source's name, then its order; a pass's lease, its period's setting, its
first pass): units UNITS; executions EXECUTIONS; comparison JOBS+1; sample-data JOBS+2;
maintenance JOBS+3; console JOBS+4; warehouse-closing CATALOG+1; grants CATALOG+2; notifications NOTIFICATIONS.
Passes: "supervisor" WORKER_SUPERVISOR_SECONDS AFTER_A_PERIOD; "usage" USAGE_SAMPLE_SECONDS SOON;
"scheduler" SCHEDULER_SECONDS AT_ONCE; "identity" IDENTITY_CHECK_SECONDS AT_ONCE;
"catalog-grants" GRANTS_RECONCILE_SECONDS SOON.

`live_jobs` is the source of a job table (a row per job with a JobState): one piece of work per
live job.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sqlmodel import Session, select

from app.db import engine
from app.states import JobState

# One piece of pending work: the lease that claims it, the function that does it, its subject.
Work = tuple[str, Callable[[int], None], int]

# The order the worker asks the sources in (lower first).
UNITS = 100
EXECUTIONS = 200
JOBS = 300
CATALOG = 400
NOTIFICATIONS = 500


class FirstPass(enum.Enum):
    """When a periodic pass first comes after the worker starts."""

    AT_ONCE = "at once"
    # After the lesser of its period and WORKER_SUPERVISOR_SECONDS: a restart must not delay it
    # by a whole period, nor crowd the restarted worker's first moments.
    SOON = "soon"
    # One period after the start: a restarted worker has its work back under way first.
    AFTER_A_PERIOD = "after a period"


@dataclass(frozen=True)
class PendingSource:
    name: str
    order: int
    pending: Callable[[], Sequence[Work]]


@dataclass(frozen=True)
class PeriodicPass:
    lease: str
    period_setting: str
    run: Callable[[], None]
    first: FirstPass

    def first_delay(self, config) -> float:
        """Seconds from the worker's start to this pass's first run."""
        period = config[self.period_setting]
        if self.first is FirstPass.AT_ONCE:
            return 0.0
        if self.first is FirstPass.SOON:
            return min(period, config["WORKER_SUPERVISOR_SECONDS"])
        return period


_sources: dict[str, PendingSource] = {}
_passes: dict[str, PeriodicPass] = {}


def pending_source(name: str, order: int, pending: Callable[[], Sequence[Work]]) -> None:
    """Join the registry with a source of pending work (see the module's docstring)."""
    _sources[name] = PendingSource(name, order, pending)


def periodic_pass(
    lease: str, period_setting: str, run: Callable[[], None], first: FirstPass
) -> None:
    """Join the registry with a periodic pass (see the module's docstring)."""
    _passes[lease] = PeriodicPass(lease, period_setting, run, first)


def sources() -> list[PendingSource]:
    """The pending-work sources, in the order the worker asks them."""
    return sorted(_sources.values(), key=lambda source: (source.order, source.name))


def passes() -> list[PeriodicPass]:
    return list(_passes.values())


def pending_work() -> Iterator[Work]:
    """The work the rows ask for, one source after another."""
    for source in sources():
        yield from source.pending()


def live_jobs(model, lease: str, run: Callable[[int], None]) -> list[Work]:
    """A job table's work: each of its live jobs, run by `run` under the lease `<lease>:<id>`."""
    with Session(engine()) as db:
        ids = db.exec(select(model.id).where(model.state.in_(JobState.LIVE))).all()
    return [(f"{lease}:{job_id}", run, job_id) for job_id in ids]
