"""Forgotten passwords: Django's own reset (a signed, single-use link sent by mail), throttled
per client address and per e-mail address asked about, and saying the same whether or not the
address belongs to anyone.

Past LOOP_PASSWORD_RESETS_PER_HOUR from one client address, the page says to wait (that says
nothing about any account). Past as many asks for one e-mail address, from anywhere, the page
is the usual "sent" page and no more mail goes out: nobody can fill a stranger's mailbox."""

import hashlib
import threading
import unicodedata
from datetime import timedelta
from enum import Enum
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import PasswordResetForm
from django.db import connection, transaction
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse_lazy
from django.utils import timezone

from accounts.models import PasswordResetAttempt
from accounts.signups import client_address

THROTTLE_WINDOW = timedelta(hours=1)


class ResetVerdict(Enum):
    SEND = "send"
    TOO_MANY_FROM_HERE = "too many from this client address"
    ENOUGH_MAIL = "enough mail to this e-mail address"


def email_digest(email: str) -> str:
    """One digest for every spelling of an address that Django's form sends the same account's
    mail to: compared as it compares them (NFKC, case folded), else a Greek final sigma or
    a letter's case would each count as another mailbox."""
    folded = unicodedata.normalize("NFKC", email.strip()).casefold()
    return hashlib.sha256(folded.encode()).hexdigest()


def may_reset(address: str, email: str) -> ResetVerdict:
    """Count one reset asked from `address` for `email`, and say whether its mail may go. Counted
    in the database under a lock, so every web process shares one count (as sign-ups are)."""
    since = timezone.now() - THROTTLE_WINDOW
    limit = settings.LOOP_PASSWORD_RESETS_PER_HOUR
    digest = email_digest(email)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('password-reset'))")
        PasswordResetAttempt.objects.filter(created_at__lt=since).delete()
        if PasswordResetAttempt.objects.filter(address=address).count() >= limit:
            return ResetVerdict.TOO_MANY_FROM_HERE
        PasswordResetAttempt.objects.create(address=address, email_digest=digest)
        if PasswordResetAttempt.objects.filter(email_digest=digest).count() > limit:
            return ResetVerdict.ENOUGH_MAIL
    return ResetVerdict.SEND


class ResetForm(PasswordResetForm):
    """Django's form, its field named as people say it, sending its mail from a thread of its
    own: waiting for the SMTP exchange would make the answer slower for an address that has an
    account, and tell by its time which addresses do."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["email"].label = "Your e-mail address"

    def send_mail(self, *args: Any, **kwargs: Any) -> None:
        # Django's send_mail logs a failure itself; the person may ask again.
        send = super().send_mail
        threading.Thread(target=send, args=args, kwargs=kwargs, name="reset-mail").start()


class PasswordResetView(auth_views.PasswordResetView):
    """Django's view (which sends mail only to an active account with that address, and shows
    the same page either way), throttled. Template names of Loop's own: django.contrib.admin
    ships Django's, and comes first in INSTALLED_APPS."""

    form_class = ResetForm
    template_name = "registration/reset_ask.html"
    email_template_name = "registration/reset_mail.txt"
    subject_template_name = "registration/reset_mail_subject.txt"
    success_url = reverse_lazy("password_reset_done")

    def form_valid(self, form: PasswordResetForm) -> HttpResponse:
        verdict = may_reset(client_address(self.request), form.cleaned_data["email"])
        if verdict is ResetVerdict.TOO_MANY_FROM_HERE:
            context = {"per_hour": settings.LOOP_PASSWORD_RESETS_PER_HOUR}
            return render(self.request, "registration/reset_throttled.html", context, status=429)
        if verdict is ResetVerdict.ENOUGH_MAIL:
            return HttpResponseRedirect(self.get_success_url())
        return super().form_valid(form)


class PasswordResetDoneView(auth_views.PasswordResetDoneView):
    template_name = "registration/reset_sent.html"


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = "registration/reset_new_password.html"
    success_url = reverse_lazy("password_reset_complete")

    def get_user(self, uidb64: str) -> Any:
        """The link's account while it may still log in: Django's token does not change when an
        operator deactivates an account, so a link mailed before would still set its password."""
        user = super().get_user(uidb64)
        return user if user is not None and user.is_active else None


class PasswordResetCompleteView(auth_views.PasswordResetCompleteView):
    template_name = "registration/reset_complete.html"
