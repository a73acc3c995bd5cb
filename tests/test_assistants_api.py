"""Assistants through the API: GET /assistants lists those the key's person may use, a run
starts a new conversation with one (its model when none is named), shows the assistant it ran
as {id, version, name}, and a forged, archived or unshared one is refused with nothing stored;
and `runagent --assistant` does the same from the terminal."""

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command

from agent.models import AgentRun, Conversation
from assistants.versions import set_archived
from tests.test_api_runs import bearer, error_of, post
from tests.test_assistants import made
from tests.test_runagent import runagent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def room_for_runs(settings):
    settings.LOOP_USER_ACTIVE_RUNS = 50


def test_the_list_holds_what_the_person_may_use(client, alice, alice_key, bob):
    group = Group.objects.create(name="readers")
    alice.groups.add(group)
    mine = made(alice, name="Mine", use_memory=False, ask_before=["run_code"])
    site = made(None, name="Site's", groups=(group,))
    made(bob, name="Bob's")
    made(None, name="Others'", groups=(Group.objects.create(name="others"),))
    response = client.get("/api/v1/assistants", **bearer(alice_key))
    assert response.status_code == 200
    listed = {entry["name"]: entry for entry in response.json()}
    assert set(listed) == {"Mine", "Site's"}
    assert listed["Mine"] | {} == {
        "id": mine.pk,
        "name": "Mine",
        "description": "",
        "version": 1,
        "model": "",
        "tools": None,
        "use_memory": False,
        "ask_before": ["run_code"],
        "owner": "alice",
    }
    assert listed["Site's"]["owner"] is None
    assert listed["Site's"]["id"] == site.pk


def test_a_run_started_with_an_assistant_shows_it(client, alice, alice_key):
    assistant = made(alice, name="Latinist", model="mock")
    response = post(client, "/api/v1/runs", {"task": "Salve", "assistant": assistant.pk}, alice_key)
    assert response.status_code == 201, response.content
    shown = response.json()
    assert shown["assistant"] == {"id": assistant.pk, "version": 1, "name": "Latinist"}
    assert shown["provider"] == "mock"
    run = AgentRun.objects.get(pk=shown["id"])
    assert run.conversation.assistant == assistant
    again = client.get(f"/api/v1/runs/{run.pk}", **bearer(alice_key)).json()
    assert again["assistant"] == shown["assistant"]
    plain = post(client, "/api/v1/runs", {"task": "Hello"}, alice_key).json()
    assert plain["assistant"] is None


def test_a_forged_or_archived_assistant_is_refused_and_nothing_stored(
    client, alice, alice_key, bob
):
    bobs, archived = made(bob), made(alice, name="Old")
    set_archived(archived, True)
    for forged in (bobs.pk, archived.pk, 999999):
        response = post(client, "/api/v1/runs", {"task": "Hi", "assistant": forged}, alice_key)
        status, code, message = error_of(response)
        assert (status, code) == (404, "not_found")
        assert "you may use" in message
    assert not Conversation.objects.exists()
    assert not AgentRun.objects.exists()


def test_a_conversation_whose_assistant_is_archived_takes_no_turn_through_the_api(
    client, alice, alice_key
):
    assistant = made(alice)
    first = post(client, "/api/v1/runs", {"task": "one", "assistant": assistant.pk}, alice_key)
    set_archived(assistant, True)
    body = {"task": "two", "conversation": first.json()["conversation"]}
    status, code, message = error_of(post(client, "/api/v1/runs", body, alice_key))
    assert (status, code) == (409, "assistant_unavailable")
    assert "archived or not shared with you" in message
    assert AgentRun.objects.count() == 1


def test_runagent_runs_as_an_assistant_named_or_by_id(workspaces):
    from django.contrib.auth.models import User

    code, _ = runagent("What is 17 * 23?")  # makes runagent's own user
    owner = AgentRun.objects.get().user
    assistant = made(owner, name="Arithmetician", instructions="Be brief.")
    code, out = runagent("--assistant", "arithmetician", "What is 17 * 23?")
    assert code == 0, out
    assert "Assistant: Arithmetician (version 1)" in out
    run = AgentRun.objects.order_by("-pk").first()
    assert run.assistant_version.assistant == assistant
    code, out = runagent("--assistant", str(assistant.pk), "What is 17 * 23?")
    assert code == 0
    with pytest.raises(CommandError, match='No assistant "Nobody\'s" you may use'):
        call_command("runagent", "--assistant", "Nobody's", "What is 17 * 23?")
    assert User.objects.count() == 1
