"""Recall latency and quality at scale: pgvector's HNSW index, exact search and the naive way.

    .venv/bin/python bench/memory.py [--n 100000] [--queries 50] [--naive-queries 3]

Runs in its own database (`loop_bench` on the same server), filled with deterministic synthetic
memories embedded by the configured embedder (all-MiniLM-L6-v2 by default). Embedding 100,000
texts with MiniLM takes a while on a CPU, so their vectors are kept in var/bench/ and reused by
later runs. Both scenarios store the same texts. Two scenarios:
(1) one user with n memories: recall through the HNSW index (what Loop does), by exact scan, and
    the naive way (fetch the user's rows, cosine in Python);
(2) n memories over 1,000 users, queries by random users: the filtered case, where an HNSW scan
    without pgvector's iterative scan returns too few of that user's rows.
Each prints p50/p95 latency and recall@10 against the exact result.
Floors: HNSW p50 under 10 ms, recall@10 at least 0.95, at least 20x faster than the naive way;
filtered p50 under 10 ms and recall@10 at least 0.95.
"""

import argparse
import hashlib
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from pgvector.django import CosineDistance  # noqa: E402

from memory import store  # noqa: E402
from memory.embedders import Embedder, Vector, get_embedder  # noqa: E402
from memory.hygiene import outcome_text  # noqa: E402
from memory.models import EmbeddingSpace, Memory  # noqa: E402
from memory.store import nearest  # noqa: E402

K = 10
# Distances this close to the k-th count as tied with it: embeddings are stored in half precision
# (about three significant digits), and Python and PostgreSQL round differently.
TIE = 1e-3
USERS_IN_SCENARIO_2 = 1000


def vocabulary(size: int = 5000) -> list[str]:
    """Real English words, each one word piece for MiniLM (whole words from its vocabulary), so
    texts are as long to embed as real ones; a deterministic choice of them."""
    from memory.neural import model_directory

    pieces = (model_directory() / "vocab.txt").read_text(encoding="utf-8").split()
    words = sorted(
        {piece for piece in pieces if piece.isalpha() and piece.isascii() and len(piece) > 2}
    )
    return random.Random(0).sample(words, size)


WORDS = vocabulary()


# Word frequencies follow Zipf's law, as in real text: a few words are common, most are rare.
ZIPF = [1 / rank**1.1 for rank in range(1, len(WORDS) + 1)]


def synthetic_text(rng: random.Random, n: int) -> str:
    task = " ".join(rng.choices(WORDS, weights=ZIPF, k=8))
    answer = " ".join(rng.choices(WORDS, weights=ZIPF, k=6))
    return outcome_text(task, "succeeded", f"{answer} ({n})", [])


def query_like(rng: random.Random, text: str) -> str:
    """A question close to a stored memory, not a copy: two task words dropped, one added."""
    words = text.split("\n")[0].split()[1:]
    for _ in range(2):
        words.pop(rng.randrange(len(words)))
    words.insert(rng.randrange(len(words)), rng.choices(WORDS, weights=ZIPF)[0])
    return "what was " + " ".join(words)


def stored_texts(n: int) -> list[str]:
    rng = random.Random(1)
    return [synthetic_text(rng, index) for index in range(n)]


def embedded(embedder: Embedder, texts: list[str]) -> list[Vector]:
    """The texts' vectors, from var/bench/ when an earlier run made them."""
    import numpy as np

    digest = hashlib.sha256("\n\0".join(texts).encode()).hexdigest()[:16]
    cache = Path(settings.VAR_DIR) / "bench" / f"{embedder.name}-{len(texts)}-{digest}.npy"
    if cache.exists():
        return np.load(cache).tolist()
    vectors: list[Vector] = []
    started = time.perf_counter()
    for start in range(0, len(texts), 2000):
        vectors += embedder.embed(texts[start : start + 2000])
        took = time.perf_counter() - started
        print(f"  embedded {len(vectors):,} of {len(texts):,} texts in {took:.0f} s", flush=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, np.array(vectors, dtype=np.float32))
    return vectors


