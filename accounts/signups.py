"""Signing up: the throttle per client address, and making an account unless its name is taken
or looks like one that is. The view says the same whichever happened (in `approve` mode). Once
an operator approves it, the person hears so by mail, if they gave an address."""

import logging
import smtplib
from collections.abc import Iterable
from datetime import timedelta

from axes.helpers import get_client_ip_address
from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.core.mail import send_mail
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
    """Mail each approved person who gave an address that they can log in now; returns how many
    mails could not be sent (logged: the approval stands either way, and the operator is told)."""
    failed = 0
    for person in people:
        if not person.email:
            continue
        context = {"username": person.get_username(), "login_url": login_url}
        try:
            send_mail(
                "Your Loop account is approved",
                render_to_string("registration/approved_mail.txt", context),
                None,  # DEFAULT_FROM_EMAIL
                [person.email],
            )
        except (OSError, smtplib.SMTPException):
            logger.exception("The approval mail to user %s could not be sent", person.pk)
            failed += 1
    return failed
