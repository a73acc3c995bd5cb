"""The sign-up and password-change forms: Django's own, safe against guessing and look-alikes."""

from typing import Any

from django import forms
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.forms import (
    AdminUserCreationForm,
    AuthenticationForm,
    PasswordChangeForm,
    UserChangeForm,
    UserCreationForm,
)
from django.contrib.auth.models import User
from django.contrib.auth.validators import ASCIIUsernameValidator
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from accounts.models import WAITING_FOR_APPROVAL
from accounts.names import refuse_placeholder_look_alike

NAME_HELP = "Letters a-z and A-Z, digits and @ . + - _ only; 150 characters or fewer."


WAITING_MESSAGE = (
    "Your sign-up is waiting for approval: staff approve each new account, and you can log in "
    "once they have."
)


class LoginForm(AuthenticationForm):
    """Django's login form, which says "enter a correct username and password" also to a person
    whose sign-up waits for approval, who then tries again and again. Here that person, and only
    with the right password (so nobody else learns the account exists), is told it waits."""

    def clean(self) -> dict[str, Any]:
        try:
            return super().clean()
        except ValidationError as refused:
            if refused.code == "invalid_login" and self.waits_for_approval():
                raise ValidationError(WAITING_MESSAGE, code="waiting_for_approval") from None
            # LOOP_PASSWORD_LOGIN refused a right password (identity.passwords.PasswordRule).
            if refused.code == "invalid_login" and (
                reason := getattr(self.request, "password_refused", "")
            ):
                raise ValidationError(reason, code="password_refused") from None
            raise

    def waits_for_approval(self) -> bool:
        username = self.cleaned_data.get("username") or ""
        password = self.cleaned_data.get("password") or ""
        people = get_user_model()._default_manager
        waiting = people.filter(WAITING_FOR_APPROVAL, **{people.model.USERNAME_FIELD: username})
        person = waiting.first()
        return person is not None and person.check_password(password)


class SignUpForm(UserCreationForm[User]):
    """Django's sign-up form, for ASCII names only (a well-known rule that keeps look-alikes
    from other scripts out at once), and silent on whether a name is taken: Django's form says
    so, which tells anyone which accounts exist. accounts.signups decides, and the view answers
    the same either way."""

    email = forms.EmailField(
        required=False,
        label="E-mail address (optional: for a forgotten password, and word of your approval)",
    )
    field_order = ("username", "email", "password1", "password2")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        username = self.fields["username"]
        username.validators.append(ASCIIUsernameValidator())
        username.help_text = NAME_HELP

    def clean_username(self) -> str:
        """A deleted account's placeholder name, or a look-alike of one, is refused."""
        name: str = self.cleaned_data["username"]
        refuse_placeholder_look_alike(name)
        return name

    def validate_unique(self) -> None:
        """Left to accounts.signups: the name is the only unique field a person fills in."""


class PersonCreationForm(AdminUserCreationForm[User]):
    """The admin's "Add user" form: an operator cannot make a placeholder look-alike either."""

    def clean_username(self) -> str:
        name = super().clean_username()
        refuse_placeholder_look_alike(name)
        return name


class PersonChangeForm(UserChangeForm[User]):
    """The admin's account form: a name changed to a placeholder look-alike is refused; a
    placeholder's own name, left as it is, is not a change."""

    def clean_username(self) -> str:
        name: str = self.cleaned_data["username"]
        if "username" in self.changed_data:
            refuse_placeholder_look_alike(name)
        return name


class ThrottledPasswordChangeForm(PasswordChangeForm):
    """Django's form checks the old password itself, out of django-axes' sight, so someone
    holding a stolen session could guess it for ever. Here the check is a login attempt: a wrong
    old password counts as a failed login of that user from that address, and once locked out
    the right one is refused too, until the cool-off."""

    def __init__(self, user: Any, *args: Any, request: HttpRequest, **kwargs: Any) -> None:
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self) -> str:
        old_password: str = self.cleaned_data["old_password"]
        checked = authenticate(
            self.request, username=self.user.get_username(), password=old_password
        )
        if checked is None or checked.pk != self.user.pk:
            raise ValidationError(
                self.error_messages["password_incorrect"], code="password_incorrect"
            )
        return old_password
