"""Mail, through a real SMTP server: a forgotten password reset by the link a person is sent,
the same answer for an address no account has (and no mail), resets throttled, the mail that says
an operator approved a sign-up, and `manage.py createuser` making a login that works."""

from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import PasswordResetAttempt
from tests.conftest import PASSWORD, wait_for
from tests.mail_server import body, link_in, mailbox  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

RESET = "/accounts/password/reset/"
NEW_PASSWORD = "a brand new passphrase 77"


def ask_reset(email: str, address: str = "10.0.0.1"):
    return Client(REMOTE_ADDR=address).post(RESET, {"email": email}, follow=True)


def logs_in(username: str, password: str) -> bool:
    response = Client().post("/accounts/login/", {"username": username, "password": password})
    return response.status_code == 302 and response["Location"] == "/"


def test_the_link_in_the_mail_sets_a_new_password_that_logs_in(mailbox):  # noqa: F811
    User.objects.create_user("alice", "alice@example.com", PASSWORD)
    sent = ask_reset("alice@example.com")
    assert "Check your mail" in sent.text
    (mail,) = wait_for(lambda: mailbox.to("alice@example.com"), "the reset mail")
    assert "alice" in body(mail)
    link = urlsplit(link_in(mail))
    person = Client()
    form = person.get(link.path, follow=True)
    assert "Choose a new password" in form.text
    done = person.post(
        form.request["PATH_INFO"],
        {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
        follow=True,
    )
    assert "Your new password is set" in done.text
    assert logs_in("alice", NEW_PASSWORD)
    assert not logs_in("alice", PASSWORD)
    again = Client().get(link.path, follow=True)
    assert "This link no longer works" in again.text  # a link works once


def test_a_link_mailed_before_the_account_was_deactivated_no_longer_works(mailbox):  # noqa: F811
    alice = User.objects.create_user("alice", "alice@example.com", PASSWORD)
    ask_reset("alice@example.com")
    (mail,) = wait_for(lambda: mailbox.to("alice@example.com"), "the reset mail")
    User.objects.filter(pk=alice.pk).update(is_active=False)  # an operator shuts the account
    link = urlsplit(link_in(mail))
    form = Client().get(link.path, follow=True)
    assert "This link no longer works" in form.text
    alice.refresh_from_db()
    assert alice.check_password(PASSWORD)


def test_an_unknown_address_gets_the_same_page_and_no_mail(mailbox):  # noqa: F811
    User.objects.create_user("alice", "alice@example.com", PASSWORD)
    unknown, known = ask_reset("nobody@example.com"), ask_reset("alice@example.com")
    assert known.redirect_chain == unknown.redirect_chain
    assert known.status_code == unknown.status_code == 200
    assert known.text == unknown.text
    wait_for(lambda: mailbox.to("alice@example.com"), "the reset mail")  # asked for after
    assert mailbox.to("nobody@example.com") == []


def test_the_answer_does_not_wait_for_the_mail_server(mailbox):  # noqa: F811
    """Were it to, an address with an account would be answered later than one without."""
    User.objects.create_user("alice", "alice@example.com", PASSWORD)
    mailbox.accepting.clear()
    try:
        assert "Check your mail" in ask_reset("alice@example.com").text
        assert mailbox.received == []  # answered while the mail server still holds it
    finally:
        mailbox.accepting.set()
    wait_for(lambda: mailbox.to("alice@example.com"), "the reset mail")


def test_a_sign_up_waiting_for_approval_gets_no_reset_mail(mailbox):  # noqa: F811
    User.objects.create_user("newcomer", "new@example.com", PASSWORD, is_active=False)
    assert "Check your mail" in ask_reset("new@example.com").text
    assert mailbox.received == []


def test_resets_are_throttled_per_client_address(mailbox, settings):  # noqa: F811
    settings.LOOP_PASSWORD_RESETS_PER_HOUR = 2
    for n in range(2):
        assert ask_reset(f"someone{n}@example.com").status_code == 200
    flooded = ask_reset("someone-else@example.com")
    assert flooded.status_code == 429
    assert "Too many password resets" in flooded.text
    assert ask_reset("someone-else@example.com", address="10.0.0.2").status_code == 200


def test_one_mailbox_gets_a_few_reset_mails_an_hour_whoever_asks(mailbox, settings):  # noqa: F811
    settings.LOOP_PASSWORD_RESETS_PER_HOUR = 2
    User.objects.create_user("alice", "alice@example.com", PASSWORD)
    answers = [ask_reset("alice@example.com", address=f"10.0.1.{n}") for n in range(4)]
    assert {answer.text for answer in answers} == {answers[0].text}  # the same page to each
    wait_for(lambda: len(mailbox.to("alice@example.com")) == 2, "two reset mails")
    assert PasswordResetAttempt.objects.count() == 4


def test_the_login_page_links_to_the_reset():
    assert RESET in Client().get("/accounts/login/").text


def test_an_approved_sign_up_hears_so_by_mail(mailbox, settings, client, operator):  # noqa: F811
    settings.LOOP_SIGNUP = "approve"
    Client(REMOTE_ADDR="10.0.0.9").post(
        "/accounts/signup/",
        {
            "username": "newcomer",
            "email": "new@example.com",
            "password1": PASSWORD,
            "password2": PASSWORD,
        },
    )
    newcomer = User.objects.get(username="newcomer", is_active=False)
    assert newcomer.email == "new@example.com"
    assert mailbox.received == []  # nothing before an operator approves
    approved = client.post(
        "/admin/accounts/signup/",
        {"action": "approve", "_selected_action": [newcomer.pk]},
        follow=True,
    )
    assert "Approved 1 sign-up." in approved.text
    (mail,) = mailbox.to("new@example.com")
    assert mail["Subject"] == "Your Loop account is approved"
    assert urlsplit(link_in(mail)).path == "/accounts/login/"
    assert logs_in("newcomer", PASSWORD)


def test_an_approval_stands_when_its_mail_cannot_be_sent(settings, client, operator):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 1  # nothing listens there
    newcomer = User.objects.create_user("newcomer", "new@example.com", PASSWORD, is_active=False)
    approved = client.post(
        "/admin/accounts/signup/",
        {"action": "approve", "_selected_action": [newcomer.pk]},
        follow=True,
    )
    assert "1 could not be told by mail" in approved.text
    newcomer.refresh_from_db()
    assert newcomer.is_active


@pytest.mark.django_db(transaction=True)
def test_createuser_makes_an_approved_staff_login(manage, child_database_url):
    made = manage(
        *("createuser", "carol", "--email", "carol@example.com", "--staff", "--approve"),
        "--noinput",
        env={"DATABASE_URL": child_database_url, "DJANGO_SUPERUSER_PASSWORD": PASSWORD},
    )
    assert made.returncode == 0, made.stderr
    assert "can log in now" in made.stdout
    carol = User.objects.get(username="carol")
    assert (carol.email, carol.is_active, carol.is_staff, carol.is_superuser) == (
        "carol@example.com",
        True,
        True,
        False,
    )
    assert logs_in("carol", PASSWORD)


@pytest.mark.django_db(transaction=True)
def test_createuser_without_approve_makes_a_sign_up_that_waits(manage, child_database_url):
    made = manage(
        "createuser",
        "dave",
        "--noinput",
        env={"DATABASE_URL": child_database_url, "DJANGO_SUPERUSER_PASSWORD": PASSWORD},
    )
    assert made.returncode == 0, made.stderr
    dave = User.objects.get(username="dave")
    assert (dave.is_active, dave.is_staff) == (False, False)
    waiting = Client().post("/accounts/login/", {"username": "dave", "password": PASSWORD})
    assert "waiting for approval" in waiting.text


@pytest.mark.django_db(transaction=True)
def test_createuser_refuses_what_a_sign_up_would(manage, child_database_url):
    User.objects.create_user("alice", password=PASSWORD)
    env = {"DATABASE_URL": child_database_url, "DJANGO_SUPERUSER_PASSWORD": PASSWORD}
    look_alike = manage("createuser", "aIice", "--approve", "--noinput", env=env)
    assert look_alike.returncode != 0
    assert "looks too much like one that is" in look_alike.stderr
    weak = manage(
        "createuser",
        "erin",
        "--noinput",
        env={**env, "DJANGO_SUPERUSER_PASSWORD": "erin"},
    )
    assert weak.returncode != 0
    no_password = manage(
        "createuser", "frank", "--noinput", env={**env, "DJANGO_SUPERUSER_PASSWORD": ""}
    )
    assert "DJANGO_SUPERUSER_PASSWORD" in no_password.stderr
    assert not User.objects.filter(username__in=["aIice", "erin", "frank"]).exists()
