"""Shared assistants: a person's Assistants page (their own, a group's, the site's), every save a
frozen version, sharing only with a group of theirs and only where the site allows, a forged or
stale assistant refused before anything is stored, and the worker running a conversation's turn
with its version: instructions in the system prompt, only its tools, memory or none, its asks."""

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from agent.models import AgentRun, Conversation
from agent.runs import AssistantUnavailable, start_run, submit_first_run
from assistants.models import Assistant
from assistants.versions import assistants_for, new_version
from core.events import RunStatus
from engine.execution import execute_run
from memory.models import Memory
from tests.chat_server import tool_call
from tests.openai_server import openai_server_fixture  # noqa: F401 (a fixture)
from tests.test_openai_runs import on_server  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

PAGE = "/assistants/"
DEMO = "Compute the sum of 1..100 and save it to a file"  # the mock: run_code, write_file
RECALL = "What was the sum of 1..100 that I computed before?"


def form(**fields: Any) -> dict[str, Any]:
    """The Assistants form as a browser posts it: unticked boxes are absent."""
    posted = {"name": "Gardener", "description": "", "instructions": "", "model": ""}
    posted |= {"all_tools": "on", "all_mcp_servers": "on", "use_memory": "on"}
    for name, value in fields.items():
        if value is None:
            posted.pop(name, None)
        else:
            posted[name] = value
    return posted


def made(
    owner: User | None, *, by: User | None = None, groups: tuple[Group, ...] = (), **fields: Any
) -> Assistant:
    """An assistant saved as a page does: its first version recorded."""
    assistant = Assistant.objects.create(owner=owner, **({"name": "Helper"} | fields))
    assistant.groups.set(groups)
    new_version(assistant, by or owner)
    return assistant


@pytest.fixture
def gardeners(alice) -> Group:
    group = Group.objects.create(name="gardeners")
    alice.groups.add(group)
    return group


@pytest.fixture
def carol(gardeners) -> User:
    """In alice's group."""
    carol = User.objects.create_user("carol", password="x")
    carol.groups.add(gardeners)
    return carol


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- the page -------------------------------------------------------------------------------


def test_a_person_makes_an_assistant_each_save_a_new_frozen_version(alice, as_alice):
    response = as_alice.post(f"{PAGE}new/", form(instructions="Answer in Latin."))
    assert response.status_code == 302
    assistant = Assistant.objects.get(owner=alice)
    assert (assistant.version, assistant.versions.get().snapshot["instructions"]) == (
        1,
        "Answer in Latin.",
    )
    edited = as_alice.post(f"{PAGE}{assistant.pk}/edit/", form(instructions="Answer in Greek."))
    assert edited.status_code == 302
    first, second = assistant.versions.order_by("number")
    assert (first.number, first.snapshot["instructions"]) == (1, "Answer in Latin.")
    assert (second.number, second.snapshot["instructions"]) == (2, "Answer in Greek.")
    assert second.created_by == alice
    page = as_alice.get(PAGE).content.decode()
    assert "Gardener" in page
    assert "version 2" in page
    assert f"/?assistant={assistant.pk}" in page  # Start a conversation


def test_a_form_naming_a_tool_or_group_not_theirs_is_refused(alice, as_alice, bob):
    theirs = Group.objects.create(name="not alice's")
    tool = as_alice.post(f"{PAGE}new/", form(all_tools=None, tool_names=["launch_rockets"]))
    group = as_alice.post(f"{PAGE}new/", form(groups=[theirs.pk]))
    assert (tool.status_code, group.status_code) == (400, 400)
    assert "Select a valid choice" in tool.content.decode()
    assert not Assistant.objects.exists()


def test_another_persons_assistant_is_404_unless_shared(alice, bob, as_alice):
    bobs = made(bob, name="Bob's secret")
    assert as_alice.get(f"{PAGE}{bobs.pk}/edit/").status_code == 404
    assert as_alice.post(f"{PAGE}{bobs.pk}/archive/").status_code == 404
    assert as_alice.post(f"{PAGE}{bobs.pk}/edit/", form(name="Mine now")).status_code == 404
    assert "Bob's secret" not in as_alice.get(PAGE).content.decode()
    assert Assistant.objects.get(pk=bobs.pk).name == "Bob's secret"


def test_archiving_keeps_the_assistant_and_its_versions(alice, as_alice):
    assistant = made(alice)
    run = start_run(alice, "Hello", model="mock", conversation=conversation_with(alice, assistant))
    assert as_alice.post(f"{PAGE}{assistant.pk}/archive/").status_code == 302
    assistant.refresh_from_db()
    assert assistant.archived_at is not None
    assert AgentRun.objects.get(pk=run.pk).assistant_version.assistant == assistant
    assert assistant not in assistants_for(alice)
    assert "(archived)" in as_alice.get(PAGE).content.decode()


