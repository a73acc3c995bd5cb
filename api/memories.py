"""/api/v1/memories: what Loop remembers about the key's person, as the Memories page shows and
changes it (memory.personal, agent.forgotten): listed, searched by meaning, added by hand and
forgotten, with the page's rates (LOOP_MEMORY_SEARCHES_PER_MINUTE, LOOP_MEMORY_CHANGES_PER_MINUTE)
and words. Another person's memory is 404, as one that never was."""

import time
from datetime import datetime
from typing import Literal

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status

from agent.forgotten import take_back
from api.auth import READ, RUN, person_of
from api.errors import ApiError, not_found, refusals
from api.schemas import Text
from chat.memories import ADDED, MAX_QUERY_CHARS, TOO_MANY_CHANGES, may_change, may_search
from memory import personal
from memory.models import Memory, Origin
from memory.store import MemoryOutcome

router = Router(tags=["memories"])
REFUSED = refusals(400, 404)
MAX_PAGE = 100
TOO_MANY_SEARCHES = "Too many searches of your memories this minute: try again in a minute."

Kind = Literal["fact", "outcome"]
# A memory's origin as the API names it: a fact told on purpose, a run's outcome.
KINDS: dict[str, Kind] = {Origin.TOLD: "fact", Origin.RUN: "outcome"}
ORIGINS = {kind: origin for origin, kind in KINDS.items()}


class MemoryOut(Schema):
    id: int
    text: str
    kind: Kind = Field(description="fact: told on purpose; outcome: what a run left.")
    created_at: datetime
    source_run: int | None = Field(description="The run that stored it, if a run did.")


class MemoryQuery(Schema):
    query: Text = Field(
        "",
        max_length=MAX_QUERY_CHARS,
        description="Search: memories holding its words first, then those that mean it "
        "(LOOP_MEMORY_SEARCHES_PER_MINUTE).",
    )
    kind: Kind | None = None
    limit: int = Field(20, ge=1, le=MAX_PAGE)
    before: int | None = Field(None, ge=1, description="Only those of lower id (the next page).")


class MemoryIn(Schema):
    text: str = Field(description="What to remember (memory.store's MAX_MEMORY_CHARS at most).")


class AddedOut(Schema):
    outcome: MemoryOutcome = Field(
        description="stored: new; duplicate: already remembered; merged: a nearly identical "
        "memory now has this wording; dropped: not kept, the memory is full of worthier ones."
    )
    message: str
    memory: MemoryOut | None = Field(description="The memory that holds it (none if dropped).")


class ForgetQuery(Schema):
    copies: bool = Field(
        True,
        description="Also forget your other memories that state the same fact (as the "
        "Memories page offers, each ticked).",
    )


class ForgottenOut(Schema):
    forgotten: list[int] = Field(description="The ids forgotten: the memory, then its copies.")


def memory_out(memory: Memory) -> MemoryOut:
    return MemoryOut(
        id=memory.pk,
        text=memory.text,
        kind=KINDS.get(memory.origin, "outcome"),
        created_at=memory.created_at,
        source_run=memory.source_run_id,
    )


def too_many(message: str) -> ApiError:
    """The page's refusal of one change or search too many, with when the minute ends."""
    wait = str(60 - int(time.time()) % 60)
    return ApiError(429, "rate_limited", message, {"Retry-After": wait})


def found_for(person: User, filters: MemoryQuery) -> list[Memory]:
    """A page of the person's memories: newest first, or for a query, the page's search order
    (words, then meaning); `before` an id, `limit` at most."""
    origin = ORIGINS[filters.kind] if filters.kind else None
    found = personal.memories_of(person, filters.query.strip(), origin)
    if isinstance(found, QuerySet):
        found = found.order_by("-pk")
        if filters.before is not None:
            found = found.filter(pk__lt=filters.before)
        return list(found[: filters.limit])
    if filters.before is not None:
        found = [memory for memory in found if memory.pk < filters.before]
    return found[: filters.limit]


@router.get("/memories", response={200: list[MemoryOut], **REFUSED}, auth=READ)
def list_memories(request: HttpRequest, filters: Query[MemoryQuery]) -> list[MemoryOut]:
    """Your memories, newest first, or those a `query` finds, by their words and their meaning
    as the Memories page searches."""
    person = person_of(request)
    if filters.query.strip() and not may_search(person):
        raise too_many(TOO_MANY_SEARCHES)
    return [memory_out(memory) for memory in found_for(person, filters)]


@router.post("/memories", response={200: AddedOut, 201: AddedOut, **REFUSED}, auth=RUN)
def add_memory(request: HttpRequest, body: MemoryIn) -> Status[AddedOut]:
    """Remember a text, as the Memories page's "Remember this" does: 201 when a memory was
    stored, 200 when one already said it (or it was not kept); `outcome` says which."""
    person = person_of(request)
    if not may_change(person):
        raise too_many(TOO_MANY_CHANGES)
    try:
        done = personal.add_by_hand(person, body.text)
    except personal.InvalidMemory as error:
        raise ApiError(400, "invalid_memory", f"Not remembered: {error}") from None
    kept = done.outcome is not MemoryOutcome.DROPPED
    added = AddedOut(
        outcome=done.outcome,
        message=ADDED[done.outcome],
        memory=memory_out(done.memory) if kept else None,
    )
    return Status(201 if done.outcome is MemoryOutcome.STORED else 200, added)


@router.delete("/memories/{memory_id}", response={200: ForgottenOut, **REFUSED}, auth=RUN)
def forget(request: HttpRequest, memory_id: int, options: Query[ForgetQuery]) -> ForgottenOut:
    """Forget a memory as the Memories page's Forget does: recorded, its text taken out of your
    runs, and with it (unless `copies` is false) your other memories that state the same."""
    person = person_of(request)
    chosen = list(personal.these(person, [memory_id]))
    if not chosen:
        raise not_found("memory")
    copies = personal.copies_of(person, chosen) if options.copies else []
    ids = [memory_id, *(copy.pk for copy in copies)]
    forgotten = take_back(person, personal.these(person, ids))
    if not forgotten:
        raise not_found("memory")  # forgotten meanwhile, by another request
    gone = {record.memory_id for record in forgotten}
    return ForgottenOut(forgotten=[pk for pk in ids if pk in gone])
