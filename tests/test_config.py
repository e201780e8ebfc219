import pytest

from app import create_app
from app.config import SETTINGS, Config


def test_defaults_are_safe_and_zero_setup():
    config = Config.from_env({})
    assert config.DATABASE_URL.startswith("sqlite:///")
    assert config.LAKEKEEPER_AUDIENCE == "lakekeeper"
    assert config.uses_https is False


def test_environment_overrides_and_casts():
    config = Config.from_env(
        {
            "LAKEPORT_OIDC_TIMEOUT_SECONDS": "2.5",
            "LAKEPORT_PUBLIC_URL": "https://lakeport.example",
            "LAKEPORT_DATABASE_URL": "postgresql+psycopg://db/lakeport",
        }
    )
    assert config.OIDC_TIMEOUT_SECONDS == 2.5
    assert config.DATABASE_URL == "postgresql+psycopg://db/lakeport"
    mapping = config.flask_mapping()
    assert mapping["SESSION_COOKIE_SECURE"] is True
    assert mapping["SESSION_COOKIE_HTTPONLY"] is True
    assert mapping["SESSION_COOKIE_SAMESITE"] == "Lax"


def test_plain_http_cookies_are_not_marked_secure():
    mapping = Config.from_env({"LAKEPORT_PUBLIC_URL": "http://127.0.0.1:5000"}).flask_mapping()
    assert mapping["SESSION_COOKIE_SECURE"] is False


def test_bad_value_names_the_variable():
    with pytest.raises(ValueError, match="LAKEPORT_OIDC_TIMEOUT_SECONDS"):
        Config.from_env({"LAKEPORT_OIDC_TIMEOUT_SECONDS": "soon"})


def test_app_refuses_to_start_without_secrets():
    with pytest.raises(ValueError, match="LAKEPORT_SECRET_KEY.*LAKEPORT_OIDC_CLIENT_SECRET"):
        create_app(Config.from_env({}))


def test_vended_credentials_lifetime_must_be_within_sts_range():
    base = {"LAKEPORT_SECRET_KEY": "k", "LAKEPORT_OIDC_CLIENT_SECRET": "s"}
    assert Config.from_env(base).VENDED_CREDENTIALS_SECONDS == 900
    for refused in ("899", "43201"):
        with pytest.raises(ValueError, match="LAKEPORT_VENDED_CREDENTIALS_SECONDS"):
            Config.from_env({**base, "LAKEPORT_VENDED_CREDENTIALS_SECONDS": refused}).validate()
    Config.from_env({**base, "LAKEPORT_VENDED_CREDENTIALS_SECONDS": "3600"}).validate()


def test_deployment_files_only_use_known_settings(project_root):
    import re

    known = {setting.env for setting in SETTINGS.values()}
    for path in (project_root / "deploy").rglob("*.yaml"):
        used = set(re.findall(r"\bLAKEPORT_[A-Z_]+\b", path.read_text()))
        assert used <= known, (
            f"{path.relative_to(project_root)} sets unknown settings {used - known}"
        )


@pytest.mark.parametrize(
    "setting, value", [("LAKEPORT_CU_TASKS_PER_NODE", "10"), ("LAKEPORT_CU_DISK_GB", "0.01")]
)
def test_the_portal_refuses_to_start_with_unit_limits_that_cannot_work(setting, value):
    config = Config.from_env(
        {"LAKEPORT_SECRET_KEY": "k" * 32, "LAKEPORT_OIDC_CLIENT_SECRET": "s", setting: value}
    )
    with pytest.raises(
        ValueError, match="LAKEPORT_CU_TASKS_PER_NODE or LAKEPORT_CU_DISK_GB: .*at least"
    ):
        config.validate()
