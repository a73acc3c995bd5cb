"""The Memories page: what Loop remembers about the person, where each memory came from, and
forgetting, adding and editing them. Thin adapters over memory.personal and agent.selectors;
another person's memory or run is 404 here, as their conversations are.

Facts about the person (told on purpose) come first; what runs left is a kind of its own, folded
under "From your runs". Forgetting a memory that other memories repeat, or editing one they
repeat, asks first (a page of its own, no script) which of those copies to forget with it."""

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.cache import cache
from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agent import selectors
from agent.forgotten import take_back
from agent.models import AgentRun, Conversation
from core.recalled import RecalledMemory
from memory import personal
from memory.models import Memory, Origin
from memory.store import MemoryOutcome
from workspace.query_string import query_int, query_text, whole_number
from workspace.requests import SignedInRequest

PER_PAGE = 50
# The longest search the page takes: a search is words to find, not a document.
MAX_QUERY_CHARS = 200

TOO_MANY_CHANGES = "Too many changes to your memories this minute: try again in a minute."
TOO_MANY_SEARCHES = (
    "Too many searches of your memories this minute: all of them are shown, unsearched; "
    "try again in a minute."
)

# What the page says of each outcome of "Remember this" (the remember tool words them for the
# model).
ADDED = {
    MemoryOutcome.STORED: "Remembered.",
    MemoryOutcome.DUPLICATE: "Loop already remembers that.",
    MemoryOutcome.MERGED: "Loop remembered something nearly the same: it now has your wording.",
    MemoryOutcome.DROPPED: "Not kept: your memory is full of memories worth more than this one.",
}


@dataclass(frozen=True)
class Shown:
    """A memory as the page shows it: with the run that stored it, if that run is still the
    person's, and that run's conversation, if it is still there to link to."""

    memory: Memory
    run: AgentRun | None
    conversation: Conversation | None


@dataclass(frozen=True)
class Recalled:
    """The run of `?run=`: what it recalled, and how many of those are still stored."""

    run: AgentRun
    conversation: Conversation | None
    memories: list[RecalledMemory]
    still_stored: int


def counted(count: int) -> str:
    return f"{count} memor{'y' if count == 1 else 'ies'}"


def shown(user: Any, memories: list[Memory]) -> list[Shown]:
    runs = selectors.runs_by_id(user, (memory.source_run_id for memory in memories))
    return [Shown(memory, *run_and_conversation(source_run(runs, memory))) for memory in memories]


def source_run(runs: dict[int, AgentRun], memory: Memory) -> AgentRun | None:
    return None if memory.source_run_id is None else runs.get(memory.source_run_id)


def run_and_conversation(run: AgentRun | None) -> tuple[AgentRun | None, Conversation | None]:
    if run is None or run.conversation is None or run.conversation.deleted_at is not None:
        return run, None
    return run, run.conversation


def search_of(request: SignedInRequest) -> str:
    return query_text(request, "q", MAX_QUERY_CHARS).strip()


def recalled_run(request: SignedInRequest) -> Recalled | None:
    """The run of `?run=`, the person's own (anyone else's is 404), with what it recalled."""
    run_id = query_int(request, "run")
    if run_id is None:
        return None
    run = selectors.run_of(request.user, run_id)
    if run is None:
        raise Http404("No such run.")
    recalled = selectors.recalled_in(run)
    ids = [memory.id for memory in recalled]
    stored = personal.mine(request.user).filter(pk__in=ids).count()
    return Recalled(run, run_and_conversation(run)[1], recalled, stored)


def memories_page(
    request: SignedInRequest,
    *,
    error: str = "",
    text: str = "",
    status: int = 200,
    searched: bool = True,
) -> HttpResponse:
    """The page, with the search of `?q=` unless not `searched`."""
    query = search_of(request) if searched else ""
    recalled = recalled_run(request)
    found = personal.memories_of(request.user, query)  # one embedding of the search, if any
    facts = listed(request, found, recalled, Origin.TOLD, "page")
    outcomes = listed(request, found, recalled, Origin.RUN, "runs_page")
    mine = personal.mine(request.user)
    context = {
        "query": query,
        "recalled": recalled,
        "page": facts,
        "runs_page": outcomes,
        "memories": shown(request.user, list(facts.object_list)),
        "outcomes": shown(request.user, list(outcomes.object_list)),
        "facts_total": mine.filter(origin=Origin.TOLD).count(),
        "outcomes_total": mine.filter(origin=Origin.RUN).count(),
        "total": mine.count(),
        "here": here(query, recalled.run.pk if recalled else None),
        "error": error,
        "text": text,
    }
    return render(request, "chat/memories.html", context, status=status)


def listed(
    request: SignedInRequest,
    found: QuerySet[Memory] | list[Memory],
    recalled: Recalled | None,
    origin: str,
    page_key: str,
) -> Page[Memory]:
    """One kind of the memories `found` as the page shows it: narrowed to what the run of
    `?run=` recalled, one page of it (its own page number: facts and runs page apart)."""
    if isinstance(found, QuerySet):
        found = found.filter(origin=origin)
    else:
        found = [memory for memory in found if memory.origin == origin]
    if recalled is not None:
        ids = {memory.id for memory in recalled.memories}
        found = [memory for memory in found if memory.pk in ids]
    return Paginator(found, PER_PAGE).get_page(query_int(request, page_key))


