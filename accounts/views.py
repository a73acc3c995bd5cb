"""Sign-up, governed by LOOP_SIGNUP: `approve` (staff approve the account), `open`, or `off`;
the password change, whose old password django-axes counts like a login; and a person's own data
(accounts/my_data.py): its export as one zip, sent as it is made (accounts/exports.py says when one
may start), and deleting the account after a password check.

Loop runs code for whoever has an account, so by default a new account waits, inactive, until
an operator approves it on the console's sign-ups page. Sign-ups are throttled per address
(LOOP_SIGNUP_PER_HOUR), and a name that is taken or looks like one that is makes no account.
"""

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import authenticate, login, logout
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts import signups
from accounts.exports import ExportRefused, export_stream, start_export
from accounts.forms import SignUpForm, ThrottledPasswordChangeForm
from accounts.my_data import AccountNotDeleted, delete_account, export_chunks, held_by
from workspace.requests import SignedInRequest

# The backend a fresh account logs in with (the first one, axes, only counts failures).
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
# Open sign-up logs the new account in at once, so a name that is not free has to be refused.
NAME_UNAVAILABLE = "That name is taken, or looks too much like one that is. Choose another."


@login_not_required
@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    mode = settings.LOOP_SIGNUP
    # Password accounts are made only where passwords sign people in (LOOP_PASSWORD_LOGIN).
    if mode == "off" or settings.LOOP_PASSWORD_LOGIN in ("operators", "off"):
        return render(request, "registration/signup_closed.html", status=403)
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if not signups.may_sign_up(signups.client_address(request)):
            context = {"per_hour": settings.LOOP_SIGNUP_PER_HOUR}
            return render(request, "registration/signup_throttled.html", context, status=429)
        username = form.cleaned_data["username"]
        user = signups.create_account(
            username,
            form.cleaned_data["password1"],
            active=mode == "open",
            email=form.cleaned_data["email"],
        )
        if mode == "approve":
            # The same page whether the account was made or its name was not free: which names
            # exist is not the visitor's to learn.
            return render(request, "registration/signup_pending.html", {"username": username})
        if user is not None:
            login(request, user, backend=MODEL_BACKEND)
            return redirect("chat:home")
        form.add_error("username", NAME_UNAVAILABLE)
    return render(request, "registration/signup.html", {"form": form, "mode": mode})


class PasswordChangeView(auth_views.PasswordChangeView):
    """Django's view, with the old password checked as a login attempt (see the form)."""

    form_class = ThrottledPasswordChangeForm
    # Not Django's name for it: django.contrib.admin ships a template of that name, and comes
    # first in INSTALLED_APPS, so the site's password page would be drawn as the admin's.
    template_name = "registration/password_change.html"

    def get_form_kwargs(self) -> dict[str, Any]:
        return super().get_form_kwargs() | {"request": self.request}


class DeleteAccountForm(forms.Form):
    """The password, checked as a login attempt (as the password change does), so that a
    stolen session cannot guess it for ever before deleting the account."""

    password = forms.CharField(
        label="Your password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )

    def __init__(self, *args: Any, request: SignedInRequest, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request = request

    def clean_password(self) -> str:
        password: str = self.cleaned_data["password"]
        user = self.request.user
        checked = authenticate(self.request, username=user.get_username(), password=password)
        if checked is None or checked.pk != user.pk:
            raise ValidationError("That is not your password. Nothing was deleted.")
        return password


def my_data_page(
    request: SignedInRequest, form: DeleteAccountForm, refused: ExportRefused | None = None
) -> HttpResponse:
    context = {"form": form, "held": held_by(request.user), "export_refused": refused}
    response = render(request, "accounts/my_data.html", context)
    if refused is not None:
        response.status_code = refused.status
        if refused.retry_after is not None:
            response["Retry-After"] = str(refused.retry_after)
    return response


@require_GET
def my_data(request: SignedInRequest) -> HttpResponse:
    return my_data_page(request, DeleteAccountForm(request=request))


@require_POST
def export(request: SignedInRequest) -> HttpResponseBase:
    """A POST with the CSRF token, so no other site can start one. The zip is sent as it is
    made; the export's hold is let go when the response closes."""
    try:
        held = start_export(request.user)
    except ExportRefused as refused:
        return my_data_page(request, DeleteAccountForm(request=request), refused)
    stream = export_stream(request, export_chunks(request.user), held)
    response = StreamingHttpResponse(stream, content_type="application/zip")
    name = f"loop-data-{timezone.now():%Y-%m-%d}.zip"
    response["Content-Disposition"] = content_disposition_header(True, name)
    return response


@require_POST
def delete(request: SignedInRequest) -> HttpResponse:
    form = DeleteAccountForm(request.POST, request=request)
    if not form.is_valid():
        return my_data_page(request, form)
    user = request.user
    account_id = user.pk
    try:
        delete_account(user, form.cleaned_data["password"])
    except AccountNotDeleted as refused:
        form.add_error(None, str(refused))
        return my_data_page(request, form)
    # Django clears a deleted instance's pk; the logout signal finds the account's sockets by
    # it (chat.consumers), which close at once: this session's, and every other device's,
    # which now finds its session logs no one in.
    user.pk = account_id
    logout(request)
    return redirect("account_deleted")


@login_not_required
@require_GET
def deleted(request: HttpRequest) -> HttpResponse:
    return render(request, "accounts/account_deleted.html")
