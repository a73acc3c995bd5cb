"""Recall latency and quality at scale: pgvector's HNSW index, exact search and the naive way.

    .venv/bin/python bench/memory.py [--n 100000] [--queries 50] [--naive-queries 3]
        [--ef-search 40,100,200] [--real N] [--m 16] [--ef-construction 64] [--only 1|2] [--keep]
        [--compare 24/128]
    nice -n 19 .venv/bin/python bench/memory.py --n 1000000 --only 1 --naive-queries 0 --keep \\
        --database loop_bench_1m

Runs in its own database (`loop_bench` on the same server), filled with deterministic memories.
Their vectors: the first --real texts (synthetic, from MiniLM's own vocabulary; by default one for
every 40 memories, at least 3,000) embedded by the configured embedder (all-MiniLM-L6-v2 by
default), kept in var/bench/ for later runs; the rest, when --n is larger, are made around those
real embeddings (each a mix of two of them with some noise, normalised), since MiniLM embeds only
some 20 to 100 texts a second on this machine's CPUs. The output says how many vectors are which.
bench/memory_vectors.py checks that made vectors are as hard for a graph index as real ones: with
333 made around each real one (3,000 at a million, before) they were twice as hard (docs/memory.md).
Questions are always real embeddings of questions reworded from stored texts. Two scenarios:
(1) one user with n memories: recall through the HNSW index (what Loop does), by exact scan, and
    the naive way (fetch the user's rows, cosine in Python);
(2) n memories over 1,000 users, queries by random users: the filtered case, where an HNSW scan
    without pgvector's iterative scan returns too few of that user's rows.
Each prints p50/p95 latency and recall@10 against the exact result, and the load average.
--keep leaves the filled database for the next run with the same data and index (a 1,000,000
memory index takes a while to build on two cores); --ef-search adds HNSW lines at those ef_search.
--compare M/EF_CONSTRUCTION builds a second HNSW index on the same store (kept with it) and times
scenario 1's searches through each index in turn, at Loop's ef_search and at each --ef-search,
alternating passes, so that a denser graph is compared with Loop's on the same rows and load;
then what an insert costs with each (the questions stored, rolled back).
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
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402
from pgvector.django import CosineDistance, HnswIndex  # noqa: E402

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
# Texts the embedder embeds (cached in var/bench/); more memories are made around them: at least
# REAL, and one for every MADE_PER_REAL memories, so that a real vector never has more made ones
# around it than at 100,000. With 3,000 at a million (333 around each), the made vectors were
# far harder for a graph index than MiniLM's own (see NOISE).
REAL = 3000
MADE_PER_REAL = 40


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


def embedded(embedder: Embedder, texts: list[str]) -> "np.ndarray":
    """The texts' vectors, from var/bench/ when an earlier run made them."""
    digest = hashlib.sha256("\n\0".join(texts).encode()).hexdigest()[:16]
    cache = Path(settings.VAR_DIR) / "bench" / f"{embedder.name}-{len(texts)}-{digest}.npy"
    if cache.exists():
        return np.load(cache)
    vectors: list[Vector] = []
    started = time.perf_counter()
    for start in range(0, len(texts), 500):
        vectors += embedder.embed(texts[start : start + 500])
        took = time.perf_counter() - started
        print(f"  embedded {len(vectors):,} of {len(texts):,} texts in {took:.0f} s", flush=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, np.array(vectors, dtype=np.float32))
    return np.load(cache)


# How far a made vector strays from its mix of two real ones (the norm of the noise added to a
# unit vector), chosen so that made vectors lie from one another as MiniLM's do: among 3,000, the
# nearest and the 10th nearest at cosine distance 0.24 and 0.37 on average, any two at 0.55
# (MiniLM's own: 0.30, 0.35 and 0.58). Too many made around one real vector and that noise alone
# orders a question's nearest (MADE_PER_REAL).
NOISE = 0.35


