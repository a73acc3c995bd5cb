"""Remember and recall: a user's memories, kept relevant, deduplicated and bounded.

recall() asks the HNSW index for the nearest memories of one owner (with pgvector's iterative
scan, so a user with few memories among millions still gets their k), drops those under the
relevance floor, and re-ranks the rest by similarity, recency and importance, keeping each part of
the score so an auditor can see why a memory came back.
"""

import hashlib
import math
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from itertools import islice
from typing import TypeAlias, TypedDict

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import F
from django.utils import timezone
from django_stubs_ext import WithAnnotations
from pgvector.django import CosineDistance, HnswIndex

from core.recalled import RecalledMemory
from memory.embedders import Embedder, EmbedderMismatch, Vector, get_embedder
from memory.models import EmbeddingSpace, Memory, Origin

MAX_MEMORY_CHARS = 2000
# How far the index scan reaches: more candidates than k, so re-ranking has room to work.
CANDIDATES_PER_RESULT = 4
# The HNSW search's candidate list (pgvector's default is 40): what keeps recall@10 at 0.95 or
# more on a store of 100,000 memories (bench/memory.py); above that, the same candidate list finds
# less of the true nearest in a larger graph (0.936 at a million), so it grows by
# EF_SEARCH_PER_DECADE for each tenfold of the store beyond 100,000: 400 at a million (0.956;
# 500 gave 0.958 for a quarter more work).
EF_SEARCH = 300
EF_SEARCH_PER_DECADE = 100
EF_SEARCH_FROM_ROWS = 100_000
# How much each part weighs in the final score, as tuned on bench/memory_quality.py's tuning half:
# similarity first, recency enough that a correction outranks what it corrects.
WEIGHTS = {"similarity": 0.7, "recency": 0.225, "importance": 0.075}


class MemoryOutcome(StrEnum):
    """What became of a text given to `remember`; each caller words every one of them."""

    STORED = "stored"  # a new memory
    DUPLICATE = "duplicate"  # the same text was there already (its importance refreshed)
    MERGED = "merged"  # a nearly identical memory now has this wording
    DROPPED = "dropped"  # stored, then evicted at once: worth less than every memory kept


@dataclass(frozen=True)
class Remembered:
    memory: Memory
    outcome: MemoryOutcome


def remember(
    owner: User,
    text: str,
    *,
    importance: float = 0.5,
    origin: str = Origin.RUN,
    source_run_id: int | None = None,
) -> Remembered:
    """Store `text` for `owner`; an exact or near duplicate (of the same origin) updates what is
    there instead."""
    text = text.strip()[:MAX_MEMORY_CHARS]
    digest = content_hash(text)
    vector = embed(text)
    importance = min(max(importance, 0.0), 1.0)
    with transaction.atomic():
        # One remember at a time per owner, so two runs ending together cannot both miss a
        # duplicate of the other or both evict.
        _lock(owner)
        same = Memory.objects.filter(owner=owner, content_hash=digest).first()
        if same is not None:
            return Remembered(_touch(same, importance), MemoryOutcome.DUPLICATE)
        near = _nearest(owner, vector, origin)
        if near is not None and near.similarity >= merge_similarity():
            return Remembered(
                _supersede(near, text, digest, vector, importance, source_run_id),
                MemoryOutcome.MERGED,
            )
        memory = _create(owner, text, digest, vector, importance, origin, source_run_id)
        if memory.pk in evict_beyond_bound(owner):
            return Remembered(memory, MemoryOutcome.DROPPED)
    return Remembered(memory, MemoryOutcome.STORED)


def recall(owner: User, query: str, k: int | None = None) -> list[RecalledMemory]:
    """The owner's memories most relevant to `query`, best first, each with its score parts."""
    k = k or settings.LOOP_MEMORY_RECALL_K
    if not Memory.objects.filter(owner=owner).exists():
        return []  # a newcomer's first runs: no embedding of the task (tens of ms of CPU)
    vector = embed(query)
    if not any(vector):
        return []
    now = timezone.now()
    scored = [_score(memory, now) for memory in nearest(owner, vector, k * CANDIDATES_PER_RESULT)]
    floor = relevance_floor()
    kept = sorted((s for s in scored if s.parts["similarity"] >= floor), key=lambda s: -s.score)
    kept = kept[:k]
    Memory.objects.filter(pk__in=[memory.id for memory in kept]).update(
        recall_count=F("recall_count") + 1, last_recalled_at=now
    )
    return kept


class Distance(TypedDict):
    distance: float  # cosine distance to the vector searched for


# A memory found by nearest(), with its distance (a string: the alias takes no arguments at
# run time on Python 3.11).
NearMemory: TypeAlias = "WithAnnotations[Memory, Distance]"