# --- sharing --------------------------------------------------------------------------------


def test_shared_with_a_group_a_member_may_use_it_and_no_one_else(
    alice, bob, carol, gardeners, as_alice
):
    assert as_alice.post(f"{PAGE}new/", form(groups=[gardeners.pk])).status_code == 302
    assistant = Assistant.objects.get(owner=alice)
    assert assistant in assistants_for(carol)
    assert assistant not in assistants_for(bob)
    carols = signed_in(carol)
    assert "Gardener" in carols.get(PAGE).content.decode()
    assert carols.get(f"{PAGE}{assistant.pk}/edit/").status_code == 404  # used, not edited
    bobs = signed_in(bob)
    refused = bobs.post("/send/", {"task": "Hello", "assistant": assistant.pk, "model": "mock"})
    assert refused.status_code == 400
    assert "not one you may use" in refused.content.decode()
    assert not Conversation.objects.filter(owner=bob).exists()


def test_sharing_off_refuses_sharing_and_ends_what_was_shared(
    settings, alice, carol, gardeners, as_alice
):
    shared = made(alice, groups=(gardeners,))
    settings.LOOP_ASSISTANT_SHARING = "off"
    assert shared not in assistants_for(carol)
    assert shared in assistants_for(alice)
    page = as_alice.get(f"{PAGE}new/").content.decode()
    assert "Share with" not in page
    assert "does not let people share" in page
    as_alice.post(f"{PAGE}new/", form(name="Private", groups=[gardeners.pk]))
    assert not Assistant.objects.get(name="Private").groups.exists()


def test_site_assistants_reach_everyone_or_their_groups(alice, bob, gardeners):
    everyone = made(None, name="For all", everyone=True)
    gardening = made(None, name="For gardeners", groups=(gardeners,))
    assert set(assistants_for(alice)) == {everyone, gardening}
    assert set(assistants_for(bob)) == {everyone}


# --- the chat's send ------------------------------------------------------------------------


def conversation_with(user: User, assistant: Assistant) -> Conversation:
    return Conversation.objects.create(owner=user, assistant=assistant)


def test_a_first_send_with_an_assistant_starts_its_conversation(alice, as_alice):
    assistant = made(alice, name="Latinist")
    response = as_alice.post("/send/", {"task": "Hello", "assistant": assistant.pk})
    assert response.status_code == 302
    run = AgentRun.objects.get()
    assert run.conversation.assistant == assistant
    assert run.allowed["assistant"] == {"id": assistant.pk, "version": 1, "name": "Latinist"}
    page = as_alice.get(response.url).content.decode()
    assert 'id="conversation-assistant"' in page
    assert "Latinist" in page


def test_a_forged_assistant_id_is_refused_and_nothing_stored(alice, bob, as_alice):
    bobs = made(bob)
    for forged in (bobs.pk, 999999, "x"):
        response = as_alice.post("/send/", {"task": "Hello", "assistant": forged})
        assert response.status_code == 400
        assert "not one you may use" in response.content.decode()
    assert not Conversation.objects.exists()
    assert not AgentRun.objects.exists()


def test_a_conversation_whose_assistant_is_archived_or_unshared_takes_no_turn(
    alice, carol, gardeners
):
    assistant = made(alice, groups=(gardeners,))
    conversation = conversation_with(carol, assistant)
    start_run(carol, "First", model="mock", conversation=conversation)
    carol.groups.remove(gardeners)
    with pytest.raises(AssistantUnavailable, match="archived or not shared with you"):
        start_run(carol, "Second", model="mock", conversation=conversation)
    carols = signed_in(carol)
    refused = carols.post(f"/c/{conversation.pk}/send/", {"task": "Third"})
    assert refused.status_code == 400
    assert "no longer shared with you" in refused.content.decode()
    assert AgentRun.objects.filter(conversation=conversation).count() == 1


def test_the_picker_offers_the_persons_assistants_and_preselects_one(alice, bob, as_alice):
    mine, bobs = made(alice, name="Mine"), made(bob, name="Bob's own")
    page = as_alice.get(f"/?assistant={mine.pk}").content.decode()
    assert f'<option value="{mine.pk}" data-model="" selected>Mine</option>' in page
    assert "Bob's own" not in page
    assert 'role="combobox"' in page
    assert 'role="listbox"' in page
    assert str(bobs.pk) not in as_alice.get(f"/?assistant={bobs.pk}").content.decode().split(
        "assistant-pick-area"
    )[1].split("</select>")[0].replace(f'value="{mine.pk}"', "")


