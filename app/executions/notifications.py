"""Telling a user that a run ended, by webhook and/or email, from the worker only.

Who asks: a schedule for its runs, or a user for one execution they start (both carry
`NotifyFields`; `check` validates what they ask on every form and in the API). When the
scheduler pass sees a run end as asked (failure, success or both), it queues one
`Notification` per channel (unique per execution and channel). Each is
delivered in a worker thread of its own (`pending_work`), so a slow or failing receiver never
holds the scheduler up: a webhook is POSTed through the webhook policy (`WebhookPolicy` in
app/network_policy.py: never loopback, private or link-local addresses nor the portal's own
services unless the operator lists the host; resolved once, the checked address connected to; no
redirect followed) within a total deadline of DELIVERY_TIMEOUT_SECONDS, its answer's body never
read. Each call carries `X-Lakeport-Timestamp: <Unix seconds>` and `X-Lakeport-Signature:
sha256=<HMAC-SHA256 of "<timestamp>.<body>">`, so a receiver can refuse a replayed call (an old
timestamp) as well as a forged one. An email goes through LAKEPORT_SMTP_HOST to the one plain
address the asker gave, parsed by the parser smtplib reads recipients with. A failure is tried
again after a doubling backoff, MAX_ATTEMPTS times in all. The webhook's secret is derived from
the portal's key and the asker's nonce, shown to its owner once, and never stored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import smtplib
import time
from datetime import timedelta
from email.message import EmailMessage
from email.utils import getaddresses

import httpx
from flask import current_app
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, exists, select

from app.db import engine
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

SIGNATURE_HEADER = "X-Lakeport-Signature"
TIMESTAMP_HEADER = "X-Lakeport-Timestamp"
DELIVERY_TIMEOUT_SECONDS = 5.0
MAX_ATTEMPTS = 5
FIRST_BACKOFF_SECONDS = 30
NOTIFY_ON = {
    "": "Nobody",
    "failure": "When a run fails",
    "success": "When a run completes",
    "both": "When a run ends",
}
# One plain address: a dot-atom local part (no quotes, no comments) at a host name (no domain
# literal such as [127.0.0.1], which a mail server delivers to that address).
EMAIL = re.compile(
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$"
)
EMAIL_MESSAGE = "One email address, e.g. data-team@example.com (no list, no name, no [address])."
# An execution's own notifications are queued when it ends within this long (older ends were
# queued already, or ended before the worker ran: not announced days late).
RECENT_END = timedelta(days=1)


def check(values) -> dict[str, str]:
    """field → message for what is wrong in a request to be told (notify_on, webhook_url, notify_email)."""
    errors: dict[str, str] = {}
    if (values.get("notify_on") or "") not in NOTIFY_ON:
        errors["notify_on"] = "Choose when to be told."
    url, email = (
        (values.get("webhook_url") or "").strip(),
        (values.get("notify_email") or "").strip(),
    )
    if len(url) > 1000:
        errors["webhook_url"] = "At most 1,000 characters."
    elif url:
        try:
            webhook_policy().check_url(url)
        except OutboundRefused as refusal:
            errors["webhook_url"] = refusal.message
    if email and plain_address(email) is None:
        errors["notify_email"] = EMAIL_MESSAGE
    if values.get("notify_on") and not (url or email):
        errors["notify_on"] = "Give a webhook URL or an email address to be told."
    return errors


def plain_address(text: str) -> str | None:
    """`text` if it is one plain email address as smtplib reads recipients (`getaddresses`, what
    `send_message` calls on the To header), else None: "a@b.c,root" is two recipients there, a
    display name or a comment hides the address, a domain literal names any host."""
    if not text or len(text) > 254 or any(c.isspace() or ord(c) < 32 for c in text):
        return None
    if getaddresses([text]) != [("", text)] or not EMAIL.match(text):
        return None
    return text


def fields(values) -> dict:
    """The checked request as `NotifyFields` values (a fresh nonce when there is a webhook)."""
    url = (values.get("webhook_url") or "").strip()
    asked = bool(values.get("notify_on"))
    return {
        "notify_on": values.get("notify_on") or "",
        "webhook_url": url if asked else "",
        "notify_email": (values.get("notify_email") or "").strip() if asked else "",
        "webhook_nonce": secrets.token_hex(16) if url and asked else "",
    }


def webhook_secret(asker: NotifyFields) -> str:
    """The key the asker's webhook calls are signed with (derived again, never stored)."""
    label = f"{asker.id}" if isinstance(asker, Schedule) else f"execution-{asker.id}"
    message = f"lakeport-webhook:{label}:{asker.webhook_nonce}".encode()
    return hmac.new(current_app.config["SECRET_KEY"].encode(), message, hashlib.sha256).hexdigest()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """`sha256=` and the HMAC-SHA256, under the webhook's secret, of "<timestamp>.<body>"."""
    signed = str(timestamp).encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


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
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(webhook_secret(asker), timestamp, body),
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
    address = plain_address(asker.notify_email)
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
