"""A workflow's schedules: list (next times, past runs and why one was skipped), create, pause,
resume, delete."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from flask_login import current_user

from app.db import get_owned_or_404
from app.executions import notifications
from app.executions import queries as execution_queries
from app.models import Schedule, Workflow
from app.schedules import bp, queries, service


@bp.get("/workflow/<int:workflow_id>")
def for_workflow(workflow_id: int):
    return _page(get_owned_or_404(Workflow, workflow_id))


@bp.post("/workflow/<int:workflow_id>")
def create(workflow_id: int):
    workflow = get_owned_or_404(Workflow, workflow_id)
    try:
        schedule = service.create(current_user, workflow, request.form, service.now())
    except service.ScheduleRefused as refusal:
        return _page(
            workflow, errors={refusal.field or "form": refusal.message}, values=request.form
        ), 422
    flash(f"Scheduled: {schedule.cron} ({schedule.timezone}).", "success")
    if schedule.webhook_url:  # its signing secret, shown this once
        return _page(workflow, webhook_secret=notifications.webhook_secret(schedule))
    return redirect(url_for("schedules.for_workflow", workflow_id=workflow.id))


@bp.post("/<int:schedule_id>/<any(pause, resume, delete):action>")
def change(schedule_id: int, action: str):
    schedule = get_owned_or_404(Schedule, schedule_id)
    workflow_id = schedule.workflow_id
    if action == "delete":
        service.delete(schedule)
        flash("The schedule is deleted; its past runs' executions stay.", "info")
    else:
        service.set_paused(schedule, action == "pause", service.now())
    return redirect(url_for("schedules.for_workflow", workflow_id=workflow_id))


def _page(
    workflow: Workflow, errors: dict | None = None, values=None, webhook_secret: str | None = None
):
    now = service.now()
    schedules = [
        (
            schedule,
            service.next_times(schedule, now) if not schedule.paused else [],
            queries.runs_of(schedule),
        )
        for schedule in queries.schedules_of(workflow)
    ]
    return render_template(
        "schedules/index.html",
        workflow=workflow,
        schedules=schedules,
        errors=errors or {},
        values=values or {"timezone": "UTC", "catch_up": "skip"},
        units=execution_queries.user_compute_units(current_user),
        warehouses=execution_queries.active_warehouses(current_user),
        zones=queries.zone_names(),
        catch_up=service.CATCH_UP,
        options=service.OPTIONS,
        defaults=service.DEFAULTS,
        notify_on=notifications.NOTIFY_ON,
        webhook_secret=webhook_secret,
    )