@dataclass
class Data:
    texts: list[str]
    vectors: "np.ndarray"  # float32, one row per text, unit length
    real: int  # the first `real` are the embedder's; the rest made around them

    def describe(self) -> str:
        made = len(self.texts) - self.real
        said = f"{self.real:,} {get_embedder().name} embeddings of synthetic texts"
        if made:
            said += (
                f" + {made:,} made around them (a mix of two, weight 0.5-1, noise {NOISE},"
                " normalised; each with the text of its main part)"
            )
        return said


def dataset(n: int, real: int) -> Data:
    """n memories' texts and vectors: `real` embedded, the rest mixed from those (see NOISE)."""
    real = min(n, real)
    texts = stored_texts(real)
    base = embedded(get_embedder(), texts)
    if n == real:
        return Data(texts, base, real)
    rng = np.random.default_rng(3)
    made = n - real
    first, second = rng.integers(real, size=made), rng.integers(real, size=made)
    weight = rng.uniform(0.5, 1.0, size=(made, 1)).astype(np.float32)
    noise = rng.standard_normal((made, base.shape[1]), dtype=np.float32)
    noise *= NOISE / math.sqrt(base.shape[1])
    vectors = weight * base[first] + (1 - weight) * base[second] + noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts += [f"{texts[main]} ({real + i})" for i, main in enumerate(first.tolist())]
    return Data(texts, np.concatenate([base, vectors]), real)


def fill(owners: Sequence[int], data: Data, index: HnswIndex) -> None:
    """The memories spread round-robin over owners, copied in with the HNSW index dropped and
    built once at the end, as one would bulk-load; the build's time and memory printed."""
    EmbeddingSpace.objects.update_or_create(pk=1, defaults={"embedder": get_embedder().name})
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS memory_embedding_hnsw")
    started = time.perf_counter()
    copy_in(owners, data)
    loaded = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("SHOW maintenance_work_mem")
        memory = cursor.fetchone()[0]
        cursor.execute("SHOW max_parallel_maintenance_workers")
        workers = cursor.fetchone()[0]
    notices: list[str] = []
    connection.connection.add_notice_handler(lambda notice: notices.append(notice.message_primary))
    started = time.perf_counter()
    with connection.schema_editor() as editor:
        editor.add_index(Memory, index)
    built = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_memory")
        cursor.execute("SELECT pg_size_pretty(pg_relation_size('memory_embedding_hnsw'))")
        size = cursor.fetchone()[0]
    print(
        f"  loaded {len(data.texts):,} rows in {loaded:.0f} s; HNSW index (m {index.m}, "
        f"ef_construction {index.ef_construction}) built in {built:.0f} s with "
        f"maintenance_work_mem {memory} and {workers} parallel workers, {size}; {load()}"
    )
    for notice in notices:
        print(f"  PostgreSQL: {notice}")


def copy_in(owners: Sequence[int], data: Data) -> None:
    """COPY in binary: a million rows through the ORM would take longer than the index build."""
    from pgvector import HalfVector
    from pgvector.psycopg import register_vector

    raw = connection.connection
    register_vector(raw)
    names = (
        "owner_id",
        "text",
        "embedding",
        "content_hash",
        "origin",
        "importance",
        "created_at",
        "updated_at",
        "recall_count",
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute "
            "WHERE attrelid = 'memory_memory'::regclass AND attnum > 0"
        )
        types = dict(cursor.fetchall())
    columns = {name: types[name] for name in names}
    now = timezone.now()
    halves = data.vectors.astype(np.float16)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("TRUNCATE memory_memory")
        statement = f"COPY memory_memory ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"
        with raw.cursor().copy(statement) as copy:
            copy.set_types(list(columns.values()))
            for row, text in enumerate(data.texts):
                owner = owners[row % len(owners)]
                vector = HalfVector(halves[row])
                copy.write_row([owner, text, vector, str(row), "run", 0.5, now, now, 0])


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} (1 / 5 min) on {os.cpu_count()} cores"


