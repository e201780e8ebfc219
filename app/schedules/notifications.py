"""Telling a schedule's owner that a run ended, by webhook and/or email, from the worker only.

When the scheduler pass sees a scheduled run end as the schedule asks (failure, success or
both), it queues one `Notification` per channel (unique per execution and channel). Each is
delivered in a worker thread of its own (`pending_work`), so a slow or failing receiver never
holds the scheduler up: a webhook is POSTed through the portal's outbound policy (no redirect
followed, DELIVERY_TIMEOUT_SECONDS at most) with `X-Lakeport-Signature: sha256=<HMAC of the
body>`; an email goes through LAKEPORT_SMTP_HOST. A failure is tried again after a doubling
backoff, MAX_ATTEMPTS times in all. The webhook's secret is derived from the portal's key and
the schedule's nonce, shown to its owner once, and never stored.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import smtplib
from datetime import timedelta
from email.message import EmailMessage

import httpx
from flask import current_app
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app.db import engine
from app.models import Execution, ExecutionState, JobState, Notification, Schedule, Workflow, utcnow
from app.network_policy import OutboundRefused, portal_policy
from app.transitions import compare_and_set

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Lakeport-Signature"
DELIVERY_TIMEOUT_SECONDS = 5.0
MAX_ATTEMPTS = 5
FIRST_BACKOFF_SECONDS = 30


def webhook_secret(schedule: Schedule) -> str:
    """The key the schedule's webhook calls are signed with (derived again, never stored)."""
    message = f"lakeport-webhook:{schedule.id}:{schedule.webhook_nonce}".encode()
    return hmac.new(current_app.config["SECRET_KEY"].encode(), message, hashlib.sha256).hexdigest()


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def wanted(schedule: Schedule, state: str) -> bool:
    return (schedule.notify_on == "both" or (schedule.notify_on == "failure" and state != ExecutionState.COMPLETED)
            or (schedule.notify_on == "success" and state == ExecutionState.COMPLETED))


def queue(schedule: Schedule, execution: Execution) -> None:
    """Queue the notifications of an ended run the schedule asks for (once per channel)."""
    if execution.state not in ExecutionState.FINAL or not wanted(schedule, execution.state):
        return
    channels = [name for name, address in (("webhook", schedule.webhook_url), ("email", schedule.notify_email))
                if address]
    for channel in channels:
        with Session(engine()) as db:
            db.add(Notification(schedule_id=schedule.id, execution_id=execution.id, channel=channel))
            try:
                db.commit()
            except IntegrityError:
                db.rollback()  # queued before


def pending_work() -> list[tuple[str, object, int]]:
    with Session(engine()) as db:
        ids = db.exec(select(Notification.id).where(Notification.state == JobState.QUEUED,
                                                    Notification.next_attempt_at <= utcnow())).all()
    return [(f"notification:{notification_id}", deliver, notification_id) for notification_id in ids]


def deliver(notification_id: int) -> None:
    """Send one notification; on failure, schedule the next attempt (or give up, recorded)."""
    with Session(engine(), expire_on_commit=False) as db:
        notification = db.get(Notification, notification_id)
        schedule = db.get(Schedule, notification.schedule_id) if notification else None
        execution = db.get(Execution, notification.execution_id) if notification else None
        workflow = db.get(Workflow, schedule.workflow_id) if schedule else None
    if notification is None or notification.state != JobState.QUEUED or schedule is None or execution is None:
        return
    body = json.dumps({"execution_id": execution.id, "workflow": {"id": workflow.id, "name": workflow.name},
                       "schedule_id": schedule.id, "state": execution.state, "reason": execution.reason,
                       "started_at": execution.started_at.isoformat() if execution.started_at else None,
                       "ended_at": execution.ended_at.isoformat() if execution.ended_at else None}).encode()
    try:
        if notification.channel == "webhook":
            _post(schedule, body)
        else:
            _mail(schedule, workflow, execution)
    except (httpx.HTTPError, OutboundRefused, smtplib.SMTPException, OSError, DeliveryRefused) as error:
        attempts = notification.attempts + 1
        final = attempts >= MAX_ATTEMPTS
        compare_and_set(Notification, notification_id, (JobState.QUEUED,), attempts=attempts,
                        last_error=str(error)[:500], state=JobState.FAILED if final else JobState.QUEUED,
                        next_attempt_at=utcnow() + timedelta(seconds=FIRST_BACKOFF_SECONDS * 2 ** (attempts - 1)))
        logger.warning("notification %s (%s) failed, attempt %s: %s", notification_id, notification.channel,
                       attempts, error)
        return
    compare_and_set(Notification, notification_id, (JobState.QUEUED,), state=JobState.DONE,
                    attempts=notification.attempts + 1, last_error="")


class DeliveryRefused(Exception):
    """The receiver answered, but not with a 2xx."""


def _post(schedule: Schedule, body: bytes) -> None:
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: signature(webhook_secret(schedule), body),
               "User-Agent": "lakeport-webhook"}
    with portal_policy().client(timeout=DELIVERY_TIMEOUT_SECONDS) as client:
        answer = client.post(schedule.webhook_url, content=body, headers=headers)
    if not 200 <= answer.status_code < 300:
        raise DeliveryRefused(f"the receiver answered {answer.status_code}")


def _mail(schedule: Schedule, workflow: Workflow, execution: Execution) -> None:
    config = current_app.config
    if not config["SMTP_HOST"]:
        raise DeliveryRefused("no SMTP server is set (LAKEPORT_SMTP_HOST)")
    message = EmailMessage()
    message["From"], message["To"] = config["SMTP_FROM"], schedule.notify_email
    message["Subject"] = f"Lakeport: {workflow.name} — execution #{execution.id} {execution.state}"
    message.set_content(f"Execution #{execution.id} of {workflow.name} (schedule {schedule.cron}, "
                        f"{schedule.timezone}) ended {execution.state}."
                        + (f"\n\nReason: {execution.reason}" if execution.reason else ""))
    with smtplib.SMTP(config["SMTP_HOST"], config["SMTP_PORT"], timeout=DELIVERY_TIMEOUT_SECONDS) as smtp:
        smtp.send_message(message)
