"""The Memories page (/memories/): a person's own memories, where each came from, search, add,
edit, forget one, a selection or all, and the memories one run recalled. Another person's
memory or run is 404 on every URL, and every change is a CSRF-protected POST."""

import re

import pytest
from django.test import Client

from agent.forgotten import take_back
from agent.models import AgentRun
from agent.runs import new_conversation, start_run
from agent.selectors import recalled_in
from engine.execution import execute_run
from memory import personal
from memory.models import ForgottenMemory, Memory
from memory.store import recall, remember
from tests.test_chat_views import ActiveParts

pytestmark = pytest.mark.django_db

TEAL = "My favourite colour is teal."
CAT = "My cat is called Miso."
PORT = "The staging database listens on port 6543."
DEMO = "Compute the sum of 1..100 and save it to a file"


@pytest.fixture
def as_alice(client, alice) -> Client:
    client.force_login(alice)
    return client


def run_in_conversation(user, task: str, title: str = "Arithmetic") -> AgentRun:
    conversation = new_conversation(user, title)
    return execute_run(start_run(user, task, model="mock", conversation=conversation))


def page(client: Client, query: str = "") -> str:
    response = client.get(f"/memories/{query}")
    assert response.status_code == 200
    return response.text


def test_the_page_needs_a_login(client):
    response = client.get("/memories/")
    assert response.status_code == 302
    assert response.url.startswith("/accounts/login/")


def test_the_page_lists_each_memory_with_its_run_conversation_and_recalls(
    as_alice, alice, workspaces
):
    run = run_in_conversation(alice, DEMO)  # it writes a file: its outcome is kept
    stored = Memory.objects.get(owner=alice, source_run_id=run.pk)
    told = personal.add_by_hand(alice, TEAL).memory
    recall(alice, "What is my favourite colour?")
    shown = page(as_alice)
    assert "2 memories" in shown
    assert f'id="memory-{stored.pk}"' in shown
    assert f'id="memory-{told.pk}"' in shown
    assert shown.index(f'id="memory-{told.pk}"') < shown.index(f'id="memory-{stored.pk}"')
    item = shown[shown.index(f'id="memory-{stored.pk}"') :]
    link = f'<a class="run-link" href="/c/{run.conversation_id}/#run-{run.pk}">run {run.pk}</a>'
    assert f'by {link} in <a href="/c/{run.conversation_id}/">Arithmetic</a>' in item
    assert "outcome of a run" in item
    assert "never recalled" in item
    told_item = shown[shown.index(f'id="memory-{told.pk}"') : shown.index(f"memory-{stored.pk}")]
    assert "added by hand" in told_item
    assert "remembered on purpose" in told_item
    assert "recalled 1 time, last <time" in told_item
    assert ActiveParts(shown).found == []  # strict CSP: nothing inline, the confirmation too
    assert 'name="all" value="1"' in shown
    # The selection's boxes belong to the "Forget selected" form, outside each memory's own.
    assert 'id="forget-selected" method="post" action="/memories/forget/"' in shown
    assert f'name="id" value="{stored.pk}" form="forget-selected"' in shown


def test_search_shows_only_the_memories_that_match(as_alice, alice):
    remember(alice, PORT)
    remember(alice, CAT)
    shown = page(as_alice, "?q=miso")
    assert CAT in shown
    assert PORT not in shown
    assert 'value="miso"' in page(as_alice, "?q=miso")
    assert "No memory holds “volvo”" in page(as_alice, "?q=volvo")
    # What no form of the page sends is refused, saying which (workspace.query_string).
    assert as_alice.get("/memories/?q=%00").status_code == 400
    assert as_alice.get("/memories/?page=x").status_code == 400


def test_another_persons_memories_are_not_on_the_page(as_alice, bob):
    remember(bob, TEAL)
    assert TEAL not in page(as_alice)
    assert TEAL not in page(as_alice, "?q=teal")


def test_adding_by_hand_remembers_and_says_so_and_a_duplicate_says_so(as_alice, alice):
    response = as_alice.post("/memories/add/", {"text": TEAL})
    assert (response.status_code, response.url) == (302, "/memories/")
    memory = Memory.objects.get(owner=alice)
    assert memory.text == TEAL
    assert "Remembered." in page(as_alice)
    as_alice.post("/memories/add/", {"text": "my favourite colour is TEAL"})
    assert "Loop already remembers that." in page(as_alice)
    assert Memory.objects.filter(owner=alice).count() == 1
    refused = as_alice.post("/memories/add/", {"text": "  "})
    assert refused.status_code == 400
    assert "Not remembered: A memory needs some text." in refused.text


def test_an_edit_changes_the_text_and_what_recall_finds(as_alice, alice):
    memory = remember(alice, PORT).memory
    response = as_alice.post(f"/memories/{memory.pk}/edit/", {"text": CAT, "q": "port"})
    assert response.url == "/memories/?q=port"
    memory.refresh_from_db()
    assert memory.text == CAT
    assert [found.id for found in recall(alice, "What is my cat called?")] == [memory.pk]
    assert recall(alice, "Which port does the staging database listen on?") == []
    assert "Memory changed." in page(as_alice)
    refused = as_alice.post(f"/memories/{memory.pk}/edit/", {"text": ""})
    assert refused.status_code == 400
    memory.refresh_from_db()
    assert memory.text == CAT