Found = list[tuple[int, float]]  # (memory id, cosine distance), nearest first
Case = tuple[int, Vector, str]  # owner, question's vector, question
Search = Callable[[int, Vector], Found]
# Latencies (s), results, and CPU per search (s): this process's and its PostgreSQL backend's, a
# figure that a busy machine's waiting does not inflate (parallel workers' CPU not counted).
Timed = tuple[list[float], list[Found], float]


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


def todays_query(owner: int, vector: Vector) -> Found:
    """Loop's recall query before issue 27 (commit 3d03d96), for the figures beside it: two SET
    LOCALs of their own, ef_search 300."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute("SET LOCAL hnsw.ef_search = %s", [300])
        found = list(
            Memory.objects.filter(owner=owner)
            .annotate(distance=CosineDistance("embedding", vector))
            .order_by("distance")
            .defer("embedding")[:K]
        )
    return [(memory.pk, memory.distance) for memory in found]


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
    cpu = cpu_seconds()
    for owner, _, question in cases:
        started = time.perf_counter()
        recalled = store.recall(owner, question, k=K)
        latencies.append(time.perf_counter() - started)
        results.append([(m.id, 1.0 - m.parts["similarity"]) for m in recalled])
    return latencies, results, (cpu_seconds() - cpu) / max(len(cases), 1)


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


def explained(owner: int, vector: Vector) -> list[str]:
    """EXPLAIN ANALYZE of Loop's recall query, with Loop's settings: the plan it really runs."""
    with transaction.atomic():
        store.set_search(K)
        queryset = (
            Memory.objects.filter(owner_id=owner)
            .annotate(distance=CosineDistance("embedding", vector))
            .order_by("distance")
            .defer("embedding")[:K]
        )
        return str(queryset.explain(analyze=True, buffers=True)).splitlines()


def loop_ef_search() -> str:
    """The ef_search Loop's recall sets on this store (it grows with the store's size)."""
    with transaction.atomic(), connection.cursor() as cursor:
        store.set_search(K)
        cursor.execute("SHOW hnsw.ef_search")
        return str(cursor.fetchone()[0])


def timed(search: Search, cases: list[Case]) -> Timed:
    latencies: list[float] = []
    results: list[Found] = []
    cpu = cpu_seconds()
    for owner, vector, _ in cases:
        started = time.perf_counter()
        results.append(search(owner, vector))
        latencies.append(time.perf_counter() - started)
    return latencies, results, (cpu_seconds() - cpu) / max(len(cases), 1)


def cpu_seconds() -> float:
    """CPU time of this process and of its connection's PostgreSQL backend, so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    fields = Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime and stime
    return time.process_time() + ticks / os.sysconf("SC_CLK_TCK")


def recall_at_k(found: list[Found], truth: list[Found]) -> float:
    """The share of the true top k found; a memory tied with the k-th counts as found too."""

    def share(mine: Found, true: Found) -> float:
        kth = true[-1][1] + TIE if len(true) == K else float("inf")
        return min(sum(distance <= kth for _, distance in mine), len(true)) / max(len(true), 1)

    return statistics.mean(share(mine, true) for mine, true in zip(found, truth, strict=True))


def report(
    name: str, latencies: list[float], found: list[Found], cpu: float, truth: list[Found]
) -> float:
    p50 = statistics.median(latencies) * 1000
    p95 = statistics.quantiles(latencies, n=20)[-1] * 1000 if len(latencies) > 1 else p50
    quality = recall_at_k(found, truth)
    print(
        f"  {name:<36} p50 {p50:9.2f} ms   p95 {p95:9.2f} ms   cpu {cpu * 1000:8.2f} ms"
        f"   recall@10 {quality:.3f}"
    )
    return p50


