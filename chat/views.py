"""The chat's pages and actions: thin adapters over agent.runs and agent.selectors (nothing here
decides)."""

import contextlib
import json
from typing import Any

from django import forms
from django.conf import settings
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import escape
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from accounting.ledger import spend_of_conversation
from accounting.quotas import amount_in_words, moment_in_words, standings
from accounting.reports import cost_text
from agent import queued, runs, selectors
from agent.forgotten import take_back
from agent.instructions import InstructionsForm, set_conversation_instructions
from agent.llm.factory import (
    GROQ,
    MOCK,
    OPENAI,
    ModelChoice,
    ModelUnavailable,
    default_model,
    offered_models,
    parse,
)
from agent.models import AgentRun, Conversation, QueuedTask
from approvals import decisions
from approvals.selectors import latest_decisions, waiting_calls, waiting_of
from chat import assistants, exports, sidebar, waiting
from chat.approvals import Asking, decisions_from
from chat.rendering import (
    card_for,
    draw,
    labelled,
    page_cards,
    pruned_cards,
    render_card,
)
from chat.texts import EVENT_TEXTS
from rights.effective import rights_of
from tools.base import ToolError
from workspace.query_string import query_int, query_text
from workspace.requests import SignedInRequest
from workspace.views import quota_context

SUGGESTIONS = (
    "Compute the sum of 1..100 and save it to a file",
    "What is 17 * 23?",
    "Remember that my favourite colour is teal",
    "Count slowly to 5",
    "List my files",
)


def turn(
    run: AgentRun,
    offered: list[ModelChoice],
    asking: Asking,
    branching: selectors.Branching | None = None,
) -> dict[str, Any]:
    """A run as the page draws it for `asking`, its person; `offered` is the request's
    offered_models() (computed once), `branching` where it stands among the versions of its
    turn (read here if not given). A run whose log was pruned shows a note and its end instead
    of its steps."""
    events = [] if run.log_pruned else selectors.events_of(run)
    if branching is None and run.conversation_id is not None:
        branching = selectors.branching_of(run)
    return {
        "run": run,
        "branching": branching,
        "feedback": getattr(run, "feedback", None),
        "cards": pruned_cards(run) if run.log_pruned else page_cards(run.pk, events, asking),
        "seq": events[-1].seq if events else 0,
        "model_offered": selectors.model_offered(run, offered),
        "waiting": waiting_calls(run),
    }


# How the header names each provider. A server's URL is not shown: it may be an address inside
# the operator's network, and every person sees the header.
PROVIDER_NAMES = {MOCK: "built in", GROQ: "Groq", OPENAI: "OpenAI-compatible server"}


def shown(choice: ModelChoice) -> dict[str, str]:
    provider = PROVIDER_NAMES.get(choice.provider, choice.provider)
    return {"name": choice.name, "model": choice.model, "provider": provider}


def model_context(
    conversation: Conversation | None, offered: list[ModelChoice], picked: str = ""
) -> dict[str, Any]:
    """What the header says of the model: the one the next task runs on (or the one `picked`
    for a task refused, if it is offered) and its provider, the others a person may pick
    instead, the one the conversation used if it is no longer offered; or, when no model can
    run here, why. `offered` is the request's offered_models()."""
    try:
        current = selectors.conversation_model(conversation, offered)
    except ModelUnavailable as error:
        return {"name": default_model(), "unavailable": str(error)}
    if picked and parse(picked) in offered:
        current = parse(picked)
    choices = [shown(choice) for choice in offered]
    stored = conversation.model if conversation else ""
    return {
        "current": shown(current),
        "choices": choices if len(choices) > 1 else [],
        "is_mock": current.provider == MOCK and len(choices) <= 1,
        "was": stored if stored and parse(stored) != current else "",
    }


