"""Logins: Django's own views, sign-up by LOOP_SIGNUP, lockout by django-axes, login everywhere."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "a long enough passphrase 42"


@pytest.fixture
def carol():
    return User.objects.create_user("carol", password=PASSWORD)


def log_in(client: Client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(
        "/accounts/login/",
        {"username": username, "password": password},
        REMOTE_ADDR=address,
    )


def test_every_page_but_login_and_signup_needs_a_login(client):
    assert client.get("/").url == "/accounts/login/?next=/"
    assert client.get("/accounts/password/").status_code == 302
    assert client.get("/accounts/login/").status_code == 200
    assert client.get("/accounts/signup/").status_code == 200


def test_logging_in_with_the_right_password_lands_on_the_chat(client, carol):
    response = log_in(client, "carol", PASSWORD)
    assert response.status_code == 302
    assert response.url == "/"
    assert client.get("/").status_code == 200


def test_logout_is_a_post(client, carol):
    client.force_login(carol)
    assert client.get("/accounts/logout/").status_code == 405
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_a_post_without_a_csrf_token_is_refused():
    client = Client(enforce_csrf_checks=True)
    response = client.post("/accounts/login/", {"username": "carol", "password": PASSWORD})
    assert response.status_code == 403


def test_a_password_can_be_changed(client, carol):
    client.force_login(carol)
    new = "another long passphrase 43"
    response = client.post(
        "/accounts/password/",
        {"old_password": PASSWORD, "new_password1": new, "new_password2": new},
    )
    assert response.url == "/accounts/password/done/"
    carol.refresh_from_db()
    assert carol.check_password(new)


def test_five_failures_lock_out_that_user_from_that_address(client, carol):
    for _ in range(4):
        assert log_in(client, "carol", "wrong").status_code == 200
    locked = log_in(client, "carol", "wrong")
    assert locked.status_code == 429
    assert "Too many failed logins" in locked.text
    # The right password does not get through the lockout either...
    assert log_in(client, "carol", PASSWORD).status_code == 429
    # ...but the lockout is of that pair: carol from another address still gets in.
    assert log_in(Client(), "carol", PASSWORD, address="10.0.0.2").status_code == 302


def test_failures_under_the_limit_do_not_lock_out(client, carol):
    for _ in range(4):
        log_in(client, "carol", "wrong")
    assert log_in(client, "carol", PASSWORD).status_code == 302


def sign_up(client: Client, username: str = "dave"):
    return client.post(
        "/accounts/signup/",
        {"username": username, "password1": PASSWORD, "password2": PASSWORD},
    )


def test_signup_by_approval_leaves_the_account_inactive_and_says_so(client, settings):
    settings.LOOP_SIGNUP = "approve"
    response = sign_up(client)
    assert response.status_code == 200
    assert "waiting for approval" in response.text
    assert User.objects.get(username="dave").is_active is False
    assert log_in(client, "dave", PASSWORD).status_code == 200  # not let in
    User.objects.filter(username="dave").update(is_active=True)  # staff approve it
    assert log_in(client, "dave", PASSWORD).status_code == 302


def test_open_signup_logs_the_new_account_in(client, settings):
    settings.LOOP_SIGNUP = "open"
    response = sign_up(client)
    assert response.url == "/"
    assert User.objects.get(username="dave").is_active is True
    assert client.get("/").status_code == 200


def test_closed_signup_stores_nothing(client, settings):
    settings.LOOP_SIGNUP = "off"
    assert client.get("/accounts/signup/").status_code == 403
    assert sign_up(client).status_code == 403
    assert not User.objects.filter(username="dave").exists()


def test_staff_approve_waiting_accounts_from_the_admin(client, settings):
    settings.LOOP_SIGNUP = "approve"
    sign_up(Client())
    client.force_login(User.objects.create_superuser("root", password=PASSWORD))
    dave = User.objects.get(username="dave")
    client.post(
        "/admin/auth/user/", {"action": "approve", "_selected_action": [dave.pk]}, follow=True
    )
    dave.refresh_from_db()
    assert dave.is_active is True
