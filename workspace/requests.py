"""The request a signed-in person's page receives, typed as the middleware leaves it: every view
is behind LoginRequiredMiddleware (but those marked login_not_required), so `user` is a person,
never the anonymous one; django-htmx's middleware adds `htmx`. Here, in the lowest layer that
serves pages (the Files panel), so every app's views can say so."""

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxRequest(HttpRequest):
    """Any request: django-htmx's middleware says whether htmx sent it."""

    htmx: HtmxDetails


class SignedInRequest(HtmxRequest):
    """A request to a view behind the login: its person is signed in."""

    user: User


def person_of(request: HttpRequest) -> User:
    """The signed-in person of a request only such a person reaches (a page behind the login, an
    admin page, which lets in none but staff): as the type says, never the anonymous one."""
    if not isinstance(request.user, User):
        raise PermissionDenied
    return request.user
