"""LOOP_PASSWORD_LOGIN: who may sign in with a password. `all`; `operators` (staff only, the
break-glass when the provider is down); `off` (nobody). A backend placed before Django's
ModelBackend, so every password check obeys it: the login page, the console's login, and a
password confirmed elsewhere. A refused check ends the authentication (PermissionDenied); the
login forms say why (accounts.forms.LoginForm, RuledAdminAuthenticationForm)."""

from typing import Any

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest

ALL, OPERATORS, OFF = MODES = ("all", "operators", "off")


def password_refusal() -> str:
    """What a person refused a password sign-in is told, by the site's mode."""
    other_way = (
        f"Sign in with {settings.LOOP_OIDC_NAME} instead."
        if settings.LOOP_OIDC_ISSUER
        else "Ask an operator."
    )
    if settings.LOOP_PASSWORD_LOGIN == OFF:
        return f"Signing in with a password is turned off on this site. {other_way}"
    return f"Only operators may sign in with a password on this site. {other_way}"


def password_allowed(user: User | None) -> bool:
    mode = settings.LOOP_PASSWORD_LOGIN
    return mode == ALL or (mode == OPERATORS and user is not None and user.is_staff)


class PasswordRule:
    """Signs no one in itself: it refuses the password check the site's mode forbids. No
    `get_user` (nor BaseBackend's, which answers None): a backend with one is what Django's
    test client and `login()` may record in a session, and this one loads nobody."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if username is None or password is None or settings.LOOP_PASSWORD_LOGIN == ALL:
            return None
        user = User._default_manager.filter(username=username).first()
        if user is None or password_allowed(user):
            return None  # ModelBackend checks, as ever (and spends a hash on a missing name)
        if not user.check_password(password):
            raise PermissionDenied  # refused as any wrong password is: the mode tells no one
        if request is not None:
            # Told only to whoever knows the password: which accounts are staff stays unsaid.
            request.password_refused = password_refusal()  # type: ignore[attr-defined] # read by the login forms
        raise PermissionDenied(password_refusal())


def refusal_of(request: HttpRequest | None) -> str:
    """Why PasswordRule refused this request's password sign-in, or ""."""
    return str(getattr(request, "password_refused", ""))


class RuledAdminAuthenticationForm(AdminAuthenticationForm):
    """The console's login form, saying why a right password was refused (identity/admin.py
    makes it the site's)."""

    def clean(self) -> dict[str, Any]:
        try:
            return super().clean()
        except ValidationError as refused:
            if refused.code == "invalid_login" and (reason := refusal_of(self.request)):
                raise ValidationError(reason, code="password_refused") from None
            raise