def model_header(
    request: SignedInRequest, conversation: Conversation, offered: list[ModelChoice]
) -> bytes:
    """The header's model, drawn out of band: after a send, it says what the conversation goes
    on with now (and a form reset puts the pick back to it, not to the page's first one)."""
    conversation.refresh_from_db(fields=["model"])
    context = {"model": model_context(conversation, offered), "oob": True}
    return render_to_string("chat/model.html", context, request).encode()


def quota_or_none(user: Any) -> dict[str, Any] | None:
    """How much of the workspace quota the person uses, for the sidebar; None when the workspace
    cannot be measured (not made, not readable): the chat stands without it, and the Files panel
    and the tools say what is wrong."""
    try:
        return quota_context(user)
    except (OSError, ToolError):
        return None


def conversation_cost(conversation: Conversation | None) -> str:
    """What the conversation's runs cost, for its header, when the site shows costs
    (LOOP_SHOW_COST): "" otherwise, or before its first model turn."""
    if conversation is None or not settings.LOOP_SHOW_COST:
        return ""
    return cost_text(spend_of_conversation(conversation.pk))


def run_quota_context(user: Any) -> list[dict[str, Any]]:
    """The person's standing against each quota that applies to them, for the composer's gauge."""
    return [
        {
            "what": standing.limit.in_words(),
            "left": amount_in_words(
                standing.limit.measure, standing.remaining, standing.limit.currency
            ),
            "share": f"{standing.share_used:.3f}",
            "percent": round(standing.share_used * 100),
            "reached": standing.reached,
            "resets_at": moment_in_words(standing.resets_at),
        }
        for standing in standings(user.pk)
    ]


def run_quota_gauge(request: SignedInRequest) -> bytes:
    """The composer's quota gauge, out of band: after a send, what is left now."""
    context = {"run_quota": run_quota_context(request.user), "oob": True}
    return render_to_string("chat/run_quota.html", context, request).encode()


def chat_page(
    request: SignedInRequest,
    conversation: Conversation | None,
    *,
    error: str = "",
    task: str = "",
    picked: str = "",
    status: int = 200,
    offered: list[ModelChoice] | None = None,
    archived: bool = False,
) -> HttpResponse:
    """The chat's page. `offered` is the request's offered_models(), if it has it already: a
    page computes the offered models once, for its header and every turn's Continue.
    `archived`: the sidebar lists the archived conversations instead of the others."""
    offered = models_for(request) if offered is None else offered
    path = selectors.runs_of(conversation) if conversation else selectors.ConversationPath([], {})
    send_url = (
        reverse("chat:send", args=[conversation.pk]) if conversation else reverse("chat:start")
    )
    asking = Asking(request.user)
    query = query_text(request, "q", sidebar.MAX_QUERY)
    current = conversation.pk if conversation else None
    context = {
        "conversation": conversation,
        "sidebar": sidebar.sidebar_for(request.user, query, archived=archived, current=current),
        "archived": archived,
        "query": query,
        "current": conversation,
        "turns": [turn(run, offered, asking, path.branching[run.pk]) for run in path.runs],
        "awaiting": waiting_of(request.user),
        "suggestions": SUGGESTIONS,
        "send_url": send_url,
        "model": model_context(conversation, offered, picked),
        "no_model": no_model_text(request),
        "quota": quota_or_none(request.user),
        "run_quota": run_quota_context(request.user),
        "error": error,
        "task": task,
        "waiting": queued.waiting_in(conversation) if conversation else [],
        "conversation_cost": conversation_cost(conversation),
        # What deleting the conversation offers to forget, as things are now: the offer itself
        # is always made, and what its runs remembered is read when the person deletes it.
        "remembered": selectors.remembered_in(request.user, conversation).count()
        if conversation
        else 0,
    }
    context.update(assistants.picker_context(request, conversation))
    return render(request, "chat/page.html", context, status=status)


def models_for(request: SignedInRequest) -> list[ModelChoice]:
    """The models the person may pick: those this Loop offers that their groups allow (their
    rights are read once a request: rights.middleware)."""
    return offered_models(rights_of(request.user))


