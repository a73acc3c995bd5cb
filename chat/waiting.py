"""The "Waiting for you" page: every tool call that waits for the person's decision, across
their conversations, oldest first, each linked to the run in its conversation where the person
decides. Its queries are as many for a hundred calls as for one."""

from dataclasses import dataclass

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agent.approvals import waiting_for
from agent.core.text import excerpt
from agent.models import ApprovalRequest
from workspace.query_string import query_int

PER_PAGE = 50
# How much of a call's arguments the list shows: the card in the conversation shows them all.
ARGUMENTS_WIDTH = 160


@dataclass(frozen=True)
class WaitingCall:
    request: ApprovalRequest
    arguments: str


@require_GET
def waiting(request: HttpRequest) -> HttpResponse:
    page = Paginator(waiting_for(request.user), PER_PAGE).get_page(query_int(request, "p"))
    calls = [WaitingCall(call, excerpt(call.arguments, ARGUMENTS_WIDTH)) for call in page]
    return render(request, "chat/waiting.html", {"page": page, "calls": calls})