def scenario_one(data: Data, options: argparse.Namespace, rng: random.Random) -> None:
    n = len(data.texts)
    owner = prepare(1, data, options)[0]
    cases = cases_for([owner], data.texts, options.queries, rng)
    truth = timed(exact, cases)
    timed(through_index, cases)  # untimed: the index's pages into the cache, as in use
    index = timed(through_index, cases)
    before = timed(todays_query, cases)
    sweep = {ef: timed(with_ef_search(ef), cases) for ef in options.ef_search}
    whole = end_to_end(cases)
    slow = timed(naive, cases[: options.naive_queries])
    print(f"(1) one user with {n:,} memories; recall plan: {plan(owner, cases[0][1])}; {load()}")
    for line in explained(owner, cases[-1][1]):
        print(f"  | {line}")
    hnsw_p50 = report(f"HNSW search (Loop's query, ef {loop_ef_search()})", *index, truth[1])
    report("HNSW search, today's query (ef 300)", *before, truth[1])
    for ef, measured in sweep.items():
        report(f"HNSW search, ef_search {ef}", *measured, truth[1])
    report("Loop's recall, end to end", *whole, truth[1])
    report("exact scan", *truth, truth[1])
    speedup = math.inf
    if options.naive_queries:
        label = f"naive, Python cosine ({options.naive_queries} queries)"
        naive_p50 = report(label, *slow, truth[1][: options.naive_queries])
        speedup = naive_p50 / hnsw_p50
        print(f"  HNSW is {speedup:,.0f}x faster than the naive way")
    print(f"  {misses(index[1], truth[1])}")
    if options.compare:
        compare(options, cases, truth[1])
    quality = recall_at_k(index[1], truth[1])
    met = hnsw_p50 < 10 and quality >= 0.95 and speedup >= 20
    print(f"  floors (p50 < 10 ms, recall@10 >= 0.95, >= 20x naive): {verdict(met)}")
    if n <= 100_000:
        print(f"  issue 27's (p50 < 10 ms, recall@10 >= 0.97): {verdict(met and quality >= 0.97)}")


def misses(found: list[Found], truth: list[Found]) -> str:
    """What the index missed: how far beyond the true k-th the memories it returned instead lie.
    A few thousandths would be near-ties (the question's nearest nearly equidistant); more is the
    graph search stopping short."""
    beyond = [
        distance - true[-1][1]
        for mine, true in zip(found, truth, strict=True)
        for _, distance in mine
        if len(true) == K and distance > true[-1][1] + TIE
    ]
    if not beyond:
        return "missed: none of the true nearest"
    return (
        f"missed: {len(beyond)} of {K * len(truth)} true nearest; what came instead lay beyond"
        f" the true {K}th by {statistics.median(beyond):.4f} (median), {max(beyond):.4f} at most"
    )


def compare(options: argparse.Namespace, cases: list[Case], truth: list[Found]) -> None:
    """Loop's index and the --compare one on the same store, in alternating passes, each at
    Loop's ef_search and at every --ef-search."""
    mine = hnsw_index(options).name
    other = second_index(options)
    sweep: list[int | None] = [None, *options.ef_search]
    runs: dict[tuple[str, int | None], list[Timed]] = {}
    for name in (mine, other):  # untimed: each index's pages into the cache, as in use
        through_only(name, (mine, other), through_index, cases)
    for _ in range(2):
        for name in (mine, other):
            for ef in sweep:
                search = through_index if ef is None else with_ef_search(ef)
                runs.setdefault((name, ef), []).append(
                    through_only(name, (mine, other), search, cases)
                )
    for (name, ef), measured in runs.items():
        latencies = [latency for run in measured for latency in run[0]]
        cpu = statistics.mean(run[2] for run in measured)
        label = f"{'Loop' if name == mine else options.compare}, ef {ef or loop_ef_search()}"
        report(f"  {label} (2 passes)", latencies, measured[0][1], cpu, truth)
    for _ in range(2):
        for name in (mine, other):
            latencies, cpu = inserted(name, (mine, other), cases)
            label = "Loop's index" if name == mine else options.compare
            print(
                f"    an insert, {label:<24} p50 {statistics.median(latencies) * 1000:9.2f} ms"
                f"   cpu {cpu * 1000:8.2f} ms"
            )


