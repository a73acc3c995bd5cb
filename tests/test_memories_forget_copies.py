"""Forgetting forgets the fact (issue 28): forgetting a memory offers the other memories that state
the same thing, by meaning and by the words, facts and runs' outcomes alike, each ticked; what
is ticked goes with it, and nothing recalls the fact afterwards. An edit offers the copies of
what the memory said before. Deleting a conversation forgets what its runs remembered by the
time it is deleted, not by the time its page was drawn."""

import re

import pytest
from django.test import Client

from agent.models import AgentRun
from agent.runs import new_conversation, start_run
from agent.selectors import recalled_in
from engine.execution import execute_run
from memory import personal
from memory.hygiene import outcome_text
from memory.models import ForgottenMemory, Memory, Origin
from memory.store import recall, remember
from tests.test_chat_views import ActiveParts

pytestmark = pytest.mark.django_db

LISBON = "My favourite city is Lisbon"
QUESTION = "What is my favourite city?"
SAVED = "Save 'My favourite city is Lisbon' to city.txt"


def ask(user, task: str) -> AgentRun:
    conversation = new_conversation(user, task)
    return execute_run(start_run(user, task, model="mock", conversation=conversation))


def offered_ids(html: str) -> list[int]:
    """The copies a confirm page offers, as ticked boxes."""
    return [int(found) for found in re.findall(r'id="copy-select-(\d+)" checked', html)]


def mentioning_lisbon(user) -> list[str]:
    return [found.text for found in recall(user, QUESTION) if "lisbon" in found.text.lower()]


def test_a_forgotten_fact_is_not_recalled_from_any_memory(as_alice: Client, alice, workspaces):
    """The sequence of issue 28: the person adds the fact, a run answers from it, the person
    forgets it (and the copies offered), a new run asks again: no Lisbon, in the answer or in
    anything recalled."""
    response = as_alice.post("/memories/add/", {"text": LISBON})
    assert response.status_code == 302
    fact = Memory.objects.get(owner=alice, origin=Origin.TOLD)

    first = ask(alice, QUESTION)
    assert "Lisbon" in first.answer  # answered from the fact recalled
    # The answer repeats what was recalled: it leaves no outcome to outlive the fact.
    assert not Memory.objects.filter(source_run_id=first.pk).exists()

    # Copies there are anyway: a run that saved the fact to a file (its outcome is kept, and
    # quotes it), and the outcome an earlier Loop stored for the question, in other words.
    saved = ask(alice, SAVED)
    file_copy = Memory.objects.get(owner=alice, source_run_id=saved.pk)
    assert "Lisbon" in file_copy.text
    earlier = outcome_text(
        QUESTION, "succeeded", "From what you told me: your favourite city is Lisbon", []
    )
    old_copy = remember(alice, earlier, source_run_id=first.pk).memory
    green = personal.add_by_hand(alice, "My favourite colour is green").memory

    # Forget: a confirm step lists the copies, each ticked, and not what only looks alike.
    confirm = as_alice.post("/memories/forget/", {"id": [fact.pk]})
    assert confirm.status_code == 200
    assert sorted(offered_ids(confirm.text)) == sorted([file_copy.pk, old_copy.pk])
    assert f'name="id" value="{fact.pk}"' in confirm.text
    assert ActiveParts(confirm.text).found == []
    assert Memory.objects.filter(pk=fact.pk).exists()  # nothing forgotten before confirming

    confirmed = {"confirmed": "1", "id": [fact.pk, *offered_ids(confirm.text)]}
    assert as_alice.post("/memories/forget/", confirmed).status_code == 302
    assert list(Memory.objects.filter(owner=alice)) == [green]
    assert ForgottenMemory.objects.filter(owner=alice).count() == 3

    again = ask(alice, QUESTION)
    assert "lisbon" not in again.answer.lower()
    assert not any("lisbon" in memory.text.lower() for memory in recalled_in(again))
    assert mentioning_lisbon(alice) == []


def test_an_unticked_copy_stays(as_alice: Client, alice):
    fact = personal.add_by_hand(alice, LISBON).memory
    reworded = personal.add_by_hand(alice, "The user's favourite city is Lisbon.").memory
    confirm = as_alice.post("/memories/forget/", {"id": [fact.pk]})
    assert offered_ids(confirm.text) == [reworded.pk]
    as_alice.post("/memories/forget/", {"confirmed": "1", "id": [fact.pk]})  # unticked
    assert list(Memory.objects.filter(owner=alice)) == [reworded]


