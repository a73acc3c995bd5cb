"""Long-term memory in the real PostgreSQL with pgvector: remember, recall, hygiene, reembed."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone
from pgvector.django import CosineDistance

from agent.toolset import default_registry
from chat.memories import ADDED
from memory import store
from memory.embedders import EmbedderMismatch, get_embedder
from memory.models import Memory, Origin
from memory.store import MemoryOutcome, recall, remember, stored_dimensions
from memory.tools import OUTCOMES
from tests.fakes import OtherEmbedder
from tools.base import ToolContext, ToolRegistry

pytestmark = pytest.mark.django_db

SUM = (
    "Task: Compute the sum of 1..100 and save it to a file\nOutcome: succeeded\n"
    "Answer: The sum of 1..100 is 5050. I saved it to sum.txt."
)
PORT = "The staging database listens on port 6543."


def drop_owner_indexes() -> None:
    """Inside the test's transaction (rolled back after it): leave the HNSW index as the only way
    to find a user's nearest memories, as it is for a large store."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the rows just stored have checks pending
        constraints = connection.introspection.get_constraints(cursor, Memory._meta.db_table)
        for name, info in constraints.items():
            if info["columns"] and info["columns"][0] == "owner_id":
                if info["unique"]:
                    cursor.execute(f"ALTER TABLE memory_memory DROP CONSTRAINT {name}")
                elif info["index"]:
                    cursor.execute(f"DROP INDEX {name}")
        cursor.execute("SET LOCAL enable_seqscan = off")


def cosine(first: str, second: str) -> float:
    a, b = get_embedder().embed([first, second])
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_a_stored_memory_is_found_for_a_related_query(alice):
    stored = remember(alice, SUM).memory
    remember(alice, PORT)
    [found] = recall(alice, "What was the sum of 1..100 that I computed before?")
    assert found.id == stored.pk
    assert found.text == SUM


def test_an_unrelated_query_returns_nothing(alice):
    remember(alice, SUM)
    remember(alice, PORT)
    assert recall(alice, "What's a good recipe for banana bread?") == []
    assert recall(alice, "???") == []  # nothing to embed


def test_a_person_with_nothing_to_recall_costs_no_embedding(alice, bob, monkeypatch):
    remember(bob, SUM)
    embedded: list[str] = []
    real_embed = store.embed
    monkeypatch.setattr(store, "embed", lambda text: embedded.append(text) or real_embed(text))
    assert recall(alice, SUM) == []
    assert embedded == []  # bob's memories are no reason to embed alice's query
    remember(alice, PORT)  # embedded as it is stored
    assert recall(alice, "Which port does the staging database listen on?")
    assert embedded == [PORT, "Which port does the staging database listen on?"]


def test_a_recalled_memory_carries_its_score_parts_and_is_counted(alice):
    remember(alice, SUM, importance=0.8)
    [found] = recall(alice, "the sum of 1..100")
    assert set(found.parts) == {"similarity", "recency", "importance"}
    assert found.parts["importance"] == 0.8
    assert found.parts["recency"] == pytest.approx(1.0, abs=0.01)  # stored a moment ago
    weighted = sum(store.WEIGHTS[name] * value for name, value in found.parts.items())
    assert found.score == pytest.approx(weighted, abs=1e-3)
    memory = Memory.objects.get()
    assert memory.recall_count == 1
    assert memory.last_recalled_at is not None


def test_recall_ranks_by_relevance_then_keeps_k(alice, settings):
    for n in range(5):
        remember(alice, f"Task: compute the sum of 1..{10**n}\nAnswer: done ({n})")
    remember(alice, SUM)
    found = recall(alice, "sum of 1..100 saved to sum.txt", k=3)
    assert len(found) == 3
    assert found[0].text == SUM
    assert [f.score for f in found] == sorted((f.score for f in found), reverse=True)


def test_another_users_memories_never_come_back_however_similar(alice, bob):
    remember(bob, SUM)
    remember(bob, PORT)
    assert recall(alice, SUM) == []
    remember(alice, "Alice's cat is called Pixel.")
    assert [m.text for m in recall(alice, SUM)] == []
    assert [m.text for m in recall(bob, SUM)] == [SUM]


