"""The worker's identity pass (every IDENTITY_CHECK_SECONDS, lease `identity`): each active user
is asked about again at the identity provider, so that a change there (a group left, operator
status taken away, the user disabled, the session revoked) reaches Lakeport within
IDENTITY_BOUND_SECONDS on every path: pages, API tokens, and the catalog's group roles.

- Active: signed in within SESSION_MAX_HOURS, or holding a live personal access token. Each is
  asked with the refresh token of their last sign-in (app/auth/provider_grant.py); the answer's
  ID token gives the groups now, and the confirmation time (`groups_checked_at`).
- A refusal (`invalid_grant`) suspends the user: their sessions end, their tokens are refused and
  their groups are none until they sign in again.
- A provider that does not answer changes nothing, until the groups' last confirmation is older
  than the bound: then they count as none (app/roles.py), and this pass empties them before that
  moment comes, so the catalog's roles follow too.
- Whenever a user's groups change here, their memberships of the groups' Lakekeeper roles
  follow (app/warehouses/sharing.py `sync_memberships`), as at sign-in.

Why the refresh grant and not Keycloak's admin API or back-channel logout: docs/identity.md.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta

from flask import current_app
from sqlalchemy import exists, or_, update
from sqlmodel import Session, select

from app import leases, work_registry
from app.audit import service as audit
from app.auth import provider_grant
from app.db import engine, get_db
from app.models import ApiToken, User, utcnow
from app.roles import groups_from_claims

logger = logging.getLogger(__name__)

LEASE = "identity"


def revalidate() -> None:
    """One pass: ask the provider about every active user, then let unconfirmed groups lapse."""
    now = utcnow()
    for user_id in _drop_idle_grants(now):
        logger.info("user %s: no longer active; the refresh token is dropped", user_id)
    with provider_grant.http_client() as http:
        for user_id in _active_with_grant(now):
            if not leases.still_held():
                return  # the worker stops, or another took the pass over
            if not _ask_again(user_id, http):
                break  # the provider does not answer: the others wait for the next pass
    _expire_unconfirmed(now)


def _active(now):
    """The clause of users who may act now: a session possible, or a live token."""
    since = now - timedelta(hours=current_app.config["SESSION_MAX_HOURS"])
    live_token = exists().where(
        ApiToken.owner_id == User.id, ApiToken.revoked_at.is_(None), ApiToken.expires_at > now
    )
    return or_(User.last_login_at >= since, live_token)


def _active_with_grant(now) -> list[int]:
    with Session(engine()) as db:
        return list(
            db.exec(
                select(User.id).where(
                    User.refresh_token_sealed.is_not(None),
                    User.suspended_at.is_(None),
                    _active(now),
                )
            )
        )


def _drop_idle_grants(now) -> list[int]:
    """Refresh tokens of users who can no longer act are not kept (nor kept alive by asking)."""
    with Session(engine()) as db:
        ids = list(
            db.exec(select(User.id).where(User.refresh_token_sealed.is_not(None), ~_active(now)))
        )
        if ids:
            db.exec(update(User).where(User.id.in_(ids)).values(refresh_token_sealed=None))
            db.commit()
    return ids


def _ask_again(user_id: int, http) -> bool:
    """Ask the provider about one user and record its answer; False when it did not answer."""
    with Session(engine()) as db:
        user = db.get(User, user_id)
        subject, sealed = user.subject, user.refresh_token_sealed
    token = provider_grant.unseal(sealed)
    if token is None:  # sealed under another SECRET_KEY: unusable, so its groups will lapse
        _record(user_id, sealed, refresh_token_sealed=None)
        return True
    try:
        confirmation = provider_grant.confirm(subject, token, http)
    except provider_grant.ProviderRefused:
        if _record(user_id, sealed, refresh_token_sealed=None, suspended_at=utcnow(), groups="[]"):
            audit.record(
                "user.suspend",
                _user(user_id),
                owner_id=user_id,
                reason="the identity provider refused the refresh grant (invalid_grant)",
            )
            _sync_catalog(user_id)
        return True
    except provider_grant.ProviderUnavailable as error:
        logger.warning(
            "user %s: the identity provider could not confirm the groups: %s", user_id, error
        )
        return error.answered  # it answered this one: ask the others
    groups = groups_from_claims(confirmation.claims)
    before = _user(user_id).group_names
    resealed = (
        sealed
        if confirmation.refresh_token == token
        else provider_grant.seal(confirmation.refresh_token)
    )
    if (
        _record(
            user_id,
            sealed,
            refresh_token_sealed=resealed,
            groups=json.dumps(groups),
            groups_checked_at=utcnow(),
        )
        and groups != before
    ):
        audit.record(
            "user.groups_change", _user(user_id), owner_id=user_id, before=before, after=groups
        )
        _sync_catalog(user_id)
    return True


def _record(user_id: int, sealed: str | None, **values) -> bool:
    """Write `values` unless the user signed in meanwhile (their refresh token changed): a
    sign-in's answer is newer than this pass's."""
    with Session(engine()) as db:
        changed = db.exec(
            update(User)
            .where(User.id == user_id, User.refresh_token_sealed == sealed)
            .values(**values)
        ).rowcount
        db.commit()
    return changed == 1


def _expire_unconfirmed(now) -> None:
    """Empty the groups that will be older than the bound before the next pass comes."""
    config = current_app.config
    horizon = now - timedelta(
        seconds=config["IDENTITY_BOUND_SECONDS"] - config["IDENTITY_CHECK_SECONDS"]
    )
    with Session(engine()) as db:
        lapsing = list(
            db.exec(
                select(User.id, User.groups_checked_at).where(
                    User.groups != "[]",
                    or_(User.groups_checked_at.is_(None), User.groups_checked_at < horizon),
                )
            )
        )
    for user_id, checked_at in lapsing:
        with Session(engine()) as db:
            changed = db.exec(
                update(User)
                .where(
                    User.id == user_id,
                    User.groups_checked_at.is_(None)
                    if checked_at is None
                    else User.groups_checked_at == checked_at,
                )
                .values(groups="[]")
            ).rowcount
            db.commit()
        if changed:
            audit.record(
                "user.groups_expire",
                _user(user_id),
                owner_id=user_id,
                last_confirmed=checked_at.isoformat() if checked_at else None,
            )
            _sync_catalog(user_id)


def _user(user_id: int) -> User:
    db = get_db()
    db.expire_all()  # what this pass wrote in sessions of its own
    return db.get(User, user_id)


def _sync_catalog(user_id: int) -> None:
    """The user's memberships of the groups' Lakekeeper roles follow their groups now."""
    from app.warehouses import (
        sharing,  # a feature's module, imported when needed (as the worker does)
    )

    sharing.sync_memberships(_user(user_id))


work_registry.periodic_pass(
    LEASE, "IDENTITY_CHECK_SECONDS", revalidate, work_registry.FirstPass.AT_ONCE
)
