"""Conversations: threads of runs whose context holds the earlier turns, within a budget."""

import json

import pytest
from django.db.models import Q, TextField
from django.db.models.functions import Cast

from agent.forgotten import FORGOTTEN
from agent.models import AgentRun, Conversation, RunEvent, ToolExecution
from agent.runs import (
    TooManyActiveRuns,
    delete_conversation,
    new_conversation,
    rename_conversation,
    start_run,
)
from agent.selectors import conversation_context, conversations_for, runs_for
from core.events import RunStatus
from engine.execution import execute_run
from memory.models import ForgottenMemory, Memory

pytestmark = pytest.mark.django_db


def ask(user, conversation, task: str) -> AgentRun:
    return execute_run(start_run(user, task, model="mock", conversation=conversation))


def started_messages(run: AgentRun) -> list[dict]:
    return RunEvent.objects.get(run=run, kind="run_started").data["messages"]


def test_a_follow_up_sees_the_earlier_turn_and_acts_on_it(alice, workspaces):
    conversation = new_conversation(alice)
    first = ask(alice, conversation, "What is 17 * 23?")
    assert first.answer == "17 * 23 = 391"
    follow_up = ask(alice, conversation, "Save that to result.txt")
    assert follow_up.status == RunStatus.SUCCEEDED
    assert (workspaces / str(alice.pk) / "result.txt").read_text() == "391\n"
    assert follow_up.answer == "I saved 391 to result.txt."
    roles = [(m["role"], m["content"]) for m in started_messages(follow_up)[1:]]
    assert roles == [
        ("user", "What is 17 * 23?"),
        ("assistant", "17 * 23 = 391"),
        ("user", "Save that to result.txt"),
    ]


def test_a_run_in_another_conversation_does_not_see_the_turn(alice, workspaces):
    ask(alice, new_conversation(alice), "What is 17 * 23?")
    elsewhere = ask(alice, new_conversation(alice), "Save that to result.txt")
    assert [m["role"] for m in started_messages(elsewhere)] == ["system", "user"]
    assert not (workspaces / str(alice.pk) / "result.txt").exists()


def test_the_budget_drops_the_oldest_turns_with_a_note(alice, settings):
    conversation = new_conversation(alice)
    before = None
    for n in range(1, 4):
        before = AgentRun.objects.create(
            user=alice,
            conversation=conversation,
            parent=before,
            task=f"task {n} " + "word " * 20,
            answer=f"answer {n} " + "word " * 20,
            status=RunStatus.SUCCEEDED,
        )
    current = AgentRun.objects.create(
        user=alice, conversation=conversation, parent=before, task="now"
    )
    settings.LOOP_CONVERSATION_TOKENS = 100  # room for two turns of about 46 tokens
    context = conversation_context(current)
    assert context[0] == {
        "role": "system",
        "content": "[Loop] 1 earlier turn of this conversation left out to fit the context budget.",
    }
    assert [m["content"].split()[:2] for m in context[1:]] == [
        ["task", "2"],
        ["answer", "2"],
        ["task", "3"],
        ["answer", "3"],
    ]


@pytest.mark.django_db(transaction=True)  # the remember tool works in a thread of its own
def test_a_strong_memory_answers_a_question_in_a_new_conversation(alice, workspaces):
    told = ask(alice, new_conversation(alice), "Remember that my favourite colour is teal")
    assert told.answer == "Remembered."
    asked = ask(alice, new_conversation(alice), "What is my favourite colour?")
    assert asked.status == RunStatus.SUCCEEDED
    assert asked.answer == "From what you told me: your favourite colour is teal"


@pytest.mark.django_db(transaction=True)
def test_a_question_no_memory_answers_gets_the_mock_s_honest_reply(alice, workspaces):
    ask(alice, new_conversation(alice), "Remember that my favourite colour is teal")
    asked = ask(alice, new_conversation(alice), "What is my favourite city?")
    assert "demo model" in asked.answer


def test_one_run_more_than_the_active_limit_is_refused_and_nothing_is_stored(alice, settings):
    settings.LOOP_USER_ACTIVE_RUNS = 2
    conversation = new_conversation(alice)
    first = start_run(alice, "What is 1 + 1?", model="mock", conversation=conversation)
    start_run(alice, "What is 2 + 2?", model="mock", conversation=conversation)
    with pytest.raises(TooManyActiveRuns, match="2 runs going"):
        start_run(alice, "What is 3 + 3?", model="mock", conversation=conversation)
    assert AgentRun.objects.filter(user=alice).count() == 2
    execute_run(first)
    start_run(alice, "What is 3 + 3?", model="mock", conversation=conversation)


def test_the_limit_is_per_user(alice, bob, settings):
    settings.LOOP_USER_ACTIVE_RUNS = 1
    start_run(alice, "What is 1 + 1?", model="mock")
    start_run(bob, "What is 1 + 1?", model="mock")


def test_a_run_cannot_start_in_another_user_s_conversation(alice, bob):
    with pytest.raises(Conversation.DoesNotExist):
        start_run(alice, "What is 1 + 1?", model="mock", conversation=new_conversation(bob))
    assert not AgentRun.objects.exists()


def test_the_first_task_names_the_conversation_and_it_can_be_renamed(alice):
    conversation = new_conversation(alice)
    start_run(
        alice, "Compute the sum of 1..100\nand save it", model="mock", conversation=conversation
    )
    conversation.refresh_from_db()
    assert conversation.title == "Compute the sum of 1..100 and save it"
    assert rename_conversation(alice, conversation.pk, "  Sums  ").title == "Sums"


