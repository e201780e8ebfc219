"""Delivering the notifications of ended runs (app/executions/notifications.py), from the worker
only.

When the scheduler pass sees a run end as asked (failure, success or both), it queues one
`Notification` per channel (`queue`, unique per execution and channel). Each is delivered in a
worker thread of its own (`pending_work`, `deliver`), so a slow or failing receiver never holds
the scheduler up: a webhook is POSTed through the webhook policy (`WebhookPolicy` in
app/network_policy.py: never loopback, private or link-local addresses nor the portal's own
services unless the operator lists the host; resolved once, the checked address connected to; no
redirect followed) within a total deadline of DELIVERY_TIMEOUT_SECONDS, its answer's body never
read, signed as notifications.py says. An email goes through LAKEPORT_SMTP_HOST to the one plain
address the asker gave, parsed by the parser smtplib reads recipients with. A failure is tried
again after a doubling backoff, MAX_ATTEMPTS times in all.
"""

from __future__ import annotations

import json
import logging
import smtplib
import time
from datetime import timedelta
from email.message import EmailMessage

import httpx
from flask import current_app
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, exists, select

from app.db import engine
from app.executions import notifications
from app.models import (
    Execution,
    ExecutionState,
    JobState,
    Notification,
    NotifyFields,
    Schedule,
    Workflow,
    utcnow,
)
from app.network_policy import OutboundRefused, parse_webhook_url, total_deadline, webhook_policy
from app.transitions import compare_and_set

logger = logging.getLogger(__name__)


DELIVERY_TIMEOUT_SECONDS = 5.0


MAX_ATTEMPTS = 5


FIRST_BACKOFF_SECONDS = 30


# An execution's own notifications are queued when it ends within this long (older ends were
# queued already, or ended before the worker ran: not announced days late).
RECENT_END = timedelta(days=1)


def wanted(asker: NotifyFields, state: str) -> bool:
    return (
        asker.notify_on == "both"
        or (asker.notify_on == "failure" and state != ExecutionState.COMPLETED)
        or (asker.notify_on == "success" and state == ExecutionState.COMPLETED)
    )


def queue(asker: NotifyFields, execution: Execution) -> None:
    """Queue the notifications of an ended run that its schedule or the execution itself asks
    for (once per channel)."""
    if execution.state not in ExecutionState.FINAL or not wanted(asker, execution.state):
        return
    channels = [
        name
        for name, address in (("webhook", asker.webhook_url), ("email", asker.notify_email))
        if address
    ]
    schedule_id = asker.id if isinstance(asker, Schedule) else None
    for channel in channels:
        with Session(engine()) as db:
            db.add(
                Notification(schedule_id=schedule_id, execution_id=execution.id, channel=channel)
            )
            try:
                db.commit()
            except IntegrityError:
                db.rollback()  # queued before


def queue_ended_executions() -> None:
    """Queue what executions that asked for themselves want, once they have ended (a scheduler pass)."""
    with Session(engine(), expire_on_commit=False) as db:
        ended = db.exec(
            select(Execution).where(
                Execution.notify_on != "",
                Execution.state.in_(ExecutionState.FINAL),
                Execution.ended_at >= utcnow() - RECENT_END,
                ~exists().where(Notification.execution_id == Execution.id),
            )
        ).all()
    for execution in ended:
        queue(execution, execution)


def pending_work() -> list[tuple[str, object, int]]:
    with Session(engine()) as db:
        ids = db.exec(
            select(Notification.id).where(
                Notification.state == JobState.QUEUED, Notification.next_attempt_at <= utcnow()
            )
        ).all()
    return [
        (f"notification:{notification_id}", deliver, notification_id) for notification_id in ids
    ]


