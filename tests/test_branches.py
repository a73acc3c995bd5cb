"""Versions of a turn: regenerating or editing an ended turn makes a sibling that is shown from
then on, the old one and what followed it stay a click away, and the context of a later task is
its own branch's, never another's. In the real database, runs worked in this process."""

import importlib

import pytest
from django.db import connection

from agent.models import AgentRun
from agent.runs import InvalidTask, new_conversation, new_version, show_version, submit_run
from agent.selectors import conversation_context, runs_of
from core.events import RunStatus
from engine.execution import execute_run

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def worked(user, task: str, conversation=None) -> AgentRun:
    conversation = conversation or new_conversation(user)
    return execute_run(submit_run(user, task, conversation, model="mock"))


def shown(conversation) -> list[str]:
    return [run.task for run in runs_of(conversation).runs]


def said(run: AgentRun) -> list[str]:
    return [message["content"] for message in conversation_context(run)]


def test_an_edited_turn_is_a_new_branch_and_later_context_follows_the_branch_shown(alice):
    first = worked(alice, "What is 17 * 23?")
    conversation = first.conversation
    saved = worked(alice, "Save that to result.txt", conversation)
    assert "391" in saved.answer

    edited = execute_run(new_version(alice, first.pk, task="What is 2 * 3?", model="mock"))
    assert (edited.parent_id, edited.status) == (None, RunStatus.SUCCEEDED)
    assert shown(conversation) == ["What is 2 * 3?"]  # the new branch, with nothing after it yet
    again = worked(alice, "Save that to result.txt", conversation)
    assert again.parent_id == edited.pk
    assert "6" in again.answer
    assert said(again) == ["What is 2 * 3?", edited.answer]

    show_version(alice, first.pk)  # back to the first branch, with what followed it
    assert shown(conversation) == ["What is 17 * 23?", "Save that to result.txt"]
    path = runs_of(conversation)
    assert path.branching[first.pk] == (1, 2, None, edited.pk)
    later = worked(alice, "What is 1 + 1?", conversation)
    assert later.parent_id == saved.pk
    assert said(later) == ["What is 17 * 23?", first.answer, saved.task, saved.answer]


def test_a_regenerated_turn_asks_the_same_task_again_after_the_same_turn(alice):
    first = worked(alice, "What is 17 * 23?")
    second = worked(alice, "Save that to result.txt", first.conversation)
    regenerated = new_version(alice, second.pk, model="mock")
    assert (regenerated.task, regenerated.parent_id) == (second.task, first.pk)
    assert regenerated.job_id is not None  # queued for a worker
    path = runs_of(first.conversation)
    assert [run.pk for run in path.runs] == [first.pk, regenerated.pk]
    assert path.branching[regenerated.pk] == (2, 2, second.pk, None)


def test_no_version_while_a_run_goes_nor_of_another_persons_turn(alice, bob):
    first = worked(alice, "What is 17 * 23?")
    submit_run(alice, "Count slowly to 3", first.conversation, model="mock")
    with pytest.raises(InvalidTask, match="going in this conversation"):
        new_version(alice, first.pk, model="mock")
    with pytest.raises(AgentRun.DoesNotExist):
        new_version(bob, first.pk, model="mock")
    with pytest.raises(AgentRun.DoesNotExist):
        show_version(bob, first.pk)


SHARED_FILES = "Files are shared by every version of this conversation."


def test_the_page_shows_the_versions_and_moves_between_them(client, alice, bob):
    first = worked(alice, "What is 17 * 23?")
    client.force_login(alice)
    page = client.get(f"/c/{first.conversation_id}/")
    assert "Regenerate" in page.text
    assert '<nav class="versions"' not in page.text  # one version only
    assert SHARED_FILES not in page.text

    response = client.post(f"/runs/{first.pk}/edit/", {"edited": "What is 2 * 3?"})
    assert response.status_code == 302
    edited = AgentRun.objects.get(task="What is 2 * 3?")
    page = client.get(f"/c/{first.conversation_id}/")
    assert "2 / 2" in page.text
    assert SHARED_FILES in page.text  # the versions' files are one workspace, and it says so
    assert f'action="/runs/{first.pk}/show/"' in page.text
    assert "What is 17 * 23?</div>" not in page.text  # the old version is not shown
    assert client.post(f"/runs/{edited.pk}/regenerate/").status_code == 400  # it is going
    assert client.post(f"/runs/{first.pk}/edit/", {"edited": "  "}).status_code == 400

    client.post(f"/runs/{first.pk}/show/")
    page = client.get(f"/c/{first.conversation_id}/")
    assert "1 / 2" in page.text
    client.force_login(bob)
    assert client.post(f"/runs/{first.pk}/show/").status_code == 404
    assert client.post(f"/runs/{first.pk}/regenerate/").status_code == 404


def test_a_queued_task_follows_the_branch_shown_when_it_starts(alice):
    from agent import queued

    first = worked(alice, "What is 17 * 23?")
    edited = new_version(alice, first.pk, task="What is 2 * 3?", model="mock")
    queued.queue_task(alice, first.conversation, "Save that to result.txt")
    execute_run(edited)
    started = AgentRun.objects.get(task="Save that to result.txt")
    assert started.parent_id == edited.pk


def test_existing_conversations_become_one_branch_each(alice, bob, settings):
    settings.LOOP_USER_ACTIVE_RUNS = 5
    conversation = new_conversation(alice)
    runs = [submit_run(alice, f"task {n}", conversation, model="mock") for n in range(3)]
    elsewhere = submit_run(bob, "bob's", new_conversation(bob), model="mock")
    AgentRun.objects.update(parent=None, chosen_at=None)  # as before the migration
    migration = importlib.import_module("agent.migrations.0016_run_branches")
    with connection.cursor() as cursor:
        cursor.execute(migration.LINK_TURNS)
    parents = dict(AgentRun.objects.values_list("pk", "parent_id"))
    assert [parents[run.pk] for run in runs] == [None, runs[0].pk, runs[1].pk]
    assert parents[elsewhere.pk] is None
    assert shown(conversation) == ["task 0", "task 1", "task 2"]
