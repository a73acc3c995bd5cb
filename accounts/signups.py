"""Signing up: the throttle per client address, and making an account unless its name is taken
or looks like one that is. The view says the same whichever happened (in `approve` mode). Once
an operator approves it, the person hears so by mail, if they gave an address."""

import logging
from collections.abc import Iterable
from datetime import timedelta

from axes.helpers import get_client_ip_address
from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.core.mail import EmailMessage, get_connection
from django.db import connection, transaction
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils import timezone

from accounts.models import SignUpAttempt
from accounts.names import look_alike

logger = logging.getLogger(__name__)

THROTTLE_WINDOW = timedelta(hours=1)
# Requests that carry no address share one budget.
UNKNOWN_ADDRESS = "0.0.0.0"  # noqa: S104


def client_address(request: HttpRequest) -> str:
    """The address django-axes counts failed logins by (so one proxy setting serves both)."""
    return get_client_ip_address(request) or UNKNOWN_ADDRESS


def may_sign_up(address: str) -> bool:
    """Count one sign-up from `address`; False once it made LOOP_SIGNUP_PER_HOUR in the last
    hour. Counted in the database under a lock per address, so any number of web processes
    share one count and two requests at once cannot both take the last place."""
    since = timezone.now() - THROTTLE_WINDOW
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"signup:{address}"])
        SignUpAttempt.objects.filter(created_at__lt=since).delete()
        if SignUpAttempt.objects.filter(address=address).count() >= settings.LOOP_SIGNUP_PER_HOUR:
            return False
        SignUpAttempt.objects.create(address=address)
    return True


def create_account(username: str, password: str, *, active: bool, email: str = "") -> User | None:
    """The new account, or None if the name is taken or looks like one that is. Either way the
    password is hashed, so the time taken does not tell which. Sign-ups are made one at a time,
    so two look-alikes asked for at once cannot both pass the comparison."""
    hashed = make_password(password)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('signup:names'))")
        if look_alike(username, User.objects.values_list("username", flat=True).iterator()):
            return None
        return User.objects.create(
            username=username, password=hashed, is_active=active, email=email
        )


def tell_approved(people: Iterable[User], login_url: str) -> int:
    """Mail each approved person who gave an address that they can log in now, over one SMTP
    session; returns how many mails were not sent. A failure is logged and ends the sending (a
    server that is down would cost a timeout per mail); the approvals stand either way, and the
    operator is told."""
    mails = [approval_mail(person, login_url) for person in people if person.email]
    sent = 0
    try:
        with get_connection() as connection:
            for mail in mails:
                sent += connection.send_messages([mail])
    except OSError:  # smtplib's errors are OSErrors too
        logger.exception("Approval mail: %d of %d sent", sent, len(mails))
    return len(mails) - sent


def approval_mail(person: User, login_url: str) -> EmailMessage:
    context = {"username": person.get_username(), "login_url": login_url}
    body = render_to_string("registration/approved_mail.txt", context)
    return EmailMessage("Your Loop account is approved", body, to=[person.email])
