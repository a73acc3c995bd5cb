"""A person's own memories (memory/personal.py) in the real PostgreSQL with pgvector: list and
search, add by hand, edit (re-embedded, the store's duplicate and merge rules kept), forget."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agent.forgotten import take_back
from memory import personal
from memory.embedders import get_embedder
from memory.models import ForgottenMemory, Memory, Origin
from memory.store import content_hash, merge_similarity, recall, remember

pytestmark = pytest.mark.django_db

PORT = "The staging database listens on port 6543."
CAT = "My cat is called Miso."
TEAL = "My favourite colour is teal."


def recalled_ids(owner, query: str) -> set[int]:
    return {found.id for found in recall(owner, query)}


def cosine(first: str, second: str) -> float:
    a, b = get_embedder().embed([first, second])
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_memories_are_listed_newest_first_with_what_the_page_shows(alice, bob):
    older = remember(alice, PORT, source_run_id=7).memory
    newer = personal.add_by_hand(alice, CAT).memory
    remember(bob, TEAL)
    Memory.objects.filter(pk=older.pk).update(created_at=timezone.now() - timedelta(days=2))
    recall(alice, "Which port does the staging database listen on?")
    listed = list(personal.memories_of(alice))
    assert [memory.pk for memory in listed] == [newer.pk, older.pk]
    first, second = listed
    assert (second.source_run_id, second.origin, second.recall_count) == (7, Origin.RUN, 1)
    assert second.last_recalled_at is not None
    assert second.created_at < first.created_at
    assert (first.origin, first.recall_count, first.last_recalled_at) == (Origin.TOLD, 0, None)


def test_search_matches_the_text_by_each_word_case_aside(alice, bob):
    port = remember(alice, PORT).memory
    cat = remember(alice, CAT).memory
    remember(bob, "The staging server of bob")
    assert [m.pk for m in personal.memories_of(alice, "STAGING")] == [port.pk]
    assert [m.pk for m in personal.memories_of(alice, "port staging")] == [port.pk]
    # No memory holds both words: what comes back is what they mean, most similar first.
    meant = personal.memories_of(alice, "staging cat")
    assert [m.pk for m in meant] == [m.pk for m in personal.by_meaning(alice, "staging cat")]
    assert {m.pk for m in meant} <= {port.pk, cat.pk}


def test_search_finds_by_meaning_after_the_memories_holding_the_words(alice, bob):
    """ "which colour do I like" holds none of "My favourite colour is green"'s words but one;
    recall's embedder finds it, above the relevance floor, before what means less."""
    green = personal.add_by_hand(alice, "My favourite colour is green.").memory
    lisbon = personal.add_by_hand(alice, "My favourite city is Lisbon.").memory
    server = remember(alice, "My staging server is staging.example.com").memory
    remember(bob, "My favourite colour is blue.")
    found = [m.pk for m in personal.memories_of(alice, "which colour do I like")]
    assert found[0] == green.pk
    assert server.pk not in found
    assert lisbon.pk not in found
    # The words typed first, then what the words mean.
    by_words = personal.memories_of(alice, "staging")
    assert by_words[0].pk == server.pk
    assert [m.pk for m in personal.memories_of(alice, "Which colour do I like?", Origin.RUN)] == []


def test_a_memory_added_by_hand_is_told_and_recalled(alice):
    added = personal.add_by_hand(alice, f"  {TEAL}  ")
    assert added.outcome == "stored"
    memory = Memory.objects.get(owner=alice)
    assert (memory.text, memory.origin, memory.source_run_id) == (TEAL, Origin.TOLD, None)
    assert recalled_ids(alice, "What is my favourite colour?") == {memory.pk}


def test_adding_what_is_already_remembered_says_so_and_stores_nothing_more(alice):
    first = personal.add_by_hand(alice, TEAL).memory
    again = personal.add_by_hand(alice, "my favourite colour is TEAL")
    assert (again.outcome, again.memory.pk) == ("duplicate", first.pk)
    assert Memory.objects.filter(owner=alice).count() == 1


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("   ", "needs some text"),
        ("x" * 2001, "at most 2,000 characters"),
        ("nul \x00 inside", "NUL"),
    ],
)
def test_a_text_that_cannot_be_a_memory_is_refused_with_its_reason(alice, text, said):
    with pytest.raises(personal.InvalidMemory, match=said):
        personal.add_by_hand(alice, text)
    memory = remember(alice, PORT).memory
    with pytest.raises(personal.InvalidMemory, match=said):
        personal.edit(alice, memory.pk, text)
    memory.refresh_from_db()
    assert memory.text == PORT


