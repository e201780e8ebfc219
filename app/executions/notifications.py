"""Telling a user that a run ended, by webhook and/or email: what they may ask, on every form
and in the API.

Who asks: a schedule for its runs, or a user for one execution they start (both carry
`NotifyFields`; `check` validates what they ask, `fields` turns a checked request into the row's
fields). Each webhook call carries `X-Lakeport-Timestamp: <Unix seconds>` and
`X-Lakeport-Signature: sha256=<HMAC-SHA256 of "<timestamp>.<body>">` (`signature`), so a receiver
can refuse a replayed call (an old timestamp) as well as a forged one. The webhook's secret is
derived from the portal's key and the asker's nonce (`webhook_secret`), shown to its owner once,
and never stored. The worker delivers them: app/executions/delivery.py.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from email.utils import getaddresses

from flask import current_app

from app.models import (
    NotifyFields,
    Schedule,
)
from app.network_policy import OutboundRefused, webhook_policy

SIGNATURE_HEADER = "X-Lakeport-Signature"


TIMESTAMP_HEADER = "X-Lakeport-Timestamp"


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