def fill(owners: Sequence[int], texts: list[str], vectors: list[Vector]) -> None:
    """The memories spread round-robin over owners, loaded with the HNSW index dropped and rebuilt
    once at the end, as one would bulk-load."""
    Memory.objects.all().delete()
    EmbeddingSpace.objects.update_or_create(pk=1, defaults={"embedder": get_embedder().name})
    n = len(texts)
    index = next(i for i in Memory._meta.indexes if i.name == "memory_embedding_hnsw")
    with connection.schema_editor() as editor:
        editor.remove_index(Memory, index)
    for start in range(0, n, 2000):
        chunk = zip(texts[start : start + 2000], vectors[start : start + 2000], strict=True)
        Memory.objects.bulk_create(
            Memory(
                owner_id=owners[(start + offset) % len(owners)],
                text=text,
                embedding=vector,
                content_hash=f"{start + offset}",
            )
            for offset, (text, vector) in enumerate(chunk)
        )
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '1GB'")
    with connection.schema_editor() as editor:
        editor.add_index(Memory, index)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_memory")


Found = list[tuple[int, float]]  # (memory id, cosine distance), nearest first
Case = tuple[int, Vector, str]  # owner, question's vector, question
Search = Callable[[int, Vector], Found]
Timed = tuple[list[float], list[Found]]


def exact(owner: int, vector: Vector) -> Found:
    """The true nearest k of the owner's memories: no index, a full scan and a sort."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(
            "SELECT id, embedding <=> %s::halfvec AS distance FROM memory_memory "
            "WHERE owner_id = %s ORDER BY distance LIMIT %s",
            [str(vector), owner, K],
        )
        return cursor.fetchall()


def through_index(owner: int, vector: Vector) -> Found:
    """What Loop's recall does (memory.store.nearest)."""
    return [(memory.pk, memory.distance) for memory in nearest(owner, vector, K)]


def naive(owner: int, vector: Vector) -> Found:
    """Fetch every memory of the owner and rank them in Python."""
    rows = Memory.objects.filter(owner_id=owner).values_list("id", "embedding")
    scored = [
        (memory_id, 1.0 - math.fsum(a * b for a, b in zip(embedding, vector, strict=True)))
        for memory_id, embedding in rows
    ]
    return sorted(scored, key=lambda row: row[1])[:K]


