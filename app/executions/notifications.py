"""Telling a user that a run ended, by webhook and/or email, from the worker only.

Who asks: a schedule for its runs, or a user for one execution they start (both carry
`NotifyFields`; `check` validates what they ask on every form and in the API). When the
scheduler pass sees a run end as asked (failure, success or both), it queues one
`Notification` per channel (unique per execution and channel). Each is
delivered in a worker thread of its own (`pending_work`), so a slow or failing receiver never
holds the scheduler up: a webhook is POSTed through the portal's outbound policy (no redirect
followed, DELIVERY_TIMEOUT_SECONDS at most) with `X-Lakeport-Signature: sha256=<HMAC of the
body>`; an email goes through LAKEPORT_SMTP_HOST. A failure is tried again after a doubling
backoff, MAX_ATTEMPTS times in all. The webhook's secret is derived from the portal's key and
the asker's nonce, shown to its owner once, and never stored.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import smtplib
from datetime import timedelta
from email.message import EmailMessage

import httpx
from flask import current_app
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, exists, select

from app.db import engine
from app.models import Execution, ExecutionState, JobState, Notification, NotifyFields, Schedule, Workflow, utcnow
from app.network_policy import OutboundRefused, portal_policy
from app.transitions import compare_and_set

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Lakeport-Signature"
DELIVERY_TIMEOUT_SECONDS = 5.0
MAX_ATTEMPTS = 5
FIRST_BACKOFF_SECONDS = 30
NOTIFY_ON = {"": "Nobody", "failure": "When a run fails", "success": "When a run completes", "both": "When a run ends"}
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# An execution's own notifications are queued when it ends within this long (older ends were
# queued already, or ended before the worker ran: not announced days late).
RECENT_END = timedelta(days=1)


def check(values) -> dict[str, str]:
    """field → message for what is wrong in a request to be told (notify_on, webhook_url, notify_email)."""
    errors: dict[str, str] = {}
    if (values.get("notify_on") or "") not in NOTIFY_ON:
        errors["notify_on"] = "Choose when to be told."
    url, email = (values.get("webhook_url") or "").strip(), (values.get("notify_email") or "").strip()
    if url:
        try:
            portal_policy().check_url(url)
        except OutboundRefused as refusal:
            errors["webhook_url"] = refusal.message
        except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError):
            errors["webhook_url"] = "An http:// or https:// URL."
        if len(url) > 1000:
            errors["webhook_url"] = "At most 1,000 characters."
    if email and (len(email) > 320 or not EMAIL.match(email)):
        errors["notify_email"] = "An email address, e.g. data-team@example.com."
    if values.get("notify_on") and not (url or email):
        errors["notify_on"] = "Give a webhook URL or an email address to be told."
    return errors


def fields(values) -> dict:
    """The checked request as `NotifyFields` values (a fresh nonce when there is a webhook)."""
    url = (values.get("webhook_url") or "").strip()
    asked = bool(values.get("notify_on"))
    return {"notify_on": values.get("notify_on") or "", "webhook_url": url if asked else "",
            "notify_email": (values.get("notify_email") or "").strip() if asked else "",
            "webhook_nonce": secrets.token_hex(16) if url and asked else ""}


def webhook_secret(asker: NotifyFields) -> str:
    """The key the asker's webhook calls are signed with (derived again, never stored)."""
    label = f"{asker.id}" if isinstance(asker, Schedule) else f"execution-{asker.id}"
    message = f"lakeport-webhook:{label}:{asker.webhook_nonce}".encode()
    return hmac.new(current_app.config["SECRET_KEY"].encode(), message, hashlib.sha256).hexdigest()


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def wanted(asker: NotifyFields, state: str) -> bool:
    return (asker.notify_on == "both" or (asker.notify_on == "failure" and state != ExecutionState.COMPLETED)
            or (asker.notify_on == "success" and state == ExecutionState.COMPLETED))


def queue(asker: NotifyFields, execution: Execution) -> None:
    """Queue the notifications of an ended run that its schedule or the execution itself asks
    for (once per channel)."""
    if execution.state not in ExecutionState.FINAL or not wanted(asker, execution.state):
        return
    channels = [name for name, address in (("webhook", asker.webhook_url), ("email", asker.notify_email))
                if address]
    schedule_id = asker.id if isinstance(asker, Schedule) else None
    for channel in channels:
        with Session(engine()) as db:
            db.add(Notification(schedule_id=schedule_id, execution_id=execution.id, channel=channel))
            try:
                db.commit()
            except IntegrityError:
                db.rollback()  # queued before


