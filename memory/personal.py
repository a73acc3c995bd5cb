"""A person's own memories, as they see and change them on the Memories page: list and search,
add by hand, edit, forget. Another person's memory does not exist here (Memory.DoesNotExist).

Adding goes through the store's remember() (its duplicate and merge rules, its bound); an edit
re-embeds the memory and keeps the same rules: a memory the edit makes the same as, or nearly
the same as, another of the person's absorbs that other one, so no two say the same thing.
Forgetting picks the memories here (`these`, `mine`); the layer above forgets them through
memory.forgetting, recorded as an operator's is, and takes their texts out of the owner's runs.

Forgetting a fact forgets the fact, not one sentence of it: `copies_of` finds the person's other
memories that state the same thing (by meaning, at the embedder's same-fact similarity, or by
the words: every content word of it), which the page offers to forget with it; an edit offers
the copies of what the memory said before (`Edited.stale`). Search is by meaning, as recall is,
with the memories holding every word typed first (`memories_of`).
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import reduce
from operator import and_
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q, QuerySet

from memory import store
from memory.embedders import Vector, words
from memory.models import Memory, Origin

# A memory written by hand matters as much as one the model stores on purpose (memory/tools.py).
BY_HAND_IMPORTANCE = 0.7
# How many of the nearest memories a search, or a look for copies, weighs by meaning.
SEARCH_CANDIDATES = 100
COPY_CANDIDATES = 50
# A text of more content words than this is found by meaning only: a copy in other words rarely
# keeps every one of them, and each word is one more clause of the query.
MAX_COPY_WORDS = 12


class InvalidMemory(ValueError):
    """A text that cannot be a memory; its message says why, for the person."""


@dataclass(frozen=True)
class Edited:
    memory: Memory
    # The ids of the person's other memories the edit made redundant, now part of this one.
    absorbed: list[int] = field(default_factory=list)
    # The person's other memories that still state what it said before the edit (and not what
    # it says now): offered for forgetting.
    stale: list[Memory] = field(default_factory=list)


def mine(owner: User) -> QuerySet[Memory]:
    """The owner's memories, without their vectors (for the index, not for reading)."""
    return Memory.objects.filter(owner=owner).defer("embedding")


def memories_of(
    owner: User, query: str = "", origin: str | None = None
) -> QuerySet[Memory] | list[Memory]:
    """The owner's memories (of one origin, if given), newest first. With a query: those whose
    text holds each of its words (case aside), newest first, then those that mean what it
    asks (`by_meaning`), most similar first."""
    found = mine(owner) if origin is None else mine(owner).filter(origin=origin)
    found = found.order_by("-created_at", "-pk")
    if not query.split():
        return found
    for word in query.split():
        found = found.filter(text__icontains=word)
    by_words = list(found)
    seen = {memory.pk for memory in by_words}
    return by_words + [m for m in by_meaning(owner, query, origin) if m.pk not in seen]


def by_meaning(owner: User, query: str, origin: str | None = None) -> list[Memory]:
    """What recall would find for `query`, with the same embedder and relevance floor, most
    similar first: "which colour do I like" finds "My favourite colour is green"."""
    if not mine(owner).exists():
        return []  # no embedding for a person with nothing to find
    vector = store.embed(query)
    if not any(vector):
        return []
    floor = store.relevance_floor()
    near = store.nearest(owner, vector, SEARCH_CANDIDATES, strict=True, origin=origin)
    return [memory for memory in near if 1.0 - memory.distance >= floor]


def copies_of(
    owner: User, memories: Iterable[Memory], *, besides: Iterable[int] = ()
) -> list[Memory]:
    """The owner's other memories that state what any of `memories` states (facts and runs'
    outcomes alike), oldest first; none of `memories` nor of `besides`. Each memory's stored
    vector and text are what is compared, so this embeds nothing."""
    chosen = list(memories)
    left_out = {memory.pk for memory in chosen} | set(besides)
    found: dict[int, Memory] = {}
    vectors = dict(mine(owner).filter(pk__in=left_out).values_list("pk", "embedding"))
    for memory in chosen:
        vector = vectors.get(memory.pk)
        if vector is None:
            continue
        for copy in stating(owner, memory.text, as_vector(vector)):
            if copy.pk not in left_out:
                found.setdefault(copy.pk, copy)
    return sorted(found.values(), key=lambda memory: (memory.created_at, memory.pk))


def stating(owner: User, text: str, vector: Vector) -> list[Memory]:
    """The owner's memories that state what `text` (of that vector) states: by meaning, at
    least the same-fact similarity, or by the words, holding every content word of it ("My
    favourite city is Lisbon": favourite, city and lisbon, which a run's answer quoting it
    holds, and "My favourite city is Porto" does not)."""
    threshold = store.same_fact_similarity()
    near = store.nearest(owner, vector, COPY_CANDIDATES, strict=True) if any(vector) else []
    found: dict[int, Memory] = {
        memory.pk: memory for memory in near if 1.0 - memory.distance >= threshold
    }
    for memory in holding_words_of(owner, text):
        found.setdefault(memory.pk, memory)
    return list(found.values())