@pytest.mark.django_db(transaction=True)
def test_a_user_with_few_memories_among_many_still_gets_theirs(alice, bob, monkeypatch, settings):
    # Earlier tests' rolled-back memories stay in the HNSW graph as dead entries until a vacuum;
    # this test measures the scan, so it starts from a clean graph.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM memory_memory")
    with transaction.atomic():  # the schema changes below are rolled back with it
        texts = [f"Task: compute the sum of 1..{n}\nAnswer: {n * (n + 1) // 2}" for n in range(300)]
        for text in texts:
            remember(bob, text)
        facts = ("Alice's cat is called Pixel.", PORT, "Alice deploys on Tuesdays.")
        mine = [remember(alice, fact).memory.pk for fact in facts]
        # Make PostgreSQL take the HNSW index, as it does for large stores, with a short candidate
        # list: filtering by owner after the index then finds none of Alice's among Bob's,
        # unless the iterative scan keeps going.
        monkeypatch.setattr(store, "EF_SEARCH", 4)
        drop_owner_indexes()
        vector = [0.1] * 384
        nearest = Memory.objects.filter(owner=alice).order_by(CosineDistance("embedding", vector))
        assert "memory_embedding_hnsw" in nearest[:12].explain()
        settings.LOOP_MEMORY_MIN_SIMILARITY = -1.0  # whatever their score, Alice's three come back
        found = recall(alice, texts[150], k=3)  # a question nearest to Bob's memories, not hers
        assert sorted(m.id for m in found) == sorted(mine)
        transaction.set_rollback(True)


@pytest.mark.django_db(transaction=True)
def test_a_larger_store_is_searched_with_more_candidates(alice, monkeypatch):
    """At a fixed ef_search a larger graph finds less of the true nearest (bench/memory.py:
    recall@10 0.94 at a million with 300), so the search keeps EF_SEARCH_PER_DECADE more
    candidates for each tenfold of the store beyond EF_SEARCH_FROM_ROWS, as ANALYZE counted it."""
    for n in range(10):
        vector = [0.0] * 384
        vector[n] = 1.0
        Memory.objects.create(owner=alice, text=f"m{n}", embedding=vector, content_hash=str(n))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_memory")

    def ef_search() -> int:
        with transaction.atomic(), connection.cursor() as cursor:
            store.set_search(10)
            cursor.execute("SHOW hnsw.ef_search")
            return int(cursor.fetchone()[0])

    assert ef_search() == store.EF_SEARCH
    monkeypatch.setattr(store, "EF_SEARCH_FROM_ROWS", 1)  # 10 rows: a tenfold beyond it
    assert ef_search() == store.EF_SEARCH + store.EF_SEARCH_PER_DECADE
    monkeypatch.setattr(store, "EF_SEARCH", 4)  # never fewer candidates than rows asked for
    monkeypatch.setattr(store, "EF_SEARCH_PER_DECADE", 0)
    assert ef_search() == 10


def test_an_exact_duplicate_is_stored_once(alice):
    first = remember(alice, PORT, importance=0.2)
    again = remember(alice, "  the STAGING database listens on port 6543  ", importance=0.6)
    assert (first.outcome, again.outcome) == ("stored", "duplicate")
    assert Memory.objects.count() == 1
    assert Memory.objects.get().importance == 0.6  # the higher importance is kept


def test_what_became_of_a_text_is_an_outcome_the_tool_and_the_page_each_word():
    """Each outcome is a member, and the remember tool (to the model) and the Memories page (to
    the person) word every one of them: a new outcome fails here until both do."""
    for wording in (OUTCOMES, ADDED):
        assert list(wording) == list(MemoryOutcome)
        assert all(isinstance(outcome, MemoryOutcome) for outcome in wording)
        assert all(wording.values())


def test_remember_says_what_became_of_the_text_as_its_member(alice):
    assert remember(alice, PORT).outcome is MemoryOutcome.STORED
    assert remember(alice, PORT).outcome is MemoryOutcome.DUPLICATE


def test_a_near_duplicate_supersedes_the_older_wording(alice, settings):
    older = SUM + " It took 3 steps."
    newer = SUM + " It took 4 steps."
    assert cosine(older, newer) >= store.merge_similarity()
    kept = remember(alice, older).memory
    merged = remember(alice, newer)
    assert merged.outcome == "merged"
    assert merged.memory.pk == kept.pk
    assert list(Memory.objects.values_list("text", flat=True)) == [newer]


def test_the_store_is_bounded_and_the_least_valuable_goes_first(alice, settings):
    settings.LOOP_MEMORY_MAX_PER_USER = 3
    unimportant = remember(alice, "The user likes green tea.", importance=0.2).memory
    often_recalled = remember(alice, PORT, importance=0.2).memory
    Memory.objects.filter(pk=often_recalled.pk).update(recall_count=4)
    important = remember(alice, "The deploy key lives in vault/deploy.", importance=0.9).memory
    newest = remember(alice, "The user's cat is called Pixel.", importance=0.5)
    assert newest.outcome == "stored"
    # Not simply the oldest: being recalled or important keeps a memory.
    kept = {important.pk, often_recalled.pk, newest.memory.pk}
    assert set(Memory.objects.values_list("pk", flat=True)) == kept
    assert not Memory.objects.filter(pk=unimportant.pk).exists()


