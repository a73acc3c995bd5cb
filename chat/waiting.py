"""The "Waiting for you" page: every tool call that waits for the person's decision, across
their conversations and the runs they started in a terminal, oldest first, each as the card the
chat shows it (its arguments highlighted, the forms to decide it there). A decision takes the
call off the list and the counts down. Its queries are as many for a hundred calls as for one."""

from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET

from approvals.models import ApprovalRequest
from approvals.selectors import Waiting, waiting_for
from approvals.waiting import approval_window_said
from chat.approvals import Asking
from chat.rendering import Card, card_for
from core.events import ApprovalRequested, Decision
from workspace.query_string import query_int
from workspace.requests import SignedInRequest

PER_PAGE = 50
# The page's form field that says a decision came from this list, so that its answer takes the
# call off the list rather than redrawing the card in its conversation.
LISTED = "listed"
# What became of a call decided here, in the person's words.
DECIDED_SAID = {
    Decision.APPROVE: "Approved: the {tool} call runs.",
    Decision.EDIT: "Approved with your changes: the {tool} call runs with them.",
    Decision.DENY: "Denied: the {tool} call does not run.",
}


@dataclass(frozen=True)
class Said:
    """What became of one call decided here, and the conversation to see its run in (None: a
    run from the terminal)."""

    words: str
    run_id: int
    conversation_id: int | None


@dataclass(frozen=True)
class WaitingCall:
    request: ApprovalRequest
    card: Card


def waiting_card(request: ApprovalRequest, asking: Asking) -> Card | None:
    """The call's card as its conversation shows it while it waits, drawn from its audit row
    (written with its event, so the same call). A run from the terminal has no conversation to
    always allow a tool in."""
    event = ApprovalRequested(
        step=request.step,
        call_id=request.call_id,
        tool=request.tool,
        arguments=request.arguments,
        digest=request.digest,
        why=request.why,
    )
    card = card_for(request.run_id, request.seq, event, asking)
    if card is not None and request.run.conversation_id is None:
        card.data["always"] = False
    return card


@require_GET
def waiting(request: SignedInRequest) -> HttpResponse:
    return waiting_page(request)


def waiting_page(request: SignedInRequest, error: str = "", status: int = 200) -> HttpResponse:
    """The list; `error`: why a decision sent without the page's script was refused."""
    page = Paginator(waiting_for(request.user), PER_PAGE).get_page(query_int(request, "p"))
    asking = Asking(request.user)
    calls = [WaitingCall(call, card) for call in page if (card := waiting_card(call, asking))]
    context = {
        "page": page,
        "calls": calls,
        "awaiting": awaiting_on(page),
        "count": page.paginator.count,
        "window": approval_window_said(),
        "error": error,
    }
    return render(request, "chat/waiting.html", context, status=status)


def awaiting_on(page: Page[ApprovalRequest]) -> Waiting:
    """The header's count, from the list's own (the header links to this page, not to a
    conversation)."""
    return Waiting(page.paginator.count, None)


def decided_answer(request: SignedInRequest, decided: list[ApprovalRequest]) -> HttpResponse:
    """The decided calls off the list, what became of them said, and the counts as they are now,
    each out of band: the other cards, a reason half typed in one, stay as they are. Without
    the page's script, the list again."""
    if not request.htmx:
        return redirect("chat:waiting")
    count = waiting_for(request.user).count()
    context = {
        "decided": decided,
        "said": [said_of(call) for call in decided],
        "awaiting": Waiting(count, None),
        "count": count,
        "window": approval_window_said(),
    }
    return HttpResponse(render_to_string("chat/waiting.html#decided", context))


def said_of(call: ApprovalRequest) -> Said:
    words = DECIDED_SAID[Decision(call.decision)].format(tool=call.tool)
    return Said(words, call.run_id, call.run.conversation_id)
