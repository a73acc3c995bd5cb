"""The chat's cards lead to what a run worked on: the "N memories recalled" card to those memories
on the Memories page.

Cards are drawn from typed events, as the page, the replay and the live push all draw them."""

import pytest
from django.urls import reverse

from agent.events import MemoriesRecalled, RunFinished, RunStatus
from agent.models import RunEvent
from agent.runs import new_conversation, start_run
from chat.rendering import card_for, render_card
from memory.recalled import RecalledMemory

RUN_ID = 3
FILES_VIEW = "/files/view/"


def drawn(event) -> str:
    card = card_for(RUN_ID, 5, event)
    assert card is not None
    return render_card(card)


# the memories card --------------------------------------------------------------------------------


def recalled(count: int) -> MemoriesRecalled:
    return MemoriesRecalled(
        memories=[
            RecalledMemory(id=n, text=f"fact {n}", score=0.5, parts={"similarity": 0.5})
            for n in range(1, count + 1)
        ]
    )


@pytest.mark.parametrize(
    ("count", "words"), [(1, "See it in Memories"), (3, "See them in Memories")]
)
def test_the_memories_card_links_to_the_memories_the_run_recalled(count, words):
    html = drawn(recalled(count))
    assert f'<a class="card-link" href="/memories/?run={RUN_ID}">{words}</a>' in html
    assert reverse("memories") == "/memories/"


def test_other_cards_link_nowhere_new():
    html = drawn(RunFinished(status=RunStatus.SUCCEEDED, answer="data.csv has 4 lines."))
    assert FILES_VIEW not in html
    assert "/memories/" not in html


# the page -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_conversations_page_draws_the_links_of_its_cards(client, alice):
    run = start_run(
        alice, "How many lines are in data.csv?", model="mock", conversation=new_conversation(alice)
    )
    for seq, event in enumerate([recalled(2)], start=1):
        RunEvent.objects.create(run=run, seq=seq, kind=event.kind, data=event.as_dict())
    client.force_login(alice)
    page = client.get(f"/c/{run.conversation_id}/").text
    assert f'href="/memories/?run={run.pk}"' in page