def here(query: str, run_id: int | None) -> dict[str, str]:
    """The search and the run the page shows, which every change sends back to return to."""
    return {key: str(value) for key, value in (("q", query), ("run", run_id)) if value}


def back(request: SignedInRequest) -> HttpResponse:
    """To the Memories page as it was: the same search, the same run."""
    wanted = {key: request.POST.get(key, "") for key in ("q", "run")}
    query = urlencode({key: value for key, value in wanted.items() if value})
    return redirect(reverse("memories") + (f"?{query}" if query else ""))


@require_GET
def memories(request: SignedInRequest) -> HttpResponse:
    if search_of(request) and not may_search(request.user):
        return memories_page(request, error=TOO_MANY_SEARCHES, status=429, searched=False)
    return memories_page(request)


def posted_ids(request: SignedInRequest) -> list[int]:
    ids = [whole_number(value) for value in request.POST.getlist("id")]
    if None in ids:
        raise Http404("No such memory.")
    return [memory_id for memory_id in ids if memory_id is not None]


@require_POST
def forget(request: SignedInRequest) -> HttpResponse:
    """Forget the memories of the `id` fields, or all of them with `all=1`; each forgetting is
    recorded, and their texts are taken out of the person's runs. Ids none of which are the
    person's memories are 404. Memories that state the same as those chosen are offered first
    (a confirm page, each ticked); the confirmed form (`confirmed=1`) forgets what is ticked."""
    if request.POST.get("all") == "1":
        forgotten = take_back(request.user, personal.mine(request.user))
    else:
        ids = posted_ids(request)
        if not ids:
            messages.info(request, "Nothing was selected: nothing forgotten.")
            return back(request)
        chosen = personal.these(request.user, ids)
        if request.POST.get("confirmed") != "1":
            offered = personal.copies_of(request.user, list(chosen))
            if offered:
                return confirm_page(request, list(chosen), offered)
        forgotten = take_back(request.user, chosen)
        if not forgotten:
            raise Http404("No such memory.")
    messages.success(request, f"Forgot {counted(len(forgotten))}.")
    return back(request)


def confirm_page(
    request: SignedInRequest, chosen: list[Memory], offered: list[Memory], *, edited: bool = False
) -> HttpResponse:
    """Which copies to forget: those `chosen` (forgotten whatever is ticked, unless it was an
    edit, which keeps its memory) and the `offered` copies, each ticked; unticking keeps it."""
    wanted = {key: request.POST[key] for key in ("q", "run") if request.POST.get(key)}
    context = {
        "chosen": shown(request.user, chosen),
        "offered": shown(request.user, offered),
        "edited": edited,
        "here": wanted,
        "back_url": reverse("memories") + (f"?{urlencode(wanted)}" if wanted else ""),
    }
    return render(request, "chat/memories_forget.html", context)


def within_share(user: Any, kind: str, per_minute: int) -> bool:
    """Count one `kind` of the person's; False past `per_minute` this minute. Each embeds a text
    on the web's CPU, so one person cannot keep it busy. Counted in the cache (per web process
    unless CACHES is shared)."""
    key = f"loop:memory-{kind}:{user.pk}:{int(time.time() // 60)}"
    cache.add(key, 0, timeout=120)
    return cache.incr(key) <= per_minute


def may_change(user: Any) -> bool:
    """An add or an edit (LOOP_MEMORY_CHANGES_PER_MINUTE)."""
    return within_share(user, "changes", settings.LOOP_MEMORY_CHANGES_PER_MINUTE)


def may_search(user: Any) -> bool:
    """A search (LOOP_MEMORY_SEARCHES_PER_MINUTE)."""
    return within_share(user, "searches", settings.LOOP_MEMORY_SEARCHES_PER_MINUTE)


@require_POST
def add(request: SignedInRequest) -> HttpResponse:
    """Remember what the person wrote ("Remember this"); the page says what became of it."""
    text = request.POST.get("text", "")
    if not may_change(request.user):
        return memories_page(request, error=TOO_MANY_CHANGES, text=text, status=429)
    try:
        done = personal.add_by_hand(request.user, text)
    except personal.InvalidMemory as error:
        return memories_page(request, error=f"Not remembered: {error}", text=text, status=400)
    messages.success(request, ADDED[done.outcome])
    return back(request)


@require_POST
def edit(request: SignedInRequest, memory_id: int) -> HttpResponse:
    """Give one memory a new text (re-embedded, so recall finds it by the new words)."""
    if not may_change(request.user):
        return memories_page(request, error=TOO_MANY_CHANGES, status=429)
    try:
        done = personal.edit(request.user, memory_id, request.POST.get("text", ""))
    except Memory.DoesNotExist:
        raise Http404("No such memory.") from None
    except personal.InvalidMemory as error:
        return memories_page(request, error=f"Not changed: {error}", status=400)
    said = "Memory changed."
    if done.absorbed:
        said += f" It also takes the place of {counted(len(done.absorbed))} that said the same."
    messages.success(request, said)
    if done.stale:  # copies of what it said before: offered for forgetting
        return confirm_page(request, [done.memory], done.stale, edited=True)
    return back(request)
