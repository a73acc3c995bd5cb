"""What every request and page goes through first: a form body Django cannot read is refused
with the reason, every page gets its Content-Security-Policy, completed per request, whatever
an authenticated request is answered with gets `Cache-Control: private, no-store`, and a request
that finds the database not answering gets a 503 page saying so."""

import sys
from collections.abc import Callable
from typing import Any

from csp.constants import UNSAFE_INLINE
from csp.middleware import CSPMiddleware, PolicyParts
from django.core.exceptions import BadRequest, DisallowedHost, SuspiciousOperation
from django.core.signals import got_request_exception
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseBase
from django.http.multipartparser import MultiPartParserError
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.cache import patch_cache_control
from django.utils.deprecation import MiddlewareMixin

from agent.connections import database_unreachable

RETRY_AFTER_SECONDS = 5


class ContentSecurityPolicyMiddleware(CSPMiddleware):
    """django-csp's policy from settings, plus what only the request can tell: the socket's own
    ws:/wss: origin (older browsers do not count it as 'self'), and, on the admin's pages alone,
    the inline <style> blocks the admin's templates carry. Scripts stay 'self' everywhere."""

    def get_policy_parts(
        self, request: HttpRequest, response: HttpResponseBase, report_only: bool = False
    ) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        extra: dict[str, list[str]] = {}
        if origin := socket_origin(request):
            extra["connect-src"] = [origin]
        if request.path.startswith(reverse("admin:index")):
            extra["style-src"] = [UNSAFE_INLINE]
        parts.update = {**(parts.update or {}), **extra}
        return parts


def socket_origin(request: HttpRequest) -> str:
    """The origin of this site's websocket as the page reached it, or "" for a host Django
    refuses (that response is an error page, which opens no socket)."""
    try:
        host = request.get_host()
    except DisallowedHost:
        return ""
    return f"{'wss' if request.is_secure() else 'ws'}://{host}"


class PrivatePagesMiddleware(MiddlewareMixin):
    """A page made for a logged-in person is never stored by a browser or a shared cache: after
    logout, Back or another user of the same proxy must not see it."""

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        user = getattr(request, "user", None)  # absent when a middleware above answered first
        if user is not None and user.is_authenticated:
            patch_cache_control(response, private=True, no_store=True)
        return response


class UnreadableFormMiddleware(MiddlewareMixin):
    """A POST whose form body cannot be parsed (a charset other than UTF-8, a broken multipart
    body, too many fields) is answered 400 with the reason here, before the CSRF check or a view
    reads it. Left to them, the error page read the body again (in DEBUG, to show the form), and
    that second failure was a 500. A view marked `streams_uploads` (workspace.uploads) parses its
    own body, streaming each file to disk, and answers a broken one itself."""

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., HttpResponseBase],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        if request.method != "POST" or getattr(view_func, "streams_uploads", False):
            return None
        try:
            request.POST  # noqa: B018 (parsed once here; Django keeps the result)
        except (BadRequest, SuspiciousOperation, MultiPartParserError) as error:
            return HttpResponseBadRequest(
                f"The form could not be read: {error}\n", content_type="text/plain; charset=utf-8"
            )
        return None


OUTAGE = "_loop_database_outage"  # set on a request that met an unreachable database


class DatabaseOutageMiddleware:
    """A request that finds the database not answering (a restart, a crash, a server being
    started again) is answered 503 with a page that says so, not a traceback, and sooner or later
    the next request works: each request connects afresh, or health-checks a kept connection.

    The database may fail in a view, or in a middleware below this one (a session read, a user
    looked up for a response header). Django turns each of those into a 500 response on the spot
    and only its `got_request_exception` signal sees the exception, so the signal marks the request
    and this middleware, near the top of the list, replaces the 500 with the 503."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        got_request_exception.connect(note_outage, dispatch_uid="loop-database-outage")

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if getattr(request, OUTAGE, False):
            return outage_page(request)
        return response


def note_outage(sender: object, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """Sent while Django handles the request's exception: sys.exc_info() is that exception."""
    if request is not None and database_unreachable(sys.exc_info()[1]):
        setattr(request, OUTAGE, True)


def outage_page(request: HttpRequest) -> HttpResponse:
    """Rendered without the request's context processors: they would read the database."""
    page = render_to_string("503.html", {"path": request.get_full_path()})
    response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    patch_cache_control(response, no_store=True)
    return response
