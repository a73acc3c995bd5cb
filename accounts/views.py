"""Sign-up, governed by LOOP_SIGNUP: `approve` (staff approve the account), `open`, or `off`;
and the password change, whose old password django-axes counts like a login.

Loop runs code for whoever has an account, so by default a new account waits, inactive, until
an operator approves it on the console's sign-ups page. Sign-ups are throttled per address
(LOOP_SIGNUP_PER_HOUR), and a name that is taken or looks like one that is makes no account.
"""

from typing import Any

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from accounts import signups
from accounts.forms import SignUpForm, ThrottledPasswordChangeForm

# The backend a fresh account logs in with (the first one, axes, only counts failures).
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
# Open sign-up logs the new account in at once, so a name that is not free has to be refused.
NAME_UNAVAILABLE = "That name is taken, or looks too much like one that is. Choose another."


@login_not_required
@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    mode = settings.LOOP_SIGNUP
    if mode == "off":
        return render(request, "registration/signup_closed.html", status=403)
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if not signups.may_sign_up(signups.client_address(request)):
            context = {"per_hour": settings.LOOP_SIGNUP_PER_HOUR}
            return render(request, "registration/signup_throttled.html", context, status=429)
        username = form.cleaned_data["username"]
        user = signups.create_account(
            username, form.cleaned_data["password1"], active=mode == "open"
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
