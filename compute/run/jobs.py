"""The jobs a unit's Spark host runs, by kind (compute/contract.py `JobKind`): each kind is one
function of `(spark, args, progress)` returning the run's result. The host looks the function
up here and calls it, in a thread of the warm host or in the run's own process
(compute/run/run_channel.py `execute`); no code travels with a job but a probe's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compute.contract import JobKind
from compute.run.comparison import run_comparison
from compute.run.maintenance import run_maintenance
from compute.run.pipeline import run_pipeline
from compute.run.query import run_query
from compute.run.runs import RunProgress
from compute.run.step_code import run_probe

Job = Callable[[Any, dict, RunProgress], Any]

JOBS: dict[JobKind, Job] = {
    JobKind.EXECUTION: run_pipeline,
    JobKind.COMPARISON: run_comparison,
    JobKind.MAINTENANCE: run_maintenance,
    JobKind.PROBE: run_probe,
    JobKind.QUERY: run_query,
}


def run_job(kind: JobKind, spark, args: dict, progress: RunProgress) -> Any:
    """Run the job of `kind` with `args`; its result (raises what the job raises)."""
    return JOBS[JobKind(kind)](spark, args, progress)
