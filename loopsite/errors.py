"""The site's 400 page: it says what was wrong when Loop refused a malformed value of the address
(workspace.query_string); any other bad request keeps generic words, as Django's own page does
(its reasons may name internals)."""

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from workspace.query_string import MalformedQuery

GENERIC = "The request could not be read."


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Drawn without the request, as Django's is: a request refused for its Host header would
    raise again in whatever reads it."""
    reason = str(exception) if isinstance(exception, MalformedQuery) else GENERIC
    return HttpResponse(render_to_string("400.html", {"reason": reason}), status=400)