def no_model_text(request: SignedInRequest) -> str:
    """Why the person can send nothing, when their groups give them no model ("": they can)."""
    rights = rights_of(request.user)
    if rights.models != frozenset():
        return ""
    try:
        runs.check_model_allowed(rights, default_model())
    except runs.ModelNotOffered as error:
        return str(error)
    return ""


def owned_conversation(request: SignedInRequest, conversation_id: int) -> Conversation:
    return get_object_or_404(selectors.conversations_for(request.user), pk=conversation_id)


@require_GET
def home(request: SignedInRequest) -> HttpResponse:
    """A new conversation: it is stored when its first task is sent."""
    return chat_page(request, None)


@require_GET
def conversation(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    return chat_page(request, owned_conversation(request, conversation_id))


@require_GET
def search(request: SignedInRequest) -> HttpResponse:
    """The sidebar's conversations matching `q` (titles and tasks), grouped by day: the list
    alone for htmx as the person types, else the whole page with the list filtered."""
    archived = bool(query_text(request, "archived", 1))
    if not request.htmx:
        return chat_page(request, None, archived=archived)
    query, current = query_text(request, "q", sidebar.MAX_QUERY), query_int(request, "current")
    context = {
        "sidebar": sidebar.sidebar_for(request.user, query, archived=archived, current=current),
        "archived": archived,
        "query": query,
        "current": None if current is None else {"pk": current},
    }
    return render(request, "chat/page.html#conversation_list", context)


@require_GET
def archived(request: SignedInRequest) -> HttpResponse:
    """The archived conversations in the sidebar, each with Unarchive in its menu."""
    return chat_page(request, None, archived=True)


@require_GET
def more(request: SignedInRequest) -> HttpResponse:
    """The next page of the sidebar's list, after the conversation `?after=` names (as
    sidebar.Cursor writes it), for "More" to put in its own place."""
    cursor = sidebar.Cursor.parse(query_text(request, "after", 100))
    query, current = query_text(request, "q", sidebar.MAX_QUERY), query_int(request, "current")
    archived = bool(query_text(request, "archived", 1))
    page = sidebar.sidebar_for(
        request.user,
        query,
        archived=archived,
        cursor=cursor,
        continues=query_text(request, "continues", 20),
        current=current,
    )
    context = {
        "sidebar": page,
        "next_page": True,
        "archived": archived,
        "query": query,
        "current": None if current is None else {"pk": current},
    }
    return render(request, "chat/page.html#conversation_pages", context)


@require_POST
def start(request: SignedInRequest) -> HttpResponse:
    """The first task of a new conversation: store both, on the model picked (the default if
    none), then show the conversation."""
    task, picked = request.POST.get("task", ""), request.POST.get("model", "")
    offered = models_for(request)
    try:
        runs.count_message(request.user)
        assistant = assistants.assistant_picked(request)
        picked = picked or (assistant.model if assistant else "")
        model = runs.chat_model(None, picked, offered, rights_of(request.user))
        run = runs.submit_first_run(request.user, task, model=model, assistant=assistant)
    except runs.InvalidTask as error:
        return chat_page(
            request, None, error=str(error), task=task, picked=picked, offered=offered, status=400
        )
    return redirect("chat:conversation", run.conversation_id)


@require_POST
def send(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    """A task in a conversation, on the model picked for it (else the conversation's own): with
    htmx, answer the new turn to add to the timeline, and the header's model as it is now."""
    conversation = owned_conversation(request, conversation_id)
    task, picked = request.POST.get("task", ""), request.POST.get("model", "")
    offered = models_for(request)  # once: the pick's check, the new turn and the header share it
    try:
        runs.count_message(request.user)
        model = runs.chat_model(conversation, picked, offered, rights_of(request.user))
        if queued.live_run_in(conversation) is not None:  # it waits its turn
            queued.queue_task(request.user, conversation, task, model=model.name)
            return queue_answer(request, conversation, oob=True)
        run = runs.submit_run(request.user, task, conversation, model=model)
    except runs.InvalidTask as error:
        if not request.htmx:
            return chat_page(
                request,
                conversation,
                error=str(error),
                task=task,
                picked=picked,
                offered=offered,
                status=400,
            )
        response = HttpResponse(escape(str(error)))  # it may quote what the person sent
        response["HX-Retarget"] = "#send-error"
        response["HX-Reswap"] = "innerHTML"
        return response
    if not request.htmx:
        return redirect("chat:conversation", conversation.pk)
    response = render(
        request, "chat/cards.html#turn", {"turn": turn(run, offered, Asking(request.user))}
    )
    response.content += model_header(request, conversation, offered)
    response.content += run_quota_gauge(request)
    return response


def queue_answer(
    request: SignedInRequest, conversation: Conversation, *, oob: bool
) -> HttpResponse:
    """The conversation's waiting tasks as they stand: in place (`oob`: out of band, beside a
    send's empty answer), or, without htmx, the conversation's page."""
    if not request.htmx:
        return redirect("chat:conversation", conversation.pk)
    context = {"conversation": conversation, "waiting": queued.waiting_in(conversation)}
    return render(request, "chat/cards.html#queue", {**context, "oob": oob})


@require_POST
def queued_now(request: SignedInRequest, task_id: int) -> HttpResponse:
    """Hand a waiting task to the conversation's running task, which reads it at its next step."""
    return queued_change(request, task_id, queued.send_now)


@require_POST
def queued_remove(request: SignedInRequest, task_id: int) -> HttpResponse:
    return queued_change(request, task_id, queued.remove)


def queued_change(request: SignedInRequest, task_id: int, change: Any) -> HttpResponse:
    """A change to one of the person's waiting tasks; one that no longer waits is shown as the
    queue is now (it started, or was sent), whoever asks: another person's is never found."""
    conversation_id = (
        QueuedTask.objects.filter(
            pk=task_id, conversation__in=selectors.conversations_for(request.user)
        )
        .values_list("conversation_id", flat=True)
        .first()
    )
    if conversation_id is None:
        raise Http404("No such task.")
    with contextlib.suppress(queued.NotWaiting):
        change(request.user, task_id)
    return queue_answer(request, owned_conversation(request, conversation_id), oob=False)


@require_GET
def turns_after(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    """The turns of the conversation after run `?run=` (the page's last), and its waiting tasks:
    what a page adds when a queued task became the next run."""
    conversation = owned_conversation(request, conversation_id)
    after = query_int(request, "run") or 0
    path = selectors.runs_of(conversation)
    later = [run for run in path.runs if run.pk > after]
    offered = models_for(request)
    asking = Asking(request.user)
    turns = [turn(run, offered, asking, path.branching[run.pk]) for run in later]
    response = render(request, "chat/turns.html", {"turns": turns})
    context = {"conversation": conversation, "waiting": queued.waiting_in(conversation)}
    response.content += draw("queue", **context, oob=True).encode()
    return response


@require_GET
def run_fragment(request: SignedInRequest, run_id: int) -> HttpResponse:
    """One turn of a conversation as it stands, as the page draws it."""
    run = get_object_or_404(selectors.runs_for(request.user), pk=run_id)
    shown = turn(run, models_for(request), Asking(request.user))
    return render(request, "chat/cards.html#turn", {"turn": shown})


@require_POST
def stop(request: SignedInRequest, run_id: int) -> HttpResponse:
    try:
        run = runs.cancel_run(request.user, run_id)
    except AgentRun.DoesNotExist:
        return HttpResponse("No such run.", status=404)
    if not request.htmx:
        return redirect_to_run(run)
    context = {"run": run, "model_offered": selectors.model_offered(run)}
    return render(request, "chat/cards.html#run_status", context)


@require_POST
def continue_run(request: SignedInRequest, run_id: int) -> HttpResponse:
    """Its owner asks a run that stopped early to go on: the turn, queued again, takes its own
    place on the page, and its seq marker has the page watch it live, as after a send."""
    try:
        runs.count_message(request.user)
        run = runs.continue_run(request.user, run_id)
    except AgentRun.DoesNotExist:
        return HttpResponse("No such run.", status=404)
    except runs.InvalidTask as error:
        return refused(request, run_id, str(error))
    if not request.htmx:
        return redirect_to_run(run)
    shown = turn(run, models_for(request), Asking(request.user))
    response = render(request, "chat/cards.html#turn", {"turn": shown})
    if run.conversation_id is not None:  # the sidebar's icon says it is waiting again
        conversation = labelled(selectors.conversation_with_status(run.conversation_id))
        response.content += draw(
            "conversation_status", conversation=conversation, oob=True
        ).encode()
    return response


@require_POST
def decide(request: SignedInRequest, run_id: int) -> HttpResponse:
    """The person's decision on calls their run waits on, from a call's card or the run's
    "Approve all" / "Deny all": the decided cards in their place, with the run's status, the
    sidebar's icon and the title's count as they are now. A refusal changes nothing and says why
    where the person decided (400)."""
    run = get_object_or_404(selectors.runs_for(request.user), pk=run_id)
    try:
        decided = decisions.decide(request.user, run.pk, decisions_from(request.POST, run))
    except AgentRun.DoesNotExist:
        raise Http404("No such run.") from None
    except decisions.DecisionRefused as error:
        return decision_refused(request, run, str(error))
    if request.POST.get(waiting.LISTED):  # from "Waiting for you": the call leaves its list
        return waiting.decided_answer(request, decided)
    if not request.htmx:
        return redirect_to_run(run)
    return decisions_answer(request, run.pk, len(decided))


def decisions_answer(request: SignedInRequest, run_id: int, decided: int) -> HttpResponse:
    """The run's latest decisions' cards, its status, its sidebar icon and the waiting count,
    each out of band (what the socket sends too, when it hears of them)."""
    run = selectors.run_of_with_state(request.user, run_id)
    if run is None:  # deleted since
        raise Http404("No such run.")
    asking = Asking(request.user)
    parts = [
        render_card(card)
        for seq, event in latest_decisions(run, decided)
        if (card := card_for(run.pk, seq, event, asking)) is not None
    ]
    offered = selectors.model_offered(run)
    waiting = waiting_calls(run)
    parts.append(draw("run_status", run=run, oob=True, model_offered=offered, waiting=waiting))
    if run.conversation is not None:
        parts.append(draw("conversation_status", conversation=labelled(run.conversation), oob=True))
    parts.append(draw("waiting_count", awaiting=waiting_of(request.user), oob=True))
    return HttpResponse("".join(parts))


def decision_refused(request: SignedInRequest, run: AgentRun, error: str) -> HttpResponse:
    """A decision refused: its sentence in the card it came from (htmx), or above the composer."""
    if request.htmx:
        return HttpResponse(escape(error), status=400)  # it may quote what the person sent
    if request.POST.get(waiting.LISTED):
        return waiting.waiting_page(request, error=error, status=400)
    conversation = owned_conversation(request, run.conversation_id) if run.conversation_id else None
    return chat_page(request, conversation, error=error, status=400)


@require_GET
def waiting_count(request: SignedInRequest) -> HttpResponse:
    """The calls waiting for the person's decision, for a page in the background to keep its
    title's count true (its socket hears only the runs it shows)."""
    return render(request, "chat/cards.html#waiting_count", {"awaiting": waiting_of(request.user)})


@require_POST
def feedback(request: SignedInRequest, run_id: int) -> HttpResponse:
    """A thumb up or down on a run's answer, and why if the person says: the feedback as it
    stands now, in place (the comment box opens once a thumb is chosen)."""
    rating, comment = request.POST.get("rating", ""), request.POST.get("comment", "")
    try:
        saved = runs.rate_run(request.user, run_id, rating, comment)
    except AgentRun.DoesNotExist:
        return HttpResponse("No such run.", status=404)
    except runs.InvalidTask as error:
        return refused(request, run_id, str(error))
    if not request.htmx:
        return redirect_to_run(saved.run)
    context = {"run": saved.run, "feedback": saved, "saved": True}
    return render(request, "chat/cards.html#feedback", context)


@require_POST
def regenerate(request: SignedInRequest, run_id: int) -> HttpResponse:
    """The turn's task asked again, as another version of it, on the conversation's model."""
    return new_version(request, run_id, None)


@require_POST
def edit(request: SignedInRequest, run_id: int) -> HttpResponse:
    """The turn's task as the person rewrote it, as another version of it."""
    return new_version(request, run_id, request.POST.get("edited", ""))


def new_version(request: SignedInRequest, run_id: int, task: str | None) -> HttpResponse:
    """Another version of a turn: the page is drawn again, on the new branch, the new run live.
    `task` None asks the turn's own task again; an edit is checked as any task is."""
    run = get_object_or_404(selectors.runs_for(request.user), pk=run_id)
    if run.conversation_id is None:
        raise Http404("No such turn.")
    conversation = owned_conversation(request, run.conversation_id)
    try:
        runs.count_message(request.user)
        model = runs.chat_model(conversation, "", models_for(request), rights_of(request.user))
        runs.new_version(request.user, run_id, task=task, model=model)
    except runs.InvalidTask as error:
        if request.htmx:
            return refused(request, run_id, str(error))
        return chat_page(request, conversation, error=str(error), status=400)
    return to_conversation(request, conversation.pk)


def to_conversation(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    """The conversation's page drawn anew: its turns changed, not just one of them."""
    url = reverse("chat:conversation", args=[conversation_id])
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@require_POST
def show(request: SignedInRequest, run_id: int) -> HttpResponse:
    """Show this version of its turn, and what followed it."""
    try:
        run = runs.show_version(request.user, run_id)
    except AgentRun.DoesNotExist:
        raise Http404("No such turn.") from None
    if run.conversation_id is None:  # show_version picks among a conversation's turns only
        raise Http404("No such turn.")
    return to_conversation(request, run.conversation_id)


def refused(request: SignedInRequest, run_id: int, error: str) -> HttpResponse:
    """A continue refused with its sentence, where a refused send shows its own."""
    if request.htmx:
        response = HttpResponse(escape(error))
        response["HX-Retarget"] = "#send-error"
        response["HX-Reswap"] = "innerHTML"
        return response
    run = get_object_or_404(selectors.runs_for(request.user), pk=run_id)
    conversation = owned_conversation(request, run.conversation_id) if run.conversation_id else None
    return chat_page(request, conversation, error=error, status=400)


def redirect_to_run(run: AgentRun) -> HttpResponse:
    if run.conversation_id is None:  # a run from the terminal
        return redirect("chat:home")
    return redirect("chat:conversation", run.conversation_id)


class RenameForm(forms.Form):
    # A form field refuses what the database cannot store (a NUL character) with a message.
    title = forms.CharField(required=False)


@require_POST
def rename(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    conversation = owned_conversation(request, conversation_id)
    form = RenameForm(request.POST)
    if not form.is_valid():
        error = "The title was not changed: " + " ".join(
            str(message) for message in form.errors["title"]
        )
        return chat_page(request, conversation, error=error, status=400)
    runs.rename_conversation(request.user, conversation.pk, form.cleaned_data["title"])
    return back_to(request, reverse("chat:conversation", args=[conversation.pk]))


def back_to(request: SignedInRequest, default: str) -> HttpResponse:
    """Where an action from a sidebar's menu returns: the conversation the person was in (the
    form's `current`), while it is theirs and still there, else `default`."""
    current = request.POST.get("current", "")
    theirs = selectors.conversations_for(request.user)
    if current.isascii() and current.isdecimal() and theirs.filter(pk=int(current)).exists():
        return redirect("chat:conversation", int(current))
    return redirect(default)


@require_GET
def menu(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    """A sidebar conversation's menu, asked for once as the person heads for it; `?current=` is the
    conversation the person is in, where its actions return."""
    conversation = owned_conversation(request, conversation_id)
    context = {
        "conversation": conversation,
        "current": query_int(request, "current"),
        # Its Delete offers what the header's does, counted as the menu opens.
        "remembered": selectors.remembered_in(request.user, conversation).count(),
    }
    return render(request, "chat/cards.html#sidebar_menu", context)


@require_POST
def pin(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    """Pin the conversation to the top of the list (`pinned=1`), or unpin it."""
    try:
        runs.pin_conversation(
            request.user, conversation_id, pinned=request.POST.get("pinned") == "1"
        )
    except Conversation.DoesNotExist:
        raise Http404("No such conversation.") from None
    return back_to(request, reverse("chat:home"))


@require_POST
def archive(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    """Archive the conversation (`archived=1`): it leaves the list for the Archived view; or
    bring it back (from that view, which the person goes back to)."""
    archiving = request.POST.get("archived") == "1"
    try:
        runs.archive_conversation(request.user, conversation_id, archived=archiving)
    except Conversation.DoesNotExist:
        raise Http404("No such conversation.") from None
    return back_to(request, reverse("chat:home" if archiving else "chat:archived"))


@require_POST
def instructions(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    """The conversation's own instructions, read by its runs from the next one on."""
    conversation = owned_conversation(request, conversation_id)
    form = InstructionsForm(request.POST)
    if not form.is_valid():
        error = " ".join(str(message) for message in form.errors["instructions"])
        # Shown again as typed (not saved), so shortening them loses nothing.
        conversation.instructions = form.data.get("instructions", "")
        return chat_page(request, conversation, error=error, status=400)
    set_conversation_instructions(request.user, conversation.pk, form.cleaned_data["instructions"])
    return redirect("chat:conversation", conversation.pk)


@require_POST
def delete(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    """Delete the conversation and, if its owner asked, forget what its runs remembered (and
    take those texts out of every run of theirs, this conversation's included). What they
    remembered is read now, not when the page was drawn: a run that ended since counts."""
    conversation = owned_conversation(request, conversation_id)
    with transaction.atomic():
        runs.delete_conversation(request.user, conversation.pk)
        if request.POST.get("forget"):
            take_back(request.user, selectors.remembered_in(request.user, conversation))
    return back_to(request, reverse("chat:home"))


# What each kind of export is sent as.
EXPORT_TYPES = {"md": "text/markdown; charset=utf-8", "json": "application/json"}


@require_GET
def export(request: SignedInRequest, conversation_id: int, kind: str) -> HttpResponse:
    """The conversation as a file to download, Markdown (`md`) or JSON, for its owner only."""
    conversation = owned_conversation(request, conversation_id)
    if kind not in EXPORT_TYPES:
        raise Http404("No such kind of export.")
    content = exports.conversation_export(conversation, request.user)
    if kind == "md":
        body = exports.as_markdown(content)
    else:
        body = json.dumps(content, indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type=EXPORT_TYPES[kind])
    name = exports.file_name(conversation, kind)
    response["Content-Disposition"] = content_disposition_header(True, name)
    return response


@require_GET
def event_text(request: SignedInRequest, run_id: int, seq: int, key: str) -> HttpResponse:
    """The whole text a card shows shortened (chat/rendering.py), for the run's owner only, as
    plain text: nothing in it is ever read as HTML."""
    run = get_object_or_404(selectors.runs_for(request.user), pk=run_id)
    event = selectors.event_at(run, seq)
    if event is None:
        raise Http404("No such event.")
    text = getattr(event, key, None) if key in EVENT_TEXTS else None
    if not isinstance(text, str):
        raise Http404("No such text.")
    return HttpResponse(text, content_type="text/plain; charset=utf-8")
