"""Lakeport's tables. Every change here comes with an Alembic migration in `migrations/versions/`."""
from __future__ import annotations

from datetime import datetime, timezone

from flask_login import UserMixin
from sqlalchemy import UniqueConstraint
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class User(UserMixin, SQLModel, table=True):
    """A person who signed in through the identity provider; keyed by issuer + subject."""

    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("issuer", "subject", name="uq_users_issuer_subject"),)

    id: int | None = Field(default=None, primary_key=True)
    issuer: str = Field(max_length=255)
    subject: str = Field(max_length=255)
    name: str = Field(default="", max_length=255)
    email: str = Field(default="", max_length=320)
    created_at: datetime = Field(default_factory=utcnow)
    last_login_at: datetime = Field(default_factory=utcnow)

    @property
    def display_name(self) -> str:
        return self.name or self.email or self.subject
