"""Changing a password from a session counts wrong old passwords like failed logins (django-axes):
someone holding a stolen session cannot guess the password for ever."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "a long enough passphrase 42"
NEW = "another long passphrase 43"


@pytest.fixture
def carol() -> User:
    return User.objects.create_user("carol", password=PASSWORD)


@pytest.fixture
def stolen(carol) -> Client:
    """Carol's session, in someone else's hands."""
    client = Client(REMOTE_ADDR="10.0.0.9")
    client.force_login(carol)
    return client


def change_password(client: Client, old: str):
    return client.post(
        "/accounts/password/", {"old_password": old, "new_password1": NEW, "new_password2": NEW}
    )


def test_wrong_old_passwords_lock_the_session_out_and_then_the_right_one_too(stolen, carol):
    for guess in range(settings.AXES_FAILURE_LIMIT - 1):
        refused = change_password(stolen, f"guess {guess}")
        assert refused.status_code == 200
        assert "Your old password was entered incorrectly" in refused.text
    locked = change_password(stolen, "one guess too many")
    assert locked.status_code == 429
    assert "Too many failed" in locked.text
    assert change_password(stolen, PASSWORD).status_code == 429
    carol.refresh_from_db()
    assert carol.check_password(PASSWORD)
    # The failures are carol's from that address, counted with her logins: no login there either.
    login = Client(REMOTE_ADDR="10.0.0.9").post(
        "/accounts/login/", {"username": "carol", "password": PASSWORD}
    )
    assert login.status_code == 429


def test_after_the_cool_off_the_right_old_password_changes_it(stolen, carol):
    for guess in range(settings.AXES_FAILURE_LIMIT):
        change_password(stolen, f"guess {guess}")
    assert change_password(stolen, PASSWORD).status_code == 429
    AccessAttempt.objects.update(
        attempt_time=AccessAttempt.objects.get().attempt_time
        - settings.AXES_COOLOFF_TIME
        - timedelta(seconds=1)
    )
    assert change_password(stolen, PASSWORD).url == "/accounts/password/done/"
    carol.refresh_from_db()
    assert carol.check_password(NEW)


def test_a_right_old_password_under_the_limit_changes_it(stolen, carol):
    for guess in range(settings.AXES_FAILURE_LIMIT - 1):
        change_password(stolen, f"guess {guess}")
    assert change_password(stolen, PASSWORD).url == "/accounts/password/done/"
    carol.refresh_from_db()
    assert carol.check_password(NEW)


def test_the_admins_own_password_change_is_counted_the_same(carol):
    User.objects.filter(pk=carol.pk).update(is_staff=True)
    stolen = Client(REMOTE_ADDR="10.0.0.9")
    stolen.force_login(carol)
    for guess in range(settings.AXES_FAILURE_LIMIT - 1):
        refused = stolen.post(
            "/admin/password_change/",
            {"old_password": f"guess {guess}", "new_password1": NEW, "new_password2": NEW},
        )
        assert refused.status_code == 200
    form = {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW}
    assert (
        stolen.post("/admin/password_change/", form | {"old_password": "last"}).status_code == 429
    )
    assert stolen.post("/admin/password_change/", form).status_code == 429
    carol.refresh_from_db()
    assert carol.check_password(PASSWORD)


def test_the_password_pages_are_loops_not_the_admins(carol):
    client = Client()
    client.force_login(carol)
    page = client.get("/accounts/password/")
    assert "registration/card.html" in [template.name for template in page.templates]
    assert "admin/base.html" not in [template.name for template in page.templates]
    done = client.post(
        "/accounts/password/",
        {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW},
        follow=True,
    )
    assert "Your password is changed." in done.text