def inserted(name: str, indexes: Sequence[str], cases: list[Case]) -> tuple[list[float], float]:
    """What storing a memory costs with this index alone: the questions stored as memories,
    one statement each, in a transaction rolled back. Latencies (s) and CPU per insert."""
    latencies: list[float] = []
    with transaction.atomic():
        with connection.cursor() as cursor:
            for other in indexes:
                if other != name:
                    cursor.execute(f"DROP INDEX {other}")
        cpu = cpu_seconds()
        for n, (owner, vector, question) in enumerate(cases):
            started = time.perf_counter()
            Memory.objects.create(
                owner_id=owner, text=question, embedding=vector, content_hash=f"bench {n}"
            )
            latencies.append(time.perf_counter() - started)
        cpu = (cpu_seconds() - cpu) / max(len(cases), 1)
        transaction.set_rollback(True)
    return latencies, cpu


def second_index(options: argparse.Namespace) -> str:
    """The --compare index on the store, built unless an earlier run left it (--keep)."""
    m, ef_construction = whole_numbers(options.compare.replace("/", ","))
    name = f"memory_embedding_hnsw_m{m}_ef{ef_construction}"
    opclass = hnsw_index(options).opclasses[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        if cursor.fetchone()[0]:
            return name
        started = time.perf_counter()
        cursor.execute(
            f"CREATE INDEX {name} ON memory_memory USING hnsw (embedding {opclass}) "
            f"WITH (m = {m}, ef_construction = {ef_construction})"
        )
        built = time.perf_counter() - started
        cursor.execute("SELECT pg_size_pretty(pg_relation_size(%s))", [name])
        size = cursor.fetchone()[0]
    print(f"  HNSW index m {m}, ef_construction {ef_construction} built in {built:.0f} s, {size}")
    return name


def through_only(name: str, indexes: Sequence[str], search: Search, cases: list[Case]) -> Timed:
    """The searches with the other indexes dropped for a transaction that is rolled back, so
    that the planner can only take `name`; the drop is not timed."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            for other in indexes:
                if other != name:
                    cursor.execute(f"DROP INDEX {other}")
        measured = timed(search, cases)
        transaction.set_rollback(True)
    return measured


def with_ef_search(ef: int) -> Search:
    def search(owner: int, vector: Vector) -> Found:
        was = store.EF_SEARCH, store.EF_SEARCH_PER_DECADE
        store.EF_SEARCH, store.EF_SEARCH_PER_DECADE = ef, 0  # this ef_search whatever the size
        try:
            return through_index(owner, vector)
        finally:
            store.EF_SEARCH, store.EF_SEARCH_PER_DECADE = was

    return search


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def scenario_two(data: Data, options: argparse.Namespace, rng: random.Random) -> None:
    n = len(data.texts)
    owners = prepare(USERS_IN_SCENARIO_2, data, options)
    cases = cases_for(owners, data.texts, options.queries, rng)
    truth = timed(exact, cases)
    index = timed(through_index, cases)
    whole = end_to_end(cases)
    iterative = timed(lambda o, v: forced_index(o, v, iterative=True), cases)
    plain = timed(lambda o, v: forced_index(o, v, iterative=False), cases)
    print(
        f"(2) {n:,} memories over {len(owners):,} users, queries by random users; "
        f"recall plan: {plan(cases[0][0], cases[0][1])}; {load()}"
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


def prepare(users: int, data: Data, options: argparse.Namespace) -> list[int]:
    """The owners of a filled store: the kept one if it holds this data and index (--keep),
    otherwise filled afresh."""
    index = hnsw_index(options)
    key = ":".join(
        [
            str(users),
            str(len(data.texts)),
            str(data.real),
            str(NOISE),
            hashlib.sha256(data.vectors[:: max(1, len(data.texts) // 1000)].tobytes()).hexdigest(),
            f"{index.m}/{index.ef_construction}",
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_fill (key text, owners bigint[])")
        cursor.execute("SELECT owners FROM bench_fill WHERE key = %s", [key])
        kept = cursor.fetchone()
        if kept and options.keep:
            print(f"  the store kept from an earlier run (--keep): {key}")
            return kept[0]
        cursor.execute("TRUNCATE memory_memory, bench_fill")
        cursor.execute(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = %s::regclass"
            " AND indexrelid::regclass::text LIKE 'memory_embedding_hnsw_m%%'",
            ["memory_memory"],
        )
        for (compared,) in cursor.fetchall():  # --compare's, built for the rows it held
            cursor.execute(f"DROP INDEX {compared}")
    owners = make_users(users)
    fill(owners, data, index)
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_fill VALUES (%s, %s)", [key, owners])
    return owners


def hnsw_index(options: argparse.Namespace) -> HnswIndex:
    """Loop's HNSW index, or one with the --m and --ef-construction asked for."""
    model = next(i for i in Memory._meta.indexes if i.name == "memory_embedding_hnsw")
    return HnswIndex(
        name=model.name,
        fields=model.fields,
        m=options.m or model.m,
        ef_construction=options.ef_construction or model.ef_construction,
        opclasses=model.opclasses,
    )


def make_users(count: int) -> list[int]:
    users = get_user_model()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE memory_memory")  # the ORM's cascade would load each memory
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


def whole_numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--naive-queries", type=int, default=3)
    parser.add_argument("--ef-search", type=whole_numbers, default=[])
    parser.add_argument(
        "--real", type=int, default=0, help=f"vectors the embedder makes (max({REAL}, n / 40))"
    )
    parser.add_argument("--m", type=int, default=0, help="HNSW m other than Loop's")
    parser.add_argument("--ef-construction", type=int, default=0)
    parser.add_argument("--compare", default="", help="M/EF_CONSTRUCTION of a second index")
    parser.add_argument("--only", type=int, choices=(1, 2), default=0)
    parser.add_argument("--keep", action="store_true", help="keep the filled store for reruns")
    parser.add_argument("--database", default="loop_bench", help="one per store kept at once")
    options = parser.parse_args()
    settings.LOOP_MEMORY_MIN_SIMILARITY = -1.0  # recall all k, to compare with exact search
    connection.settings_dict["TEST"]["NAME"] = options.database
    original = connection.creation.create_test_db(
        verbosity=0, autoclobber=True, keepdb=True, serialize=False
    )
    try:
        unniced_backend()
        data = dataset(options.n, options.real or max(REAL, options.n // MADE_PER_REAL))
        print(f"embedder: {get_embedder().name}; vectors: {data.describe()}")
        print(f"server: {sizing_shown()}")
        if options.only in (0, 1):
            scenario_one(data, options, random.Random(1))
        if options.only in (0, 2):
            scenario_two(data, options, random.Random(2))
    finally:
        if not options.keep:
            make_users(0)
            with connection.cursor() as cursor:
                cursor.execute("DROP TABLE IF EXISTS bench_fill")
        connection.creation.destroy_test_db(original, verbosity=0, keepdb=True)


def unniced_backend() -> None:
    """Searches run at this process's priority: the server started by an index build under
    `nice` would otherwise run them niced too (each backend is a fork of it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    with suppress(PermissionError):  # lowering a niceness takes root
        os.setpriority(os.PRIO_PROCESS, backend, mine)


def sizing_shown() -> str:
    names = ("shared_buffers", "effective_cache_size", "maintenance_work_mem", "work_mem")
    with connection.cursor() as cursor:
        shown = []
        for name in names:
            cursor.execute(f"SHOW {name}")
            shown.append(f"{name} {cursor.fetchone()[0]}")
    return ", ".join(shown)


if __name__ == "__main__":
    main()
