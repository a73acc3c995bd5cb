"""mozilla-django-oidc's two views with the provider's endpoints from discovery and every way a
sign-in can fail ending on the login page, saying what happened: the provider refused or was
unreachable, the sign-in link was used already (its state is consumed at the first use, so a
replayed callback is refused), the token did not check, or Loop refused the person."""

import logging
from typing import Any
from urllib.parse import parse_qsl

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.decorators import method_decorator
from mozilla_django_oidc import views as oidc_views  # type: ignore[import-untyped] # no types shipped

from identity import discovery
from identity.signin import SignInRefused

logger = logging.getLogger(__name__)

UNREACHABLE = (
    "{name} could not be reached to sign you in ({error}). Try again in a moment; if it "
    "goes on, tell an operator."
)
NOT_VERIFIED = "The sign-in from {name} could not be verified, so it was refused. Sign in again."
STALE = (
    "That sign-in link was already used or has expired, so it was refused. Sign in again "
    "from this page."
)
PROVIDER_SAID = "{name} did not sign you in: {reason}"


def refused(request: HttpRequest, message: str) -> HttpResponse:
    messages.error(request, message)
    return redirect("login")


@method_decorator(login_not_required, name="dispatch")
class SignInStart(oidc_views.OIDCAuthenticationRequestView):  # type: ignore[misc] # untyped base
    """Sends the browser to the provider's authorization endpoint (state, nonce and the PKCE
    challenge kept in the session by mozilla's view)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        oidc_views.View.__init__(self, *args, **kwargs)  # endpoints are read at the request
        self.OIDC_RP_CLIENT_ID = settings.LOOP_OIDC_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            self.OIDC_OP_AUTH_ENDPOINT = discovery.provider().authorization_endpoint
        except discovery.DiscoveryError as error:
            logger.error("Provider sign-in: %s", error)
            return refused(request, UNREACHABLE.format(name=settings.LOOP_OIDC_NAME, error=error))
        response: HttpResponse = super().get(request)
        return response

    def get_extra_params(self, request: HttpRequest) -> dict[str, str]:
        return dict(parse_qsl(settings.LOOP_OIDC_AUTH_PARAMS))


@method_decorator(login_not_required, name="dispatch")
class SignInCallback(oidc_views.OIDCAuthenticationCallbackView):  # type: ignore[misc] # untyped base
    """Where the provider sends the browser back. The state is taken out of the session before
    anything else, so a callback works once."""

    def get(self, request: HttpRequest) -> HttpResponse:
        name = settings.LOOP_OIDC_NAME
        state = request.GET.get("state", "")
        if not consume_state(request, state):
            return refused(request, STALE)
        if error := request.GET.get("error"):
            reason = request.GET.get("error_description") or error
            return refused(request, PROVIDER_SAID.format(name=name, reason=reason[:300]))
        try:
            response: HttpResponse = super().get(request)
        except SignInRefused as refusal:
            return refused(request, str(refusal))
        except (discovery.DiscoveryError, requests.RequestException) as error:
            logger.error("Provider sign-in: %s", error)
            return refused(request, UNREACHABLE.format(name=name, error=error))
        except SuspiciousOperation as error:
            logger.warning("Provider sign-in refused: %s", error)
            return refused(request, NOT_VERIFIED.format(name=name))
        return response

    def login_failure(self) -> HttpResponse:
        return refused(self.request, NOT_VERIFIED.format(name=settings.LOOP_OIDC_NAME))


def consume_state(request: HttpRequest, state: str) -> bool:
    """Whether `state` is one this session sent; mozilla's view then reads it from
    `oidc_states` and deletes it. An error answer's state is deleted here, as it ends there."""
    states = request.session.get("oidc_states") or {}
    if not state or state not in states:
        return False
    if request.GET.get("error"):
        del states[state]
        request.session["oidc_states"] = states
    return True