def test_forgetting_one_a_selection_and_all_from_the_page(as_alice, alice):
    port, cat, teal = (remember(alice, text).memory for text in (PORT, CAT, TEAL))
    car = remember(alice, "My car is a green Volvo.").memory
    as_alice.post("/memories/forget/", {"id": [port.pk]})
    assert "Forgot 1 memory." in page(as_alice)
    as_alice.post("/memories/forget/", {"id": [cat.pk, teal.pk]})
    shown = page(as_alice)
    assert "Forgot 2 memories." in shown
    assert CAT not in shown
    assert TEAL not in shown
    assert "green Volvo" in shown
    gone = {port.pk, cat.pk, teal.pk}
    for question in ("What is my cat called?", "What is my favourite colour?", "Which port?"):
        assert gone.isdisjoint(found.id for found in recall(alice, question))
    as_alice.post("/memories/forget/", {"all": "1"})
    assert "Loop remembers nothing about you yet." in page(as_alice)
    records = ForgottenMemory.objects.filter(owner=alice, forgotten_by=alice)
    assert set(records.values_list("memory_id", flat=True)) == {port.pk, cat.pk, teal.pk, car.pk}
    assert set(records.values_list("text", flat=True)) == {""}  # LOOP_FORGOTTEN_TEXT_DAYS = 0


def test_forgetting_nothing_selected_forgets_nothing(as_alice, alice):
    remember(alice, CAT)
    response = as_alice.post("/memories/forget/", {"q": "cat"})
    assert response.url == "/memories/?q=cat"
    assert "Nothing was selected" in page(as_alice)
    assert Memory.objects.filter(owner=alice).exists()


def test_the_memories_a_run_recalled_and_those_still_stored(as_alice, alice, bob, workspaces):
    teal = personal.add_by_hand(alice, TEAL).memory
    red = personal.add_by_hand(alice, "My favourite colour used to be red.").memory
    other = remember(alice, PORT).memory
    asked = run_in_conversation(alice, "What is my favourite colour?", title="Colours")
    recalled = {memory.id for memory in recalled_in(asked)}
    assert {teal.pk, red.pk} <= recalled
    assert other.pk not in recalled
    shown = page(as_alice, f"?run={asked.pk}")
    assert (
        f'Recalled by run {asked.pk} in <a href="/c/{asked.conversation_id}/">Colours</a>' in shown
    )
    assert set(map(int, re.findall(r'id="memory-(\d+)"', shown))) == recalled
    assert PORT not in shown
    take_back(alice, personal.these(alice, [teal.pk]))
    shown = page(as_alice, f"?run={asked.pk}")
    assert TEAL not in shown
    assert "used to be red" in shown
    assert f"{len(recalled) - 1} still stored (the others were forgotten since)" in shown
    take_back(alice, personal.these(alice, recalled))
    assert "None of what this run recalled is still stored." in page(as_alice, f"?run={asked.pk}")
    nothing = run_in_conversation(alice, "What is 17 * 23?")  # nothing stored is like it
    assert recalled_in(nothing) == []
    assert "This run recalled no memories." in page(as_alice, f"?run={nothing.pk}")
    assert as_alice.get(f"/memories/?run={asked.pk + 1000}").status_code == 404
    assert as_alice.get("/memories/?run=x").status_code == 400
    bobs = Client()
    bobs.force_login(bob)
    assert bobs.get(f"/memories/?run={asked.pk}").status_code == 404


def test_every_url_is_404_for_another_persons_memory(as_alice, alice, bob):
    theirs = remember(bob, TEAL).memory
    assert as_alice.post(f"/memories/{theirs.pk}/edit/", {"text": CAT}).status_code == 404
    assert as_alice.post("/memories/forget/", {"id": [theirs.pk]}).status_code == 404
    assert as_alice.post("/memories/forget/", {"id": ["x"]}).status_code == 404
    as_alice.post("/memories/forget/", {"all": "1"})
    theirs.refresh_from_db()
    assert theirs.text == TEAL
    assert not ForgottenMemory.objects.exists()


def test_a_get_changes_nothing(as_alice, alice):
    memory = remember(alice, CAT).memory
    assert as_alice.get(f"/memories/forget/?id={memory.pk}").status_code == 405
    assert as_alice.get("/memories/add/?text=x").status_code == 405
    assert as_alice.get(f"/memories/{memory.pk}/edit/?text=x").status_code == 405
    assert Memory.objects.filter(owner=alice).count() == 1


def test_every_change_needs_the_csrf_token(alice):
    memory = remember(alice, CAT).memory
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    posts = {
        "/memories/add/": {"text": TEAL},
        f"/memories/{memory.pk}/edit/": {"text": PORT},
        "/memories/forget/": {"id": [memory.pk]},
    }
    for url, data in posts.items():
        assert client.post(url, data).status_code == 403, url
    assert client.post("/memories/forget/", {"all": "1"}).status_code == 403
    assert list(Memory.objects.filter(owner=alice).values_list("text", flat=True)) == [CAT]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page(client)).group(1)
    done = client.post("/memories/forget/", {"id": [memory.pk], "csrfmiddlewaretoken": token})
    assert done.status_code == 302
    assert not Memory.objects.filter(owner=alice).exists()


@pytest.mark.django_db(transaction=True)  # the remember tool works in a thread of its own
def test_deleting_a_conversation_and_forgetting_shows_on_the_memories_page(
    client, alice, workspaces
):
    told = run_in_conversation(alice, "Remember that my favourite colour is teal", "Told")
    kept = run_in_conversation(alice, "Remember that my cat is called Miso", "Cat")
    client.force_login(alice)
    before = page(client)
    assert "favourite colour is teal" in before
    assert "cat is called Miso" in before
    client.post(f"/c/{told.conversation_id}/delete/", {"forget": "1"})
    client.post(f"/c/{kept.conversation_id}/delete/")  # the box unticked: kept
    after = page(client)
    assert "favourite colour is teal" not in after
    assert "cat is called Miso" in after
    assert "of a conversation since deleted" in after
    assert f'href="/c/{kept.conversation_id}/"' not in after
