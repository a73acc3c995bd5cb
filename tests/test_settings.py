"""Settings come from the environment: safe local defaults, strict production requirements."""

import runpy
import secrets
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.conftest import PROJECT_DIR, child_environment

SETTINGS_FILE = PROJECT_DIR / "loopsite" / "settings.py"

PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "loop.example.com",
    "DATABASE_URL": "postgres://loop:secret@db.example.com:5432/loop?sslmode=require",
}


def load_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> dict[str, Any]:
    """Evaluate settings.py afresh under exactly the given environment."""
    for name, value in child_environment(LOOP_VAR_DIR=str(tmp_path), **env).items():
        monkeypatch.setenv(name, value)
    for name in ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL"):
        if name not in env:
            monkeypatch.delenv(name, raising=False)
    return runpy.run_path(str(SETTINGS_FILE))


def test_nothing_set_gives_a_local_development_site(monkeypatch, tmp_path):
    settings = load_settings(monkeypatch, tmp_path)
    assert settings["DEBUG"] is True
    assert settings["ALLOWED_HOSTS"] == ["localhost", "127.0.0.1", "[::1]"]
    assert settings["DATABASES"]["default"]["ENGINE"] == "loopsite.embedded_postgres"
    assert settings["DATABASES"]["default"]["EMBEDDED"]["DATA_DIR"] == str(tmp_path / "postgres")
    assert (
        settings["CHANNEL_LAYERS"]["default"]["BACKEND"] == "channels.layers.InMemoryChannelLayer"
    )


def test_development_secret_key_is_random_private_and_stable(monkeypatch, tmp_path):
    first = load_settings(monkeypatch, tmp_path)["SECRET_KEY"]
    second = load_settings(monkeypatch, tmp_path)["SECRET_KEY"]
    assert first == second
    assert len(first) >= 50
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    assert load_settings(monkeypatch, tmp_path / "other")["SECRET_KEY"] != first


def test_production_values_are_used(monkeypatch, tmp_path):
    settings = load_settings(monkeypatch, tmp_path, **PRODUCTION, REDIS_URL="redis://cache:6379/1")
    assert settings["DEBUG"] is False
    assert settings["SECRET_KEY"] == PRODUCTION["SECRET_KEY"]
    assert settings["ALLOWED_HOSTS"] == ["loop.example.com"]
    assert settings["SESSION_COOKIE_SECURE"]
    assert settings["CSRF_COOKIE_SECURE"]
    database = settings["DATABASES"]["default"]
    assert database["ENGINE"] == "loopsite.postgres"  # Django's, saying when its pool is exhausted
    assert (database["HOST"], database["NAME"], database["USER"]) == (
        "db.example.com",
        "loop",
        "loop",
    )
    layer = settings["CHANNEL_LAYERS"]["default"]
    assert layer["BACKEND"] == "loopsite.channel_layer.PubSubChannelLayer"
    assert layer["CONFIG"]["hosts"] == [{"address": "redis://cache:6379/1", "socket_timeout": 10}]


@pytest.mark.parametrize("missing", ["SECRET_KEY", "ALLOWED_HOSTS"])
def test_production_without_a_required_value_fails_naming_it(monkeypatch, tmp_path, missing):
    env = {name: value for name, value in PRODUCTION.items() if name != missing}
    with pytest.raises(ImproperlyConfigured, match=missing):
        load_settings(monkeypatch, tmp_path, **env)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DEBUG", "maybe"),
        ("DATABASE_URL", "mysql://db.example.com/loop"),
        ("DATABASE_URL", "postgres://db.example.com:port/loop"),
        ("DATABASE_URL", "postgres://db.example.com/loop?bogus=1"),
        ("DATABASE_URL", "postgres://db.example.com"),
        ("LOOP_TRUST_X_FORWARDED_PROTO", "sometimes"),
        ("LOOP_GROQ_REASONING_EFFORT", "none"),
    ],
)
def test_malformed_value_fails_naming_it(monkeypatch, tmp_path, name, value):
    with pytest.raises(ImproperlyConfigured, match=name):
        load_settings(monkeypatch, tmp_path, **{**PRODUCTION, name: value})


def test_database_url_query_parameters_become_connection_options(monkeypatch, tmp_path):
    settings = load_settings(monkeypatch, tmp_path, **PRODUCTION)
    database = settings["DATABASES"]["default"]
    assert database["PASSWORD"] == "secret"
    assert database["PORT"] == "5432"
    assert database["OPTIONS"]["sslmode"] == "require"


def test_production_start_without_secret_key_fails_with_its_name(manage):
    env = {name: value for name, value in PRODUCTION.items() if name != "SECRET_KEY"}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_deploy_check_is_clean_under_production_settings(manage):
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_every_app_of_loops_own_logs_at_the_configured_level():
    """The root logger only passes warnings: an app missing from LOGGING loses its INFO lines (the
    worker's "Worker ... stopped" went missing when the engine became an app of its own)."""
    from django.apps import apps
    from django.conf import settings

    own = [app.name for app in apps.get_app_configs() if Path(app.path).parent == PROJECT_DIR]
    # and the plain packages that log (the loop's own lines, the sandbox's)
    own += [package for package in ("core", "sandbox") if (PROJECT_DIR / package).is_dir()]
    assert {"agent", "engine", "workspace", "tools", "memory", "chat", "approvals"} <= set(own)
    assert {name: name in settings.LOGGING["loggers"] for name in own} == dict.fromkeys(own, True)
