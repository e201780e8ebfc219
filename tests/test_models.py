import pytest
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from app.models import User


def test_user_is_unique_per_issuer_and_subject(db_engine):
    with Session(db_engine) as db:
        db.add(User(issuer="https://idp", subject="alice"))
        db.add(User(issuer="https://other-idp", subject="alice"))
        db.commit()
        db.add(User(issuer="https://idp", subject="alice"))
        with pytest.raises(IntegrityError):
            db.commit()


def test_display_name_falls_back_to_email_then_subject():
    assert User(issuer="i", subject="s", name="Alice", email="a@x").display_name == "Alice"
    assert User(issuer="i", subject="s", email="a@x").display_name == "a@x"
    assert User(issuer="i", subject="s").display_name == "s"