# --- versions and the worker ----------------------------------------------------------------


def test_an_edit_after_a_run_leaves_its_record_and_the_next_run_gets_the_new_version(
    alice,
    as_alice,
    on_server,  # noqa: F811
):
    as_alice.post(f"{PAGE}new/", form(instructions="Answer in Latin.", ask_before=["run_code"]))
    assistant = Assistant.objects.get()
    conversation = conversation_with(alice, assistant)
    on_server.reply("Salve.")
    first = execute_run(start_run(alice, "Say hello", conversation=conversation))
    recorded = (dict(first.allowed), first.assistant_version_id)
    as_alice.post(
        f"{PAGE}{assistant.pk}/edit/",
        form(instructions="Answer in Greek.", all_tools=None, tool_names=["read_file"]),
    )
    first.refresh_from_db()
    assert (first.allowed, first.assistant_version_id) == recorded
    assert first.allowed["rights"]["ask"] == ["run_code"]
    assert first.allowed["rights"]["tools"] is None
    on_server.reply("Chaire.")
    second = execute_run(start_run(alice, "Say hello again", conversation=conversation))
    assert second.assistant_version.number == 2
    assert second.allowed["assistant"]["version"] == 2
    assert second.allowed["rights"]["tools"] == ["read_file"]
    first_prompt, second_prompt = (request.messages[0]["content"] for request in on_server.requests)
    assert "Answer in Latin." in first_prompt
    assert "Answer in Greek." not in first_prompt
    assert "Answer in Greek." in second_prompt


def offered_tools(request: Any) -> set[str]:
    return {tool["function"]["name"] for tool in request.body.get("tools", [])}


def test_a_tool_the_assistant_leaves_out_is_not_offered_and_its_call_refused(
    alice,
    on_server,  # noqa: F811
):
    assistant = made(alice, all_tools=False, tool_names=["read_file", "list_files"])
    on_server.reply(tool_calls=[tool_call("run_code", {"code": "print(1)"})])
    on_server.reply("Done.")
    run = execute_run(
        start_run(alice, "Run code", conversation=conversation_with(alice, assistant))
    )
    first = on_server.requests[0]
    assert offered_tools(first) == {"read_file", "list_files"}
    [finished] = run.events.filter(kind="tool_call_finished")
    assert finished.data["status"] == "error"
    assert finished.data["text"].startswith(
        "This run may not use the tool run_code (its conversation's assistant, or your groups "
        "when it started, left it out), so it was not called."
    )
    assert not run.tool_executions.filter(tool="run_code", status="ok").exists()


def test_without_memory_nothing_is_recalled_and_no_outcome_remembered(alice, workspaces):
    remembering = made(alice, name="Remembers")
    forgetting = made(alice, name="Forgets", use_memory=False)
    done = execute_run(
        start_run(alice, DEMO, model="mock", conversation=conversation_with(alice, remembering))
    )
    assert Memory.objects.filter(source_run_id=done.pk).exists()  # the control: it remembers

    unrecorded = execute_run(
        start_run(alice, DEMO, model="mock", conversation=conversation_with(alice, forgetting))
    )
    assert not Memory.objects.filter(source_run_id=unrecorded.pk).exists()
    recalling = execute_run(
        start_run(alice, RECALL, model="mock", conversation=conversation_with(alice, remembering))
    )
    blind = execute_run(
        start_run(alice, RECALL, model="mock", conversation=conversation_with(alice, forgetting))
    )
    assert recalling.events.filter(kind="memories_recalled").exists()
    assert not blind.events.filter(kind="memories_recalled").exists()


def test_its_asks_make_a_call_wait_for_approval(alice):
    assistant = made(alice, ask_before=["run_code"])
    run = execute_run(
        start_run(
            alice,
            "What is 17 * 23?",
            model="mock",
            conversation=conversation_with(alice, assistant),
        )
    )
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.approvals.get(decision="").tool == "run_code"
    plain = execute_run(start_run(alice, "What is 17 * 23?", model="mock"))
    assert plain.status == RunStatus.SUCCEEDED


def test_the_assistants_model_is_used_when_none_is_picked(alice):
    assistant = made(alice, model="mock")
    run = submit_first_run(alice, "Hello", assistant=assistant)
    assert (run.provider, run.conversation.assistant) == ("mock", assistant)