def forced_index(owner: int, vector: Vector, *, iterative: bool) -> Found:
    """The HNSW index with the owner filter applied after it (owner_id + 0 keeps the planner off
    the owner index), with or without the iterative scan; otherwise as Loop's recall does it:
    the same candidate list, candidates re-sorted by distance."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL hnsw.iterative_scan = {'relaxed_order' if iterative else 'off'}")
        cursor.execute("SET LOCAL hnsw.ef_search = %s", [store.EF_SEARCH])
        cursor.execute(
            "WITH candidates AS MATERIALIZED ("
            " SELECT id, embedding <=> %s::halfvec AS distance FROM memory_memory"
            " WHERE owner_id + 0 = %s ORDER BY distance LIMIT %s"
            ") SELECT id, distance FROM candidates ORDER BY distance LIMIT %s",
            [str(vector), owner, K * store.CANDIDATES_PER_RESULT, K],
        )
        return cursor.fetchall()


def end_to_end(cases: list[Case]) -> Timed:
    """store.recall() whole: embedding the question, the checks, the search, the re-ranking and
    the recall counts it writes (with no relevance floor, so that all k come back)."""
    latencies: list[float] = []
    results: list[Found] = []
    for owner, _, question in cases:
        started = time.perf_counter()
        recalled = store.recall(owner, question, k=K)
        latencies.append(time.perf_counter() - started)
        results.append([(m.id, 1.0 - m.parts["similarity"]) for m in recalled])
    return latencies, results


def plan(owner: int, vector: Vector) -> str:
    queryset = Memory.objects.filter(owner_id=owner)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        explained = (
            queryset.annotate(distance=CosineDistance("embedding", vector))
            .order_by("distance")[:K]
            .explain()
        )
    return "HNSW index" if "memory_embedding_hnsw" in explained else "owner index, then sort"


def timed(search: Search, cases: list[Case]) -> Timed:
    latencies: list[float] = []
    results: list[Found] = []
    for owner, vector, _ in cases:
        started = time.perf_counter()
        results.append(search(owner, vector))
        latencies.append(time.perf_counter() - started)
    return latencies, results


def recall_at_k(found: list[Found], truth: list[Found]) -> float:
    """The share of the true top k found; a memory tied with the k-th counts as found too."""

    def share(mine: Found, true: Found) -> float:
        kth = true[-1][1] + TIE if len(true) == K else float("inf")
        return min(sum(distance <= kth for _, distance in mine), len(true)) / max(len(true), 1)

    return statistics.mean(share(mine, true) for mine, true in zip(found, truth, strict=True))


def report(
    name: str, latencies: list[float], found: list[list[int]], truth: list[list[int]]
) -> float:
    p50 = statistics.median(latencies) * 1000
    p95 = statistics.quantiles(latencies, n=20)[-1] * 1000 if len(latencies) > 1 else p50
    quality = recall_at_k(found, truth)
    print(f"  {name:<34} p50 {p50:9.2f} ms   p95 {p95:9.2f} ms   recall@10 {quality:.3f}")
    return p50


def scenario_one(
    texts: list[str], vectors: list[Vector], queries: int, naive_queries: int, rng: random.Random
) -> None:
    n = len(texts)
    owner = make_users(1)[0]
    fill([owner], texts, vectors)
    cases = cases_for([owner], texts, queries, rng)
    truth = timed(exact, cases)
    index = timed(through_index, cases)
    whole = end_to_end(cases)
    slow = timed(naive, cases[:naive_queries])
    print(f"(1) one user with {n:,} memories; recall plan: {plan(owner, cases[0][1])}")
    hnsw_p50 = report("HNSW search (Loop's query)", *index, truth[1])
    report("Loop's recall, end to end", *whole, truth[1])
    report("exact scan", *truth, truth[1])
    label = f"naive, Python cosine ({naive_queries} queries)"
    naive_p50 = report(label, *slow, truth[1][:naive_queries])
    speedup = naive_p50 / hnsw_p50
    print(f"  HNSW is {speedup:,.0f}x faster than the naive way")
    met = hnsw_p50 < 10 and recall_at_k(index[1], truth[1]) >= 0.95 and speedup >= 20
    print(f"  floors (p50 < 10 ms, recall@10 >= 0.95, >= 20x naive): {verdict(met)}")


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def scenario_two(texts: list[str], vectors: list[Vector], queries: int, rng: random.Random) -> None:
    n = len(texts)
    owners = make_users(USERS_IN_SCENARIO_2)
    fill(owners, texts, vectors)
    cases = cases_for(owners, texts, queries, rng)
    truth = timed(exact, cases)
    index = timed(through_index, cases)
    whole = end_to_end(cases)
    iterative = timed(lambda o, v: forced_index(o, v, iterative=True), cases)
    plain = timed(lambda o, v: forced_index(o, v, iterative=False), cases)
    print(
        f"(2) {n:,} memories over {len(owners):,} users, queries by random users; "
        f"recall plan: {plan(cases[0][0], cases[0][1])}"
    )
    p50 = report("Loop's query", *index, truth[1])
    report("Loop's recall, end to end", *whole, truth[1])
    report("exact scan", *truth, truth[1])
    report("HNSW forced, iterative scan", *iterative, truth[1])
    report("HNSW forced, no iterative scan", *plain, truth[1])
    returned = statistics.mean(len(result) for result in plain[1])
    print(f"  without the iterative scan a query gets {returned:.1f} of its {K} rows on average")
    met = p50 < 10 and recall_at_k(index[1], truth[1]) >= 0.95
    print(f"  floors (p50 < 10 ms, recall@10 >= 0.95): {verdict(met)}")


def make_users(count: int) -> list[int]:
    users = get_user_model()
    users.objects.all().delete()
    created = users.objects.bulk_create(users(username=f"bench-{n}") for n in range(count))
    return [user.pk for user in created]


def cases_for(owners: list[int], texts: list[str], count: int, rng: random.Random) -> list[Case]:
    embedder = get_embedder()
    picked = [rng.randrange(len(texts)) for _ in range(count)]
    questions = [query_like(rng, texts[i]) for i in picked]
    vectors = embedder.embed(questions)
    return [
        (owners[i % len(owners)], vector, question)
        for i, vector, question in zip(picked, vectors, questions, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--naive-queries", type=int, default=3)
    parser.add_argument("--ef-search", type=int, default=store.EF_SEARCH)
    options = parser.parse_args()
    store.EF_SEARCH = options.ef_search
    settings.LOOP_MEMORY_MIN_SIMILARITY = -1.0  # recall all k, to compare with exact search
    connection.settings_dict["TEST"]["NAME"] = "loop_bench"
    original = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=True)
    try:
        texts = stored_texts(options.n)
        vectors = embedded(get_embedder(), texts)
        print(f"embedder: {get_embedder().name}")
        scenario_one(texts, vectors, options.queries, options.naive_queries, random.Random(1))
        scenario_two(texts, vectors, options.queries, random.Random(2))
    finally:
        get_user_model().objects.all().delete()
        connection.creation.destroy_test_db(original, verbosity=0, keepdb=True)


if __name__ == "__main__":
    main()