def queue_ended_executions() -> None:
    """Queue what executions that asked for themselves want, once they have ended (a scheduler pass)."""
    with Session(engine(), expire_on_commit=False) as db:
        ended = db.exec(select(Execution).where(
            Execution.notify_on != "", Execution.state.in_(ExecutionState.FINAL),
            Execution.ended_at >= utcnow() - RECENT_END,
            ~exists().where(Notification.execution_id == Execution.id))).all()
    for execution in ended:
        queue(execution, execution)


def pending_work() -> list[tuple[str, object, int]]:
    with Session(engine()) as db:
        ids = db.exec(select(Notification.id).where(Notification.state == JobState.QUEUED,
                                                    Notification.next_attempt_at <= utcnow())).all()
    return [(f"notification:{notification_id}", deliver, notification_id) for notification_id in ids]


def deliver(notification_id: int) -> None:
    """Send one notification; on failure, schedule the next attempt (or give up, recorded)."""
    with Session(engine(), expire_on_commit=False) as db:
        notification = db.get(Notification, notification_id)
        execution = db.get(Execution, notification.execution_id) if notification else None
        schedule = db.get(Schedule, notification.schedule_id) if notification and notification.schedule_id else None
        workflow = db.get(Workflow, execution.workflow_id) if execution else None
    asker = schedule if notification and notification.schedule_id else execution
    if notification is None or notification.state != JobState.QUEUED or asker is None or execution is None:
        return
    body = json.dumps({"execution_id": execution.id, "workflow": {"id": workflow.id, "name": workflow.name},
                       "schedule_id": schedule.id if schedule else None, "state": execution.state,
                       "reason": execution.reason,
                       "started_at": execution.started_at.isoformat() if execution.started_at else None,
                       "ended_at": execution.ended_at.isoformat() if execution.ended_at else None}).encode()
    try:
        if notification.channel == "webhook":
            _post(asker, body)
        else:
            _mail(asker, workflow, execution)
    except (httpx.HTTPError, OutboundRefused, smtplib.SMTPException, OSError, DeliveryRefused) as error:
        attempts = notification.attempts + 1
        compare_and_set(Notification, notification_id, (JobState.QUEUED,), attempts=attempts, last_error=str(error)[:500],
                        state=JobState.FAILED if attempts >= MAX_ATTEMPTS else JobState.QUEUED,
                        next_attempt_at=utcnow() + timedelta(seconds=FIRST_BACKOFF_SECONDS * 2 ** (attempts - 1)))
        logger.warning("notification %s (%s) failed, attempt %s: %s", notification_id, notification.channel,
                       attempts, error)
        return
    compare_and_set(Notification, notification_id, (JobState.QUEUED,), state=JobState.DONE,
                    attempts=notification.attempts + 1, last_error="")


class DeliveryRefused(Exception):
    """The receiver answered, but not with a 2xx."""


def _post(asker: NotifyFields, body: bytes) -> None:
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: signature(webhook_secret(asker), body),
               "User-Agent": "lakeport-webhook"}
    with portal_policy().client(timeout=DELIVERY_TIMEOUT_SECONDS) as client:
        answer = client.post(asker.webhook_url, content=body, headers=headers)
    if not 200 <= answer.status_code < 300:
        raise DeliveryRefused(f"the receiver answered {answer.status_code}")


def _mail(asker: NotifyFields, workflow: Workflow, execution: Execution) -> None:
    config = current_app.config
    if not config["SMTP_HOST"]:
        raise DeliveryRefused("no SMTP server is set (LAKEPORT_SMTP_HOST)")
    message = EmailMessage()
    message["From"], message["To"] = config["SMTP_FROM"], asker.notify_email
    message["Subject"] = f"Lakeport: {workflow.name} — execution #{execution.id} {execution.state}"
    started_by = f" (schedule {asker.cron}, {asker.timezone})" if isinstance(asker, Schedule) else ""
    message.set_content(f"Execution #{execution.id} of {workflow.name}{started_by} ended {execution.state}."
                        + (f"\n\nReason: {execution.reason}" if execution.reason else ""))
    with smtplib.SMTP(config["SMTP_HOST"], config["SMTP_PORT"], timeout=DELIVERY_TIMEOUT_SECONDS) as smtp:
        smtp.send_message(message)