def test_an_edit_re_embeds_so_recall_finds_the_new_text_and_not_the_old(alice):
    memory = remember(alice, PORT, source_run_id=3).memory
    assert recalled_ids(alice, "Which port does the staging database listen on?") == {memory.pk}
    edited = personal.edit(alice, memory.pk, CAT)
    assert (edited.memory.pk, edited.absorbed) == (memory.pk, [])
    memory.refresh_from_db()
    assert (memory.text, memory.content_hash) == (CAT, content_hash(CAT))
    assert memory.source_run_id == 3  # still the run that stored it
    assert recalled_ids(alice, "What is my cat called?") == {memory.pk}
    assert recalled_ids(alice, "Which port does the staging database listen on?") == set()


def test_editing_into_a_duplicate_of_another_memory_folds_the_two_into_one(alice):
    cat = remember(alice, CAT).memory
    Memory.objects.filter(pk=cat.pk).update(recall_count=3, importance=0.9)
    port = remember(alice, PORT).memory
    edited = personal.edit(alice, port.pk, "my cat is called miso")
    assert edited.absorbed == [cat.pk]
    [kept] = Memory.objects.filter(owner=alice)
    assert (kept.pk, kept.text, kept.recall_count, kept.importance) == (
        port.pk,
        "my cat is called miso",
        3,
        0.9,
    )
    assert not ForgottenMemory.objects.exists()  # what it said lives on in the edited one


def test_editing_into_a_near_duplicate_merges_as_the_store_would(alice):
    reworded = "The staging database listens on port 6543!"
    assert cosine(PORT, reworded) >= merge_similarity()  # what remember() would merge
    port = remember(alice, PORT).memory
    cat = remember(alice, CAT).memory
    assert personal.edit(alice, cat.pk, reworded).absorbed == [port.pk]
    assert list(Memory.objects.filter(owner=alice).values_list("pk", "text")) == [
        (cat.pk, reworded)
    ]


def test_an_edit_that_only_changes_case_keeps_the_memory(alice):
    memory = remember(alice, CAT).memory
    assert personal.edit(alice, memory.pk, "MY CAT IS CALLED MISO").absorbed == []
    memory.refresh_from_db()
    assert memory.text == "MY CAT IS CALLED MISO"


def test_another_persons_memory_does_not_exist_for_an_edit_or_a_forgetting(alice, bob):
    theirs = remember(bob, TEAL).memory
    with pytest.raises(Memory.DoesNotExist):
        personal.edit(alice, theirs.pk, CAT)
    with pytest.raises(Memory.DoesNotExist):
        personal.memory_of(alice, theirs.pk)
    assert take_back(alice, personal.these(alice, [theirs.pk])) == []
    take_back(alice, personal.mine(alice))
    theirs.refresh_from_db()
    assert theirs.text == TEAL
    assert not ForgottenMemory.objects.exists()


def test_forgetting_one_a_selection_or_all_is_recorded_and_never_recalled_again(alice, bob):
    port = remember(alice, PORT, source_run_id=11).memory
    cat = remember(alice, CAT).memory
    teal = personal.add_by_hand(alice, TEAL).memory
    bobs = remember(bob, TEAL).memory
    [one] = take_back(alice, personal.these(alice, [port.pk]))
    assert (one.memory_id, one.owner, one.forgotten_by, one.forgotten_by_name) == (
        port.pk,
        alice,
        alice,
        "alice",
    )
    assert (one.origin, one.source_run_id) == (Origin.RUN, 11)
    assert recalled_ids(alice, "Which port does the staging database listen on?") == set()
    assert recalled_ids(alice, "What is my cat called?") == {cat.pk}
    two = take_back(alice, personal.these(alice, [cat.pk, teal.pk, bobs.pk]))
    assert {record.memory_id for record in two} == {cat.pk, teal.pk}
    assert recalled_ids(alice, "What is my cat called?") == set()
    assert recalled_ids(alice, "What is my favourite colour?") == set()
    assert recalled_ids(bob, "What is my favourite colour?") == {bobs.pk}
    remember(alice, "My car is a green Volvo.")
    remember(alice, CAT)  # remembered again: a new memory, not the forgotten one
    everything = take_back(alice, personal.mine(alice))
    assert len(everything) == 2
    assert not Memory.objects.filter(owner=alice).exists()
    assert recalled_ids(alice, "What is my cat called?") == set()
    assert ForgottenMemory.objects.filter(owner=alice, forgotten_by=alice).count() == 5
