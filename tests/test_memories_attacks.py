"""The Memories page attacked by a logged-in person: ids that are not ids, ids of another
person's memory or of a run of a conversation they deleted, repeated ids, and an edit into the
words of another person's memory. Each is refused or harmless, never a server error."""

from types import SimpleNamespace

import pytest
from django.test import Client

from agent.forgotten import take_back
from agent.runs import delete_conversation, new_conversation, start_run
from chat import memories as memories_views
from engine.execution import execute_run
from memory import personal
from memory.embedders import get_embedder
from memory.forgetting import purge_forgotten_texts
from memory.models import ForgottenMemory, Memory
from memory.store import remember
from tests.test_chat_views import ActiveParts

pytestmark = pytest.mark.django_db

TEAL = "My favourite colour is teal."
CAT = "My cat is called Miso."
# Digits to str.isdigit() that int() does not read, and a number longer than int() reads.
NOT_INTS = ("²", "①", "9" * 5000)


@pytest.fixture
def as_alice(client, alice) -> Client:
    client.force_login(alice)
    return client


@pytest.mark.parametrize("raw", NOT_INTS)
def test_a_run_that_is_not_a_number_is_a_400_that_says_so(as_alice, alice, raw):
    remember(alice, CAT)
    response = as_alice.get("/memories/", {"run": raw})
    assert response.status_code == 400
    assert "The address&#x27;s &#x27;run&#x27; is not a whole number" in response.text


@pytest.mark.parametrize("raw", NOT_INTS)
def test_an_id_to_forget_that_is_not_a_number_is_404_and_forgets_nothing(as_alice, alice, raw):
    memory = remember(alice, CAT).memory
    assert as_alice.post("/memories/forget/", {"id": [memory.pk, raw]}).status_code == 404
    assert Memory.objects.filter(pk=memory.pk).exists()


def test_ids_beyond_the_database_s_integers_are_404(as_alice, alice):
    memory = remember(alice, CAT).memory
    huge = str(2**63)
    assert as_alice.get("/memories/", {"run": huge}).status_code == 404
    assert as_alice.post("/memories/forget/", {"id": [huge]}).status_code == 404
    assert as_alice.post(f"/memories/{huge}/edit/", {"text": TEAL}).status_code == 404
    assert Memory.objects.filter(pk=memory.pk, text=CAT).exists()


def test_a_repeated_id_forgets_the_memory_once(as_alice, alice):
    memory = remember(alice, CAT).memory
    response = as_alice.post("/memories/forget/", {"id": [memory.pk] * 3})
    assert response.status_code == 302
    assert ForgottenMemory.objects.filter(memory_id=memory.pk).count() == 1


def test_a_run_of_a_deleted_conversation_is_404_on_the_page(as_alice, alice, workspaces):
    conversation = new_conversation(alice, "Colours")
    personal.add_by_hand(alice, TEAL)
    run = execute_run(
        start_run(alice, "What is my favourite colour?", model="mock", conversation=conversation)
    )
    assert as_alice.get("/memories/", {"run": run.pk}).status_code == 200
    delete_conversation(alice, conversation.pk)
    assert as_alice.get("/memories/", {"run": run.pk}).status_code == 404


def test_editing_into_another_person_s_memory_absorbs_nothing_of_theirs(as_alice, alice, bob):
    bobs = remember(bob, TEAL).memory
    mine = remember(alice, CAT).memory
    response = as_alice.post(f"/memories/{mine.pk}/edit/", {"text": TEAL})
    assert response.status_code == 302
    assert personal.edit(alice, mine.pk, TEAL.upper()).absorbed == []
    bobs.refresh_from_db()
    assert (bobs.owner, bobs.text) == (bob, TEAL)
    assert not ForgottenMemory.objects.exists()


@pytest.mark.parametrize("days", [10**6, 10**12])
def test_a_retention_beyond_the_calendar_keeps_the_text_and_purges_nothing(alice, settings, days):
    settings.LOOP_FORGOTTEN_TEXT_DAYS = days
    [record] = take_back(alice, personal.these(alice, [remember(alice, CAT).memory.pk]))
    assert purge_forgotten_texts() == 0
    record.refresh_from_db()
    assert record.text == CAT


