"""A request's caller's span (W3C `traceparent`), made current while the request is served, so a
run it starts links to it (tracing.origins). Only where nothing else made a span current: an
OpenTelemetry instrumentation of Django, if the operator runs one, already did (its own span)."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from opentelemetry import context, propagate, trace


def caller_trace_context(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        if trace.get_current_span().get_span_context().is_valid:
            return get_response(request)
        token = context.attach(propagate.extract(request.headers))
        try:
            return get_response(request)
        finally:
            context.detach(token)

    return middleware
