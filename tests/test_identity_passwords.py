"""LOOP_PASSWORD_LOGIN: `operators` lets only staff sign in with a password (the break-glass),
`off` nobody, on the login page and the console's alike, saying why to whoever gave a right
password and nothing new to whoever did not; the page hides what it refuses. And `manage.py
check` refuses a configuration that cannot work (identity.E00x)."""

import pytest
from django.contrib.auth.models import User

from tests.conftest import PASSWORD
from tests.test_settings import PRODUCTION

pytestmark = pytest.mark.django_db

OPERATORS_ONLY = "Only operators may sign in with a password"
TURNED_OFF = "Signing in with a password is turned off"
WRONG = "Please enter a correct username and password"


@pytest.fixture
def staff():
    return User.objects.create_user("root", password=PASSWORD, is_staff=True, is_superuser=True)


def log_in(client, username: str, password: str = PASSWORD, path: str = "/accounts/login/"):
    return client.post(path, {"username": username, "password": password})


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_operators_mode_refuses_a_person_and_admits_staff(settings, client, alice, staff):
    settings.LOOP_PASSWORD_LOGIN = "operators"
    refused = log_in(client, "alice")
    assert refused.status_code == 200
    assert OPERATORS_ONLY in refused.text
    assert not signed_in(client)
    assert log_in(client, "root").status_code == 302
    assert signed_in(client)


def test_a_wrong_password_is_told_nothing_about_the_mode(settings, client, alice):
    """Which accounts are staff stays unsaid to someone who does not know the password."""
    settings.LOOP_PASSWORD_LOGIN = "operators"
    answer = log_in(client, "alice", "not the password at all")
    assert WRONG in answer.text
    assert OPERATORS_ONLY not in answer.text


def test_off_refuses_staff_too_on_both_login_pages(settings, client, staff):
    settings.LOOP_PASSWORD_LOGIN = "off"
    assert TURNED_OFF in log_in(client, "root").text
    console = log_in(client, "root", path="/admin/login/?next=/admin/")
    assert TURNED_OFF in console.text
    assert not signed_in(client)


def test_all_lets_everyone_in(settings, client, alice):
    settings.LOOP_PASSWORD_LOGIN = "all"
    assert log_in(client, "alice").status_code == 302


def test_the_login_page_shows_what_the_mode_allows(settings, client):
    settings.LOOP_PASSWORD_LOGIN = "off"
    page = client.get("/accounts/login/").text
    assert 'name="password"' not in page
    assert "turned off on this site" in page
    settings.LOOP_PASSWORD_LOGIN = "operators"
    page = client.get("/accounts/login/").text
    assert 'name="password"' in page
    assert "for operators only" in page
    assert "/accounts/signup/" not in page
    assert client.get("/accounts/signup/").status_code == 403


def test_the_provider_button_is_there_only_with_a_provider(settings, client):
    assert "Sign in with" not in client.get("/accounts/login/").text
    assert client.get("/oidc/authenticate/").status_code == 404


ISSUER_ENV = {
    "LOOP_OIDC_ISSUER": "https://sso.example.org/realms/staff",
    "LOOP_OIDC_CLIENT_ID": "loop",
    "LOOP_OIDC_CLIENT_SECRET": "a secret",
}


@pytest.mark.django_db(False)
@pytest.mark.parametrize(
    ("env", "code"),
    [
        ({"LOOP_PASSWORD_LOGIN": "sometimes"}, "identity.E001"),
        (ISSUER_ENV | {"LOOP_OIDC_ISSUER": "sso.example.org"}, "identity.E002"),
        (ISSUER_ENV | {"LOOP_OIDC_ISSUER": "https://sso.example.org/?x=1"}, "identity.E002"),
        (ISSUER_ENV | {"LOOP_OIDC_ISSUER": "http://sso.example.org"}, "identity.E003"),
        (ISSUER_ENV | PRODUCTION | {"LOOP_OIDC_ISSUER": "http://127.0.0.1:8080"}, "identity.E003"),
        ({"LOOP_PASSWORD_LOGIN": "off"}, "identity.E004"),
        (ISSUER_ENV | {"LOOP_OIDC_CLIENT_ID": ""}, "identity.E005"),
        (ISSUER_ENV | {"LOOP_OIDC_CLIENT_SECRET": ""}, "identity.E005"),
        (ISSUER_ENV | {"LOOP_OIDC_SCOPES": "email profile"}, "identity.E006"),
    ],
)
def test_check_refuses_a_malformed_configuration(manage, env, code):
    checked = manage("check", env=env)
    assert checked.returncode != 0
    assert code in checked.stderr


@pytest.mark.django_db(False)
@pytest.mark.parametrize(
    "env",
    [
        ISSUER_ENV | {"LOOP_PASSWORD_LOGIN": "operators"},
        ISSUER_ENV | {"LOOP_OIDC_ISSUER": "http://127.0.0.1:8080", "LOOP_PASSWORD_LOGIN": "off"},
    ],
)
def test_check_passes_a_sound_configuration(manage, env):
    checked = manage("check", env=env)
    assert "identity.E" not in checked.stderr
    assert checked.returncode == 0, checked.stderr