EVIL = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def test_memory_text_titles_and_the_search_are_shown_as_text(as_alice, alice, workspaces):
    conversation = new_conversation(alice, EVIL)
    run = execute_run(start_run(alice, "What is 17 * 23?", model="mock", conversation=conversation))
    personal.add_by_hand(alice, f"Note: {EVIL}")
    Memory.objects.filter(owner=alice, source_run_id=run.pk).update(text=f"Found: {EVIL}")
    for query in ({}, {"q": EVIL}, {"q": "note"}, {"run": run.pk}):
        shown = as_alice.get("/memories/", query).text
        assert ActiveParts(shown).found == [], query
        assert "<script>alert" not in shown
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in as_alice.get("/memories/").text
    refused = as_alice.post("/memories/add/", {"text": f"{EVIL}\x00"})
    assert refused.status_code == 400
    assert ActiveParts(refused.text).found == []


@pytest.fixture
def embeddings(monkeypatch) -> list[list[str]]:
    """Every batch of texts the configured embedder is asked to embed from now on."""
    embedder = get_embedder()
    asked: list[list[str]] = []
    embed = embedder.embed

    def counted(texts: list[str]):
        asked.append(list(texts))
        return embed(texts)

    monkeypatch.setattr(embedder, "embed", counted)
    return asked


def test_editing_another_s_or_no_memory_is_404_before_any_embedding(
    as_alice, alice, bob, embeddings
):
    bobs = remember(bob, CAT).memory
    embeddings.clear()
    for memory_id in (bobs.pk, bobs.pk + 1000):
        response = as_alice.post(f"/memories/{memory_id}/edit/", {"text": TEAL * 50})
        assert response.status_code == 404
    assert embeddings == []
    bobs.refresh_from_db()
    assert bobs.text == CAT
    mine = remember(alice, CAT).memory
    embeddings.clear()
    assert as_alice.post(f"/memories/{mine.pk}/edit/", {"text": TEAL}).status_code == 302
    assert embeddings == [[TEAL]]  # one's own memory is embedded anew, once


def test_adds_and_edits_past_the_minute_s_share_are_refused_unembedded(
    as_alice, alice, settings, embeddings, monkeypatch
):
    settings.LOOP_MEMORY_CHANGES_PER_MINUTE = 2
    # One minute for the whole test: the share is counted per clock minute, and a test that
    # crossed into the next one would find its count renewed.
    monkeypatch.setattr(memories_views, "time", SimpleNamespace(time=lambda: 1_800_000_000.0))
    mine = remember(alice, CAT).memory
    embeddings.clear()
    assert as_alice.post("/memories/add/", {"text": TEAL}).status_code == 302
    assert (
        as_alice.post(f"/memories/{mine.pk}/edit/", {"text": "Miso is my cat."}).status_code == 302
    )
    assert len(embeddings) == 2
    refused = as_alice.post("/memories/add/", {"text": "My dog is called Rex."})
    assert refused.status_code == 429
    assert "Too many changes to your memories this minute" in refused.text
    assert as_alice.post(f"/memories/{mine.pk}/edit/", {"text": "Rex."}).status_code == 429
    assert len(embeddings) == 2


def test_searches_past_the_minute_s_share_show_the_page_unsearched_and_embed_nothing(
    as_alice, alice, settings, embeddings, monkeypatch
):
    settings.LOOP_MEMORY_SEARCHES_PER_MINUTE = 2
    monkeypatch.setattr(memories_views, "time", SimpleNamespace(time=lambda: 1_800_000_000.0))
    remember(alice, CAT)
    embeddings.clear()
    for words in ("which pets", "what colour"):
        assert as_alice.get("/memories/", {"q": words}).status_code == 200
    assert embeddings == [["which pets"], ["what colour"]]
    refused = as_alice.get("/memories/", {"q": "x" * 200})  # the longest search: the most CPU
    assert refused.status_code == 429
    assert "Too many searches of your memories this minute" in refused.text
    assert CAT in refused.text  # the page, unsearched
    assert as_alice.get("/memories/").status_code == 200  # no search: nothing to count
    assert embeddings == [["which pets"], ["what colour"]]