def nearest(
    owner: User | int,
    vector: Vector,
    limit: int,
    *,
    strict: bool = False,
    origin: str | None = None,
) -> list[NearMemory]:
    """The owner's `limit` nearest memories by cosine distance, through the HNSW index.

    `strict` keeps the scan's results in exact distance order, for when the single nearest one
    matters; recall re-ranks its candidates anyway and takes the faster relaxed order.
    """
    # The search's settings are local to a transaction; inside remember's one, no savepoint
    # (two statements) is needed around them.
    with transaction.atomic(savepoint=False):
        set_search(limit, strict=strict)
        mine = Memory.objects.filter(owner=owner)
        if origin is not None:
            mine = mine.filter(origin=origin)
        return list(
            mine.annotate(distance=CosineDistance("embedding", vector))
            .order_by("distance")
            .defer("embedding")[:limit]
        )


def set_search(limit: int, *, strict: bool = False) -> None:
    """The HNSW search's settings for the rest of the current transaction.

    Filtering by owner after an index scan would leave too few rows for a user with few memories
    among many; the iterative scan keeps going until it has `limit` of theirs. Both settings last
    until the transaction ends (is_local), set in one round trip.
    The candidate list grows with the store's size as PostgreSQL last counted it (reltuples,
    kept by autovacuum's ANALYZE; -1 before the first), read in the same statement.
    """
    order = "strict_order" if strict else "relaxed_order"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('hnsw.iterative_scan', %s, true),"
            " set_config('hnsw.ef_search', greatest(%s, %s + %s * log(greatest(reltuples::numeric"
            " / %s, 1)))::int::text, true) FROM pg_class WHERE oid = %s::regclass",
            [
                order,
                limit,
                EF_SEARCH,
                EF_SEARCH_PER_DECADE,
                EF_SEARCH_FROM_ROWS,
                Memory._meta.db_table,
            ],
        )


def evict_beyond_bound(owner: User) -> set[int]:
    """Keep at most LOOP_MEMORY_MAX_PER_USER memories: the least valuable go first (`value`).
    Returns the ids of those deleted."""
    mine = Memory.objects.filter(owner=owner)
    excess = mine.count() - settings.LOOP_MEMORY_MAX_PER_USER
    if excess <= 0:
        return set()
    now = timezone.now()
    fields = ("pk", "importance", "recall_count", "last_recalled_at", "updated_at")
    by_value = sorted(mine.only(*fields), key=lambda memory: value(memory, now))
    doomed = {memory.pk for memory in by_value[:excess]}
    Memory.objects.filter(pk__in=doomed).delete()
    return doomed


def value(memory: Memory, now: datetime) -> float:
    """What a memory is worth keeping: its importance, how often it was recalled (up to four
    times counts), and how recently it was stored or recalled; each part weighs up to 1."""
    touched = memory.last_recalled_at or memory.updated_at
    return (
        memory.importance
        + min(memory.recall_count, 4) / 4
        + _recency((now - touched).total_seconds() / 86400)
    )


def _recency(age_days: float) -> float:
    half_life: float = settings.LOOP_MEMORY_HALF_LIFE_DAYS
    return float(0.5 ** (age_days / half_life))


def reembed(batch_size: int = 256) -> int:
    """Re-embed every memory with the configured embedder, in one transaction.

    Writers wait for it (the table is locked), and readers too when the dimension changes: run it
    while no runs are going. The HNSW index is dropped and built again once at the end, which is
    faster than updating it row by row; if the dimension changes, so does the column's type.
    """
    embedder = get_embedder()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {Memory._meta.db_table} IN SHARE ROW EXCLUSIVE MODE")
        with connection.schema_editor() as editor:
            # Checks deferred by an enclosing transaction would otherwise forbid the ALTER.
            editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            editor.remove_index(Memory, _hnsw_index())
            if stored_dimensions() != embedder.dimensions:
                _retype_column(editor, embedder.dimensions)
        count = 0
        rows = Memory.objects.order_by("pk").only("pk", "text")
        for batch in _batches(rows.iterator(chunk_size=batch_size), batch_size):
            vectors = embedder.embed([memory.text for memory in batch])
            # Row by row: bulk_update would cast to the dimension the model declares.
            for memory, vector in zip(batch, vectors, strict=True):
                Memory.objects.filter(pk=memory.pk).update(embedding=vector)
            count += len(batch)
        with connection.schema_editor() as editor:
            column = editor.quote_name("embedding")
            table = editor.quote_name(Memory._meta.db_table)
            editor.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL")
            editor.add_index(Memory, _hnsw_index())
        EmbeddingSpace.objects.update_or_create(pk=1, defaults={"embedder": embedder.name})
    return count


def _batches(memories: Iterator[Memory], size: int) -> Iterator[list[Memory]]:
    while batch := list(islice(memories, size)):
        yield batch


def _retype_column(editor: BaseDatabaseSchemaEditor, dimensions: int) -> None:
    """Empty the embedding column and retype it: vectors of one size cannot be cast to another."""
    column = editor.quote_name("embedding")
    editor.execute(
        f"ALTER TABLE {editor.quote_name(Memory._meta.db_table)} "
        f"ALTER COLUMN {column} DROP NOT NULL, "
        f"ALTER COLUMN {column} TYPE halfvec({int(dimensions)}) USING NULL"
    )