def deliver(notification_id: int) -> None:
    """Send one notification; on failure, schedule the next attempt (or give up, recorded)."""
    with Session(engine(), expire_on_commit=False) as db:
        notification = db.get(Notification, notification_id)
        execution = db.get(Execution, notification.execution_id) if notification else None
        schedule = (
            db.get(Schedule, notification.schedule_id)
            if notification and notification.schedule_id
            else None
        )
        workflow = db.get(Workflow, execution.workflow_id) if execution else None
    asker = schedule if notification and notification.schedule_id else execution
    if (
        notification is None
        or notification.state != JobState.QUEUED
        or asker is None
        or execution is None
    ):
        return
    body = json.dumps(
        {
            "execution_id": execution.id,
            "workflow": {"id": workflow.id, "name": workflow.name},
            "schedule_id": schedule.id if schedule else None,
            "state": execution.state,
            "reason": execution.reason,
            "started_at": execution.started_at.isoformat() if execution.started_at else None,
            "ended_at": execution.ended_at.isoformat() if execution.ended_at else None,
        }
    ).encode()
    try:
        if notification.channel == "webhook":
            _post(asker, body)
        else:
            _mail(asker, workflow, execution)
    except (
        httpx.HTTPError,
        OutboundRefused,
        smtplib.SMTPException,
        OSError,
        DeliveryRefused,
    ) as error:
        attempts = notification.attempts + 1
        compare_and_set(
            Notification,
            notification_id,
            (JobState.QUEUED,),
            attempts=attempts,
            last_error=str(error)[:500],
            state=JobState.FAILED if attempts >= MAX_ATTEMPTS else JobState.QUEUED,
            next_attempt_at=utcnow()
            + timedelta(seconds=FIRST_BACKOFF_SECONDS * 2 ** (attempts - 1)),
        )
        logger.warning(
            "notification %s (%s) failed, attempt %s: %s",
            notification_id,
            notification.channel,
            attempts,
            error,
        )
        return
    compare_and_set(
        Notification,
        notification_id,
        (JobState.QUEUED,),
        state=JobState.DONE,
        attempts=notification.attempts + 1,
        last_error="",
    )


class DeliveryRefused(Exception):
    """The receiver answered, but not with a 2xx."""


def _post(asker: NotifyFields, body: bytes) -> None:
    """POST within a total deadline; the answer's status is read, its body never is. A URL saved
    before the webhook policy was as strict is parsed again; the transport resolves its host once,
    checks that address and connects to it."""
    parse_webhook_url(asker.webhook_url)
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "lakeport-webhook",
        notifications.TIMESTAMP_HEADER: str(timestamp),
        notifications.SIGNATURE_HEADER: notifications.signature(
            notifications.webhook_secret(asker), timestamp, body
        ),
    }
    with (
        total_deadline(DELIVERY_TIMEOUT_SECONDS),
        webhook_policy().client(timeout=DELIVERY_TIMEOUT_SECONDS) as client,
    ):
        with client.stream("POST", asker.webhook_url, content=body, headers=headers) as answer:
            status = answer.status_code
    if not 200 <= status < 300:
        raise DeliveryRefused(f"the receiver answered {status}")


def _mail(asker: NotifyFields, workflow: Workflow, execution: Execution) -> None:
    config = current_app.config
    if not config["SMTP_HOST"]:
        raise DeliveryRefused("no SMTP server is set (LAKEPORT_SMTP_HOST)")
    address = notifications.plain_address(asker.notify_email)
    if address is None:  # saved before the address was checked as strictly
        raise DeliveryRefused("the email address is not one plain address")
    message = EmailMessage()
    message["From"], message["To"] = config["SMTP_FROM"], address
    message["Subject"] = f"Lakeport: {workflow.name} — execution #{execution.id} {execution.state}"
    started_by = (
        f" (schedule {asker.cron}, {asker.timezone})" if isinstance(asker, Schedule) else ""
    )
    message.set_content(
        f"Execution #{execution.id} of {workflow.name}{started_by} ended {execution.state}."
        + (f"\n\nReason: {execution.reason}" if execution.reason else "")
    )
    with smtplib.SMTP(
        config["SMTP_HOST"], config["SMTP_PORT"], timeout=DELIVERY_TIMEOUT_SECONDS
    ) as smtp:
        smtp.send_message(message, to_addrs=[address])
