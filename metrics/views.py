"""/metrics, in Prometheus' text format: every process's series and the database's state."""

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from metrics.access import refusal
from metrics.collector import DatabaseState
from metrics.multiprocess import exposition


@login_not_required
@require_GET
def scrape(request: HttpRequest) -> HttpResponse:
    """Off (an empty 404, as if there were no such page) unless LOOP_METRICS_TOKEN is set; then
    refused, with no body, to whoever brings neither the token nor an allowed address."""
    token = settings.LOOP_METRICS_TOKEN
    if not token:
        return HttpResponse(status=404)
    refused = refusal(request, token, settings.LOOP_METRICS_ALLOW)
    if refused is not None:
        response = HttpResponse(status=refused)
        if refused == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body = exposition(settings.LOOP_METRICS_DIR, DatabaseState())
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
