"""What the schedules' page reads: a workflow's schedules, a schedule's past runs, the time
zones to choose from."""

from __future__ import annotations

from zoneinfo import available_timezones

from sqlmodel import select

from app.db import get_db
from app.models import Schedule, ScheduledRun, Workflow


def schedules_of(workflow: Workflow) -> list[Schedule]:
    return list(
        get_db().exec(
            select(Schedule).where(Schedule.workflow_id == workflow.id).order_by(Schedule.id)
        )
    )


def runs_of(schedule: Schedule, limit: int = 20) -> list[ScheduledRun]:
    return list(
        get_db().exec(
            select(ScheduledRun)
            .where(ScheduledRun.schedule_id == schedule.id)
            .order_by(ScheduledRun.due_at.desc(), ScheduledRun.attempt.desc())
            .limit(limit)
        )
    )


def zone_names() -> list[str]:
    return sorted(available_timezones())
