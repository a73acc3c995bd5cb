"""The chat's side of tasks that wait their turn: a send into a conversation whose run is going
queues the task; the person sends one to the run now or removes it; the page fetches the turns
that started since. Nobody reaches another person's queue."""

import pytest
from django.test import Client

from agent.models import AgentRun, QueuedTask
from agent.runs import new_conversation, submit_run
from core.events import RunStatus
from engine.execution import execute_run

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.fixture
def as_alice(client, alice) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def going(alice) -> AgentRun:
    return submit_run(alice, "Count slowly to 5", new_conversation(alice), model="mock")


def send(client: Client, run: AgentRun, task: str):
    return client.post(f"/c/{run.conversation_id}/send/", {"task": task}, headers=HTMX)


def test_a_send_while_a_run_goes_queues_the_task_and_the_page_shows_it(as_alice, going):
    response = send(as_alice, going, "What is 17 * 23?")
    assert response.status_code == 200
    assert 'id="queue" hx-swap-oob="true"' in response.text
    assert "Queued" in response.text
    assert "What is 17 * 23?" in response.text
    assert AgentRun.objects.count() == 1
    page = as_alice.get(f"/c/{going.conversation_id}/")
    assert "What is 17 * 23?" in page.text
    assert "Send now" in page.text


def test_send_now_and_remove_change_only_the_persons_own_queue(as_alice, client, bob, going):
    send(as_alice, going, "first")
    send(as_alice, going, "second")
    first, second = QueuedTask.objects.order_by("pk")

    removed = as_alice.post(f"/queued/{first.pk}/remove/", headers=HTMX)
    assert "first" not in removed.text
    now = as_alice.post(f"/queued/{second.pk}/now/", headers=HTMX)
    assert "Sent to the running task" in now.text
    assert QueuedTask.objects.get().sent_to_id == going.pk

    client.force_login(bob)
    assert client.post(f"/queued/{second.pk}/remove/", headers=HTMX).status_code == 404
    assert client.post(f"/queued/{second.pk}/now/", headers=HTMX).status_code == 404
    assert client.get(f"/c/{going.conversation_id}/after/").status_code == 404
    assert send(client, going, "into alice's conversation").status_code == 404
    assert QueuedTask.objects.count() == 1


def test_the_page_fetches_the_turn_a_queued_task_became(as_alice, going):
    send(as_alice, going, "What is 17 * 23?")
    execute_run(going)  # its end starts the queued task
    after = as_alice.get(f"/c/{going.conversation_id}/after/?run={going.pk}")
    [started] = AgentRun.objects.exclude(pk=going.pk)
    assert started.status == RunStatus.QUEUED
    assert f'id="run-{started.pk}"' in after.text
    assert f'id="run-{going.pk}"' not in after.text
    assert 'id="queue" hx-swap-oob="true"' in after.text
    assert "Queued" not in after.text