def test_another_user_cannot_rename_or_delete_a_conversation(alice, bob):
    conversation = new_conversation(alice)
    with pytest.raises(Conversation.DoesNotExist):
        rename_conversation(bob, conversation.pk, "mine now")
    with pytest.raises(Conversation.DoesNotExist):
        delete_conversation(bob, conversation.pk)


def test_deleting_hides_the_conversation_and_its_runs_but_keeps_the_records(alice):
    conversation = new_conversation(alice)
    run = start_run(alice, "What is 1 + 1?", model="mock", conversation=conversation)
    delete_conversation(alice, conversation.pk)
    assert not conversations_for(alice).exists()
    assert not runs_for(alice).exists()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED  # a run still going stops
    assert RunEvent.objects.filter(run=run, kind="run_finished").exists()  # kept for operators


def told_teal(alice) -> Conversation:
    told = ask(alice, new_conversation(alice), "Remember that my favourite colour is teal")
    assert told.answer == "Remembered."
    return told.conversation


def favourite_colour(alice) -> str:
    return ask(alice, new_conversation(alice), "What is my favourite colour?").answer


@pytest.mark.django_db(transaction=True)  # the remember tool works in a thread of its own
def test_deleting_a_conversation_forgets_what_its_runs_remembered_when_asked(
    client, alice, workspaces
):
    conversation = told_teal(alice)
    memories = Memory.objects.filter(source_run_id__in=conversation.runs.values("pk"))
    stored = set(memories.values_list("pk", flat=True))
    client.force_login(alice)
    page = client.get(f"/c/{conversation.pk}/").text
    count = f"{len(stored)} memor{'y' if len(stored) == 1 else 'ies'}"
    assert f"Also forget what its runs remembered ({count})" in page
    assert 'name="forget" value="1" checked' in page  # offered, and the person may decline
    assert client.post(f"/c/{conversation.pk}/delete/", {"forget": "1"}).url == "/"
    assert "From what you told me" not in favourite_colour(alice)
    records = ForgottenMemory.objects.filter(owner=alice)
    assert {r.memory_id for r in records} == stored
    assert {(r.forgotten_by, r.forgotten_by_name) for r in records} == {(alice, "alice")}
    assert {r.text for r in records} == {""}  # LOOP_FORGOTTEN_TEXT_DAYS = 0: only the fact is kept


@pytest.mark.django_db(transaction=True)
def test_a_conversation_deleted_without_forgetting_keeps_its_memories(client, alice, workspaces):
    conversation = told_teal(alice)
    client.force_login(alice)
    client.post(f"/c/{conversation.pk}/delete/")  # the box unticked
    assert not conversations_for(alice).exists()
    assert favourite_colour(alice) == "From what you told me: your favourite colour is teal"
    assert not ForgottenMemory.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_forgetting_a_conversation_forgets_nothing_of_another_or_of_another_user(
    client, alice, bob, workspaces
):
    # A run that writes a file leaves an outcome (one that only computes leaves none).
    kept = ask(alice, new_conversation(alice), "Compute the sum of 1..100 and save it to a file")
    bobs = told_teal(bob)
    conversation = told_teal(alice)
    client.force_login(alice)
    client.post(f"/c/{conversation.pk}/delete/", {"forget": "1"})
    assert Memory.objects.filter(owner=alice, source_run_id=kept.pk).exists()
    assert Memory.objects.filter(owner=bob, source_run_id__in=bobs.runs.values("pk")).exists()


def quotes_of(user, text: str) -> list[str]:
    """Every row of the user's runs that holds `text` as stored, straight from the database."""
    runs = AgentRun.objects.filter(user=user)
    events = RunEvent.objects.filter(run__in=runs).annotate(stored=Cast("data", TextField()))
    executions = ToolExecution.objects.filter(run__in=runs)
    return [
        *(f"event {e.kind}" for e in events.filter(stored__contains=text)),
        *(f"{e.tool} call" for e in executions.filter(arguments__contains=text)),
        *(f"{e.tool} result" for e in executions.filter(result__contains=text)),
        *(
            f"run {run.pk}"
            for run in runs.filter(Q(task__contains=text) | Q(answer__contains=text))
        ),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_forgotten_memory_s_text_is_kept_in_none_of_its_owner_s_runs(
    client, alice, bob, workspaces
):
    conversation = told_teal(alice)
    texts = list(Memory.objects.filter(owner=alice).values_list("text", flat=True))
    [text] = Memory.objects.filter(owner=alice, origin="told").values_list("text", flat=True)
    assert favourite_colour(alice).endswith("teal")  # a run of another conversation recalls it
    told_teal(bob)
    before = quotes_of(alice, text)
    assert {"event memories_recalled", "remember call"} <= set(before), before

    client.force_login(alice)
    client.post(f"/c/{conversation.pk}/delete/", {"forget": "1"})

    assert [quotes_of(alice, each) for each in texts] == [[]] * len(texts), texts
    assert RunEvent.objects.filter(run__conversation=conversation).exists()  # kept for the audit
    call = ToolExecution.objects.get(run__user=alice, tool="remember")
    assert json.loads(call.arguments) == {"fact": FORGOTTEN}
    assert quotes_of(bob, text)  # another person's runs are theirs


@pytest.mark.django_db(transaction=True)
def test_forgetting_on_the_memories_page_takes_the_text_out_of_the_runs_too(
    client, alice, workspaces
):
    told_teal(alice)
    memory = Memory.objects.get(owner=alice, origin="told")
    assert quotes_of(alice, memory.text)
    client.force_login(alice)
    client.post("/memories/forget/", {"id": memory.pk})
    assert quotes_of(alice, memory.text) == []