def as_vector(stored: Any) -> Vector:
    """A stored embedding (pgvector's HalfVector, as the database gives it) as a plain list."""
    values = stored.to_list() if hasattr(stored, "to_list") else stored
    return [float(value) for value in values]


def holding_words_of(owner: User, text: str) -> list[Memory]:
    """The owner's memories holding every content word of `text` as a word (not inside
    another: "city" is not in "velocity"); nothing for a text of none or of too many."""
    wanted = set(words(text))
    if not wanted or len(wanted) > MAX_COPY_WORDS:
        return []
    holding = reduce(and_, (Q(text__icontains=word) for word in wanted))
    return [memory for memory in mine(owner).filter(holding) if wanted <= set(words(memory.text))]


def memory_of(owner: User, memory_id: int) -> Memory:
    """The owner's memory of that id; anyone else's raises Memory.DoesNotExist."""
    return mine(owner).get(pk=memory_id)


def checked_text(text: str) -> str:
    """The text as it will be stored, or InvalidMemory saying what is wrong with it."""
    text = text.strip()
    if not text:
        raise InvalidMemory("A memory needs some text.")
    if len(text) > store.MAX_MEMORY_CHARS:
        raise InvalidMemory(f"A memory holds at most {store.MAX_MEMORY_CHARS:,} characters.")
    if "\x00" in text:
        raise InvalidMemory("A memory cannot hold a NUL character.")
    return text


def add_by_hand(owner: User, text: str) -> store.Remembered:
    """Remember `text` because its owner said so; the outcome says whether it was new, already
    there (DUPLICATE), an update of a nearly identical one (MERGED) or not kept (DROPPED)."""
    return store.remember(
        owner, checked_text(text), importance=BY_HAND_IMPORTANCE, origin=Origin.TOLD
    )


def edit(owner: User, memory_id: int, text: str) -> Edited:
    """Give the owner's memory a new text: a new embedding and content hash, so recall finds it
    by what it says now. Another memory of theirs that the new text duplicates (the same hash,
    or at least the merge similarity) is folded into this one: its recalls count here, and it
    is gone. Whose the memory is, is asked first: another's, or none, costs no embedding."""
    if not mine(owner).filter(pk=memory_id).exists():
        raise Memory.DoesNotExist(f"No memory {memory_id} of this owner.")
    text = checked_text(text)
    digest, vector = store.content_hash(text), store.embed(text)
    with transaction.atomic():
        # One change at a time per owner, as remember() does, so a run ending now cannot store
        # a duplicate of the new text beside it.
        get_user_model().objects.select_for_update(no_key=True).filter(pk=owner.pk).first()
        memory = Memory.objects.select_for_update().get(owner=owner, pk=memory_id)
        before = stating(owner, memory.text, as_vector(memory.embedding))
        redundant = _redundant_with(owner, memory, digest, vector)
        for other in redundant:
            _absorb(memory, other)
        Memory.objects.filter(pk__in=[other.pk for other in redundant]).delete()
        memory.text, memory.content_hash, memory.embedding = text, digest, vector
        memory.save()
        now = {copy.pk for copy in stating(owner, text, vector)}
        gone = {memory.pk} | {other.pk for other in redundant} | now
        stale = sorted(
            (copy for copy in before if copy.pk not in gone), key=lambda m: (m.created_at, m.pk)
        )
    return Edited(memory, [other.pk for other in redundant], stale)


def _redundant_with(owner: User, memory: Memory, digest: str, vector: Vector) -> list[Memory]:
    """The owner's other memories that would duplicate `memory` once it holds the new text."""
    same = Memory.objects.filter(owner=owner, content_hash=digest).exclude(pk=memory.pk)
    redundant = {other.pk: other for other in same.select_for_update()}
    for near in store.nearest(owner, vector, 2, strict=True):
        if near.pk != memory.pk and 1.0 - near.distance >= store.merge_similarity():
            redundant.setdefault(near.pk, near)
    return list(redundant.values())


def _absorb(memory: Memory, other: Memory) -> None:
    """What makes `other` worth keeping carries over to `memory`, which replaces it."""
    memory.importance = max(memory.importance, other.importance)
    memory.recall_count += other.recall_count
    if other.last_recalled_at and (
        memory.last_recalled_at is None or other.last_recalled_at > memory.last_recalled_at
    ):
        memory.last_recalled_at = other.last_recalled_at


def these(owner: User, memory_ids: Iterable[int]) -> QuerySet[Memory]:
    """Those of the ids that are the owner's memories (others' do not exist here)."""
    return mine(owner).filter(pk__in=list(memory_ids))
