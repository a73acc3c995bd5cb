"""The sign-up and password-change forms: Django's own, safe against guessing and look-alikes."""

from typing import Any

from django.contrib.auth import authenticate
from django.contrib.auth.forms import PasswordChangeForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest


class ThrottledPasswordChangeForm(PasswordChangeForm):
    """Django's form checks the old password itself, out of django-axes' sight, so someone
    holding a stolen session could guess it for ever. Here the check is a login attempt: a wrong
    old password counts as a failed login of that user from that address, and once locked out
    the right one is refused too, until the cool-off."""

    def __init__(self, user: Any, *args: Any, request: HttpRequest, **kwargs: Any) -> None:
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self) -> str:
        old_password = self.cleaned_data["old_password"]
        checked = authenticate(
            self.request, username=self.user.get_username(), password=old_password
        )
        if checked is None or checked.pk != self.user.pk:
            raise ValidationError(
                self.error_messages["password_incorrect"], code="password_incorrect"
            )
        return old_password
