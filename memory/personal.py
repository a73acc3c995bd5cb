"""A person's own memories, as they see and change them on the Memories page: list and search,
add by hand, edit, forget. Another person's memory does not exist here (Memory.DoesNotExist).

Adding goes through the store's remember() (its duplicate and merge rules, its bound); an edit
re-embeds the memory and keeps the same rules: a memory the edit makes the same as, or nearly
the same as, another of the person's absorbs that other one, so no two say the same thing.
Forgetting picks the memories here (`these`, `mine`); the layer above forgets them through
memory.forgetting, recorded as an operator's is, and takes their texts out of the owner's runs.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import QuerySet

from memory import store
from memory.embedders import Vector
from memory.models import Memory, Origin

# A memory written by hand matters as much as one the model stores on purpose (memory/tools.py).
BY_HAND_IMPORTANCE = 0.7


class InvalidMemory(ValueError):
    """A text that cannot be a memory; its message says why, for the person."""


@dataclass(frozen=True)
class Edited:
    memory: Memory
    # The ids of the person's other memories the edit made redundant, now part of this one.
    absorbed: list[int] = field(default_factory=list)


def mine(owner: AbstractBaseUser) -> QuerySet[Memory]:
    """The owner's memories, without their vectors (for the index, not for reading)."""
    return Memory.objects.filter(owner=owner).defer("embedding")


def memories_of(owner: AbstractBaseUser, query: str = "") -> QuerySet[Memory]:
    """The owner's memories, newest first; with a query, those whose text holds each of its
    words (case aside)."""
    found = mine(owner)
    for word in query.split():
        found = found.filter(text__icontains=word)
    return found.order_by("-created_at", "-pk")


def memory_of(owner: AbstractBaseUser, memory_id: int) -> Memory:
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


def add_by_hand(owner: AbstractBaseUser, text: str) -> store.Remembered:
    """Remember `text` because its owner said so; the outcome says whether it was new, already
    there (DUPLICATE), an update of a nearly identical one (MERGED) or not kept (DROPPED)."""
    return store.remember(
        owner, checked_text(text), importance=BY_HAND_IMPORTANCE, origin=Origin.TOLD
    )


def edit(owner: AbstractBaseUser, memory_id: int, text: str) -> Edited:
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
        redundant = _redundant_with(owner, memory, digest, vector)
        for other in redundant:
            _absorb(memory, other)
        Memory.objects.filter(pk__in=[other.pk for other in redundant]).delete()
        memory.text, memory.content_hash, memory.embedding = text, digest, vector
        memory.save()
    return Edited(memory, [other.pk for other in redundant])


def _redundant_with(
    owner: AbstractBaseUser, memory: Memory, digest: str, vector: Vector
) -> list[Memory]:
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


def these(owner: AbstractBaseUser, memory_ids: Iterable[int]) -> QuerySet[Memory]:
    """Those of the ids that are the owner's memories (others' do not exist here)."""
    return mine(owner).filter(pk__in=list(memory_ids))
