"""Sign-up, governed by LOOP_SIGNUP: `approve` (staff activate the account), `open`, or `off`.

Loop runs code for whoever has an account, so by default a new account waits, inactive, until
staff tick "Active" on it in the admin. Logging in, out and changing a password are Django's own
views (accounts/urls.py).
"""

from typing import Any

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import UserCreationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from accounts.forms import ThrottledPasswordChangeForm

SIGNUP_MODES = ("approve", "open", "off")
# The backend a fresh account logs in with (the first one, axes, only counts failures).
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


@login_not_required
@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    mode = settings.LOOP_SIGNUP
    if mode == "off":
        return render(request, "registration/signup_closed.html", status=403)
    form = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save(commit=False)
        user.is_active = mode == "open"
        user.save()
        if mode == "open":
            login(request, user, backend=MODEL_BACKEND)
            return redirect("chat:home")
        return render(request, "registration/signup_pending.html", {"username": user.username})
    return render(request, "registration/signup.html", {"form": form, "mode": mode})


class PasswordChangeView(auth_views.PasswordChangeView):
    """Django's view, with the old password checked as a login attempt (see the form)."""

    form_class = ThrottledPasswordChangeForm

    def get_form_kwargs(self) -> dict[str, Any]:
        return super().get_form_kwargs() | {"request": self.request}
