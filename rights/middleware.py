"""Each request reads a person's rights once (rights.effective.read_once): the chat's page, its
checks and the run a send starts all ask rights_of."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from rights.effective import read_once


class RightsPerRequest:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with read_once():
            return self.get_response(request)
