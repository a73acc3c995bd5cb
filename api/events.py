"""(being written: a helper fills these in) A run's events over Server-Sent Events."""

from django.http import HttpRequest, HttpResponse
from ninja import Router

from api.auth import READ

router = Router(tags=["events"])


@router.get("/runs/{run_id}/events", auth=READ, url_name="run_events")
def run_events(request: HttpRequest, run_id: int) -> HttpResponse:
    raise NotImplementedError


@router.get("/runs/{run_id}/agui", auth=READ, url_name="run_agui")
def run_agui(request: HttpRequest, run_id: int) -> HttpResponse:
    raise NotImplementedError