def test_among_equals_the_longest_untouched_goes_first(alice, settings):
    settings.LOOP_MEMORY_MAX_PER_USER = 2
    stale = remember(alice, "The user likes green tea.").memory
    fresh = remember(alice, "The user's cat is called Pixel.").memory
    Memory.objects.filter(pk=stale.pk).update(updated_at=timezone.now() - timedelta(days=90))
    remember(alice, PORT)
    assert Memory.objects.filter(pk=fresh.pk).exists()
    assert not Memory.objects.filter(pk=stale.pk).exists()


def test_a_new_memory_worth_less_than_all_kept_is_dropped_and_said_so(alice, settings):
    settings.LOOP_MEMORY_MAX_PER_USER = 1
    treasured = remember(alice, PORT, importance=1.0).memory
    Memory.objects.filter(pk=treasured.pk).update(recall_count=4)
    trivia = remember(alice, "The user once mentioned rain.", importance=0.0)
    assert trivia.outcome == "dropped"
    assert list(Memory.objects.values_list("pk", flat=True)) == [treasured.pk]


def test_a_correction_is_not_mistaken_for_a_duplicate(alice):
    remember(alice, "The user is vegetarian.")
    corrected = remember(alice, "The user is not vegetarian.")
    assert corrected.outcome != "duplicate"
    assert Memory.objects.filter(text="The user is not vegetarian.").exists()


def test_an_embedder_of_another_dimension_is_refused_until_reembed(alice, settings):
    remember(alice, SUM)
    settings.LOOP_EMBEDDER = "tests.fakes.TinyEmbedder"
    with pytest.raises(
        EmbedderMismatch, match=r"384-dimension .* 'all-MiniLM-L6-v2', .* 'tiny' \(8"
    ):
        recall(alice, "the sum of 1..100")
    with pytest.raises(EmbedderMismatch, match=r"manage\.py reembed"):
        remember(alice, PORT)
    call_command("reembed", stdout=(out := StringIO()))
    assert (
        "Re-embedded 1 memories with tiny, 8 dimensions (the store went from 384" in out.getvalue()
    )
    assert stored_dimensions() == 8
    assert len(Memory.objects.get().embedding) == 8
    assert recall(alice, SUM)[0].text == SUM
    remember(alice, PORT)  # accepted now


def test_switching_to_an_embedder_of_the_same_dimension_is_caught_and_reembedded(alice, settings):
    remember(alice, SUM)
    settings.LOOP_EMBEDDER = "tests.fakes.OtherEmbedder"
    with pytest.raises(EmbedderMismatch, match="made by 'all-MiniLM-L6-v2'"):
        recall(alice, SUM)
    call_command("reembed", stdout=StringIO())
    expected = OtherEmbedder().embed([SUM])[0]
    assert Memory.objects.get().embedding == pytest.approx(expected, abs=1e-3)  # half precision


@pytest.mark.django_db(transaction=True)
def test_the_remember_tool_stores_a_fact_for_the_calling_user_only(alice, bob, tmp_path):
    registry: ToolRegistry = default_registry()
    context = ToolContext(alice.pk, "alice", tmp_path)
    fact = '{"fact": "My staging server is staging.example.com", "importance": 0.9}'
    first = registry.dispatch("remember", fact, context)
    again = registry.dispatch("remember", fact, context)
    assert (first.status, first.text) == ("ok", "Remembered.")
    assert again.text == "I already remembered that."
    memory = Memory.objects.get()
    assert (memory.owner, memory.origin, memory.importance) == (alice, Origin.TOLD, 0.9)
    assert recall(bob, "staging server") == []


def test_the_remember_tool_refuses_an_empty_fact(alice, tmp_path):
    result = default_registry().dispatch(
        "remember", '{"fact": "  "}', ToolContext(1, "a", tmp_path)
    )
    assert result.status == "error"
    assert "fact" in result.text


def test_the_relevance_floor_can_be_set_above_the_embedders(alice, settings):
    remember(alice, SUM)
    assert recall(alice, "What was the sum of 1..100 that I computed before?")
    settings.LOOP_MEMORY_MIN_SIMILARITY = 0.99
    assert recall(alice, "What was the sum of 1..100 that I computed before?") == []
