"""The API's addresses, outside the pages' login: a request is its key's person or nobody
(api/auth.py), whatever cookie it carries."""

from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, re_path
from django.views.decorators.csrf import csrf_exempt

from api.errors import ApiError, answer
from api.main import api
from workspace.uploads import streams_uploads


def keyed(patterns: list[URLPattern | URLResolver]) -> list[URLPattern | URLResolver]:
    """The API's patterns, exempt from the pages' LoginRequiredMiddleware (a key is checked
    instead; the schema and its docs page are public), and marked as reading their own bodies
    (workspace.uploads.streams_uploads): no middleware parses a form first, so an upload streams
    each file to disk (api/files.py), and a body that cannot be read is the API's JSON refusal,
    not a page's plain-text 400."""
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            view: Callable[..., Any] = pattern.callback
            pattern.callback = streams_uploads(login_not_required(view))
    return patterns


@csrf_exempt  # it changes nothing, and a page's CSRF refusal would be HTML
def unknown(request: HttpRequest) -> HttpResponse:
    """An address under /api/v1/ that names no operation (a path no route matches, a newline
    in a file's path, say): the API's JSON 404, not a page's."""
    return answer(api, request, ApiError(404, "not_found", "No such address: see /api/v1/docs."))


patterns, app_name, namespace = api.urls
urlpatterns = keyed([*patterns, re_path(r"[\s\S]*", unknown, name="unknown")])