def _hnsw_index() -> HnswIndex:
    return next(index for index in Memory._meta.indexes if isinstance(index, HnswIndex))


def content_hash(text: str) -> str:
    """Equal for texts that differ only in case, spacing, or a final full stop."""
    folded = " ".join(unicodedata.normalize("NFKC", text).casefold().split()).rstrip(".")
    return hashlib.sha256(folded.encode()).hexdigest()


def embed(text: str) -> Vector:
    embedder = get_embedder()
    check_embedder(embedder)
    return embedder.embed([text])[0]


def relevance_floor() -> float:
    """The similarity under which a memory is not worth recalling (nor finding by a search)."""
    configured = settings.LOOP_MEMORY_MIN_SIMILARITY
    return get_embedder().relevance_floor if configured is None else configured


def same_fact_similarity() -> float:
    """The similarity at which two memories state the same thing (the embedder's own)."""
    return get_embedder().same_fact_similarity


def merge_similarity() -> float:
    configured = settings.LOOP_MEMORY_MERGE_SIMILARITY
    return get_embedder().merge_similarity if configured is None else configured


def stored_dimensions() -> int:
    """The dimension of the embedding column as the database has it."""
    return stored_space()[1]


def stored_embedder() -> str:
    return stored_space()[0]


def stored_space() -> tuple[str, int]:
    """The store's embedder and its embedding column's dimension, in one round trip (every
    embed checks them)."""
    space = EmbeddingSpace._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT embedder FROM {space} ORDER BY id LIMIT 1), "  # noqa: S608 (our tables)
            "(SELECT atttypmod FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = 'embedding')",
            [Memory._meta.db_table],
        )
        name, dimensions = cursor.fetchone()
    return name or "", dimensions


def check_embedder(embedder: Embedder) -> None:
    """Vectors only compare with vectors of the same embedder: refuse to mix them."""
    name, dimensions = stored_space()
    if name != embedder.name and not Memory.objects.exists():
        # Nothing stored yet: the store is the configured embedder's from now on.
        EmbeddingSpace.objects.update_or_create(pk=1, defaults={"embedder": embedder.name})
        name = embedder.name
    if (name, dimensions) != (embedder.name, embedder.dimensions):
        raise EmbedderMismatch(
            f"The memory store holds {dimensions}-dimension embeddings made by {name!r}, but "
            f"LOOP_EMBEDDER is {embedder.name!r} ({embedder.dimensions} dimensions). Run "
            "`manage.py reembed` to re-embed every memory with it, or set LOOP_EMBEDDER back."
        )


@dataclass(frozen=True)
class _Near:
    memory: Memory
    similarity: float


def _lock(owner: User) -> None:
    """Lock the owner's row (its key alone is read back: nothing else is needed)."""
    users = get_user_model().objects.select_for_update(no_key=True).filter(pk=owner.pk)
    users.values_list("pk", flat=True).first()


def _nearest(owner: User, vector: Vector, origin: str) -> _Near | None:
    """The nearest memory of the same origin: a run's outcome never rewrites a fact the person
    gave, nor a fact an outcome."""
    found = nearest(owner, vector, 1, strict=True, origin=origin)
    return _Near(found[0], 1.0 - found[0].distance) if found else None


def _score(memory: NearMemory, now: datetime) -> RecalledMemory:
    age_days = (now - memory.updated_at).total_seconds() / 86400
    parts = {
        "similarity": round(1.0 - memory.distance, 4),
        "recency": round(_recency(age_days), 4),
        "importance": round(memory.importance, 4),
    }
    score = math.fsum(WEIGHTS[name] * value for name, value in parts.items())
    return RecalledMemory(memory.pk, memory.text, round(score, 4), parts)


def _touch(memory: Memory, importance: float) -> Memory:
    memory.importance = max(memory.importance, importance)
    memory.save(update_fields=["importance", "updated_at"])
    return memory


def _supersede(
    near: _Near,
    text: str,
    digest: str,
    vector: Vector,
    importance: float,
    source_run_id: int | None,
) -> Memory:
    """The newer wording of what is nearly the same memory replaces the older one."""
    memory = near.memory
    memory.text, memory.content_hash, memory.embedding = text, digest, vector
    memory.importance = max(memory.importance, importance)
    memory.source_run_id = source_run_id or memory.source_run_id
    memory.save(
        update_fields=[
            "text",
            "content_hash",
            "embedding",
            "importance",
            "source_run_id",
            "updated_at",
        ]
    )
    return memory


def _create(
    owner: User,
    text: str,
    digest: str,
    vector: Vector,
    importance: float,
    origin: str,
    source_run_id: int | None,
) -> Memory:
    try:
        with transaction.atomic():
            return Memory.objects.create(
                owner=owner,
                text=text,
                embedding=vector,
                content_hash=digest,
                importance=importance,
                origin=origin,
                source_run_id=source_run_id,
            )
    except IntegrityError:  # the same text, stored by a concurrent run a moment ago
        return Memory.objects.get(owner=owner, content_hash=digest)