def test_copies_are_found_by_meaning_and_by_the_words_not_by_likeness(alice, bob):
    fact = personal.add_by_hand(alice, LISBON).memory
    by_meaning = [
        personal.add_by_hand(alice, text).memory
        # 0.93 and 0.91 (below the merge similarity: stored beside it); the second lacks a word
        for text in (
            "The user's favourite city is Lisbon.",
            "I love Lisbon more than any other city.",
        )
    ]
    by_words = remember(
        alice, outcome_text(QUESTION, "succeeded", "Your favourite city is Lisbon.", [])
    ).memory
    for other in (
        "My favourite city is Porto.",  # the same sentence about another city: 0.80
        "I moved to Lisbon in 2020.",  # Lisbon, but another fact
        "My favourite colour is green.",
        "Velocity of the city bus in Lisbon",  # "city" inside "velocity" is no word of it
    ):
        personal.add_by_hand(alice, other)
    remember(bob, LISBON)  # another person's copy is theirs
    found = personal.copies_of(alice, [fact])
    assert {memory.pk for memory in found} == {*(m.pk for m in by_meaning), by_words.pk}


def test_an_edit_offers_the_copies_of_what_it_said_before(as_alice: Client, alice, workspaces):
    fact = personal.add_by_hand(alice, LISBON).memory
    saved = ask(alice, SAVED)
    stale = Memory.objects.get(owner=alice, source_run_id=saved.pk)
    porto = remember(
        alice, outcome_text(QUESTION, "succeeded", "Your favourite city is Porto.", [])
    ).memory
    response = as_alice.post(f"/memories/{fact.pk}/edit/", {"text": "My favourite city is Porto"})
    assert response.status_code == 200
    assert "Memory changed." in response.text
    assert "still says what it said before" in response.text
    # The copy of the old text, not the memory edited nor what states the new one.
    assert offered_ids(response.text) == [stale.pk]
    assert f'name="id" value="{fact.pk}"' not in response.text
    as_alice.post("/memories/forget/", {"confirmed": "1", "id": offered_ids(response.text)})
    assert {m.pk for m in Memory.objects.filter(owner=alice)} == {fact.pk, porto.pk}
    assert mentioning_lisbon(alice) == []


def test_an_edit_without_copies_goes_back_to_the_page(as_alice: Client, alice):
    fact = personal.add_by_hand(alice, LISBON).memory
    response = as_alice.post(f"/memories/{fact.pk}/edit/", {"text": "My favourite city is Porto"})
    assert (response.status_code, response.url) == (302, "/memories/")


def test_forgetting_what_nothing_repeats_needs_no_confirmation(as_alice: Client, alice):
    fact = personal.add_by_hand(alice, LISBON).memory
    personal.add_by_hand(alice, "My favourite colour is green")
    response = as_alice.post("/memories/forget/", {"id": [fact.pk]})
    assert (response.status_code, response.url) == (302, "/memories/")
    assert not Memory.objects.filter(pk=fact.pk).exists()


def test_the_page_lists_facts_first_and_folds_what_runs_left(as_alice: Client, alice, workspaces):
    saved = ask(alice, SAVED)
    outcome = Memory.objects.get(owner=alice, source_run_id=saved.pk)
    fact = personal.add_by_hand(alice, "My favourite colour is green").memory
    older = personal.add_by_hand(alice, "My cat is called Miso").memory
    Memory.objects.filter(pk=older.pk).update(created_at=outcome.created_at)
    shown = as_alice.get("/memories/").text
    facts = shown.index('id="facts"')
    runs = shown.index('<details class="memory-kind from-runs">')  # folded: no "open"
    assert facts < shown.index(f'id="memory-{fact.pk}"') < shown.index(f'id="memory-{older.pk}"')
    assert runs < shown.index(f'id="memory-{outcome.pk}"')
    assert facts < runs
    item = shown[shown.index(f'id="memory-{outcome.pk}"') :]
    assert f'href="/c/{saved.conversation_id}/#run-{saved.pk}">run {saved.pk}</a>' in item
    # A search that finds a run's outcome opens its fold.
    found = as_alice.get("/memories/?q=city.txt").text
    assert '<details class="memory-kind from-runs" open>' in found


def test_deleting_forgets_what_the_runs_remembered_by_then(as_alice: Client, alice, workspaces):
    """The page is drawn before the run ends (nothing remembered yet); the person deletes the
    conversation after: what the run remembered meanwhile is forgotten with it."""
    conversation = new_conversation(alice, "Saving")
    run = start_run(alice, SAVED, model="mock", conversation=conversation)
    drawn = as_alice.get(f"/c/{conversation.pk}/").text
    assert 'name="forget" value="1" checked' in drawn
    execute_run(run)
    remembered = Memory.objects.get(owner=alice, source_run_id=run.pk)
    form = re.search(r'<form[^>]*action="(/c/\d+/delete/)".*?</form>', drawn, re.S)
    assert form is not None
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form.group(0)))
    response = as_alice.post(form.group(1), fields)
    assert response.status_code == 302
    assert not Memory.objects.filter(pk=remembered.pk).exists()


def test_the_console_says_forgotten_memories(client, operator):
    assert ForgottenMemory._meta.verbose_name_plural == "forgotten memories"
    index = client.get("/admin/").text
    assert "Forgotten memories" in index
    assert "memorys" not in index.lower()
