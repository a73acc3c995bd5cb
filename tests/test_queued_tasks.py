"""Tasks sent while a run is going in the conversation, in the real database with the engine
working runs in this process: each waits its turn and becomes the next run in the transaction
that ends the live one; one sent "now" reaches the live run's model before its next turn, and
one the run ended without reading waits its turn. A person reaches only their own."""

import pytest

from agent import queued
from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun, QueuedTask
from agent.runs import InvalidTask, cancel_run, new_conversation, submit_run
from core.events import PersonSaid, RunStatus
from engine.execution import execute_run
from engine.tasks import start_stalled_queues

pytestmark = pytest.mark.django_db(transaction=True)


def going(user, task: str = "What is 17 * 23?") -> AgentRun:
    return submit_run(user, task, new_conversation(user), model="mock")


def runs_in(conversation_id: int) -> list[tuple[str, str]]:
    runs = AgentRun.objects.filter(conversation_id=conversation_id).order_by("pk")
    return list(runs.values_list("task", "status"))


def test_a_task_sent_during_a_run_waits_and_becomes_the_next_run_when_it_ends(alice):
    run = going(alice)
    waiting = queued.queue_task(alice, run.conversation, "Now count slowly to 3")
    assert runs_in(run.conversation_id) == [("What is 17 * 23?", RunStatus.QUEUED)]
    assert queued.waiting_in(run.conversation) == [waiting]

    execute_run(run)

    [first, second] = AgentRun.objects.filter(conversation=run.conversation).order_by("pk")
    assert first.status == RunStatus.SUCCEEDED
    assert (second.task, second.status, second.job_id is not None) == (
        "Now count slowly to 3",
        RunStatus.QUEUED,
        True,
    )
    assert not QueuedTask.objects.exists()


def test_tasks_wait_in_the_order_sent_one_run_at_a_time(alice):
    run = going(alice)
    for task in ("second", "third"):
        queued.queue_task(alice, run.conversation, task)
    execute_run(run)
    second = AgentRun.objects.get(task="second")
    assert not AgentRun.objects.filter(task="third").exists()  # it waits for "second"
    execute_run(second)
    assert AgentRun.objects.get(task="third").status == RunStatus.QUEUED


def test_a_task_sent_now_reaches_the_running_model_and_is_not_run_again(alice):
    run = going(alice, "Compute something in two steps")
    waiting = queued.queue_task(alice, run.conversation, "Give the answer in French")

    class PersonSendsNow(ScriptedLLM):
        def chat(self, messages, tools, *, timeout=None, interrupt=None):
            if not self.turns:  # while the model thinks its first turn, the person sends it now
                queued.send_now(alice, waiting.pk)
            return super().chat(messages, tools, timeout=timeout)

    model = PersonSendsNow([call("list_files", {}), answer("Fini.")])
    run = execute_run(run, llm=model)

    assert run.status == RunStatus.SUCCEEDED
    second_turn, _ = model.turns[1]
    assert second_turn[-1] == {"role": "user", "content": "Give the answer in French"}
    [said] = run.events.filter(kind=PersonSaid.kind)
    assert (said.data["message"], said.step) == (waiting.pk, 1)
    assert runs_in(run.conversation_id) == [("Compute something in two steps", "succeeded")]
    assert not QueuedTask.objects.exists()  # heard: it is in the run's log, not waiting


def test_a_task_sent_now_that_the_run_never_read_waits_its_turn(alice):
    run = going(alice)
    waiting = queued.queue_task(alice, run.conversation, "And then 2 + 2?")

    class PersonSendsAtTheEnd(ScriptedLLM):
        def chat(self, messages, tools, *, timeout=None, interrupt=None):
            queued.send_now(alice, waiting.pk)  # during the last turn: no turn comes after it
            return super().chat(messages, tools, timeout=timeout)

    run = execute_run(run, llm=PersonSendsAtTheEnd([answer("391")]))
    assert not run.events.filter(kind=PersonSaid.kind).exists()
    assert runs_in(run.conversation_id)[-1] == ("And then 2 + 2?", RunStatus.QUEUED)


def test_a_stopped_queued_run_lets_the_next_task_start(alice):
    run = going(alice)
    queued.queue_task(alice, run.conversation, "Something else instead")
    cancel_run(alice, run.pk)  # still waiting for a worker: ended at once
    assert runs_in(run.conversation_id) == [
        ("What is 17 * 23?", RunStatus.CANCELLED),
        ("Something else instead", RunStatus.QUEUED),
    ]


def test_a_task_sent_when_nothing_goes_any_more_starts_at_once(alice):
    run = going(alice)
    execute_run(run)
    queued.queue_task(alice, run.conversation, "One more")
    assert runs_in(run.conversation_id)[-1] == ("One more", RunStatus.QUEUED)
    assert not QueuedTask.objects.exists()


def test_a_queue_left_standing_is_started_by_the_recovery(alice, settings):
    run = going(alice)
    queued.queue_task(alice, run.conversation, "After the crash")
    # Its worker died as it recorded the end: the run ended, and nothing started the next task.
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    assert start_stalled_queues() == 1
    assert runs_in(run.conversation_id)[-1] == ("After the crash", RunStatus.QUEUED)
    assert start_stalled_queues() == 0


def test_a_task_refused_keeps_waiting(alice, settings):
    settings.LOOP_USER_ACTIVE_RUNS = 1
    run = going(alice)
    queued.queue_task(alice, run.conversation, "Waits for room")
    going_elsewhere = AgentRun.objects.filter(pk=run.pk)
    going_elsewhere.update(status=RunStatus.SUCCEEDED)
    other = going(alice, "Another conversation's run")  # the one run alice may have going
    assert start_stalled_queues() == 0
    assert QueuedTask.objects.get().text == "Waits for room"
    execute_run(other)
    assert start_stalled_queues() == 1


def test_nobody_sends_removes_or_sees_another_persons_queued_task(alice, bob):
    run = going(alice)
    waiting = queued.queue_task(alice, run.conversation, "Alice's next task")
    with pytest.raises(queued.NotWaiting):
        queued.send_now(bob, waiting.pk)
    with pytest.raises(queued.NotWaiting):
        queued.remove(bob, waiting.pk)
    with pytest.raises(AgentRun.conversation.field.related_model.DoesNotExist):
        queued.queue_task(bob, run.conversation, "Into alice's conversation")
    assert QueuedTask.objects.get().sent_to is None


def test_a_waiting_task_can_be_removed_and_one_sent_to_the_run_cannot(alice):
    run = going(alice)
    first = queued.queue_task(alice, run.conversation, "first")
    second = queued.queue_task(alice, run.conversation, "second")
    queued.remove(alice, first.pk)
    queued.send_now(alice, second.pk)
    with pytest.raises(queued.NotWaiting):
        queued.remove(alice, second.pk)
    assert list(QueuedTask.objects.values_list("text", "sent_to")) == [("second", run.pk)]


def test_a_queued_task_is_checked_like_any_task_and_the_queue_is_bounded(alice):
    run = going(alice)
    with pytest.raises(InvalidTask, match="empty"):
        queued.queue_task(alice, run.conversation, "   ")
    for n in range(queued.MAX_WAITING):
        queued.queue_task(alice, run.conversation, f"task {n}")
    with pytest.raises(InvalidTask, match="already wait"):
        queued.queue_task(alice, run.conversation, "one too many")


def test_the_inbox_is_read_on_a_borrowed_session_the_run_s_thread_does_not_keep(alice):
    """Read before each model turn: a session held from there through the model's turn would
    keep it from every other run of the worker for as long as the model thinks."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    run = going(alice)

    def read_then_look() -> tuple[list, bool]:
        messages = list(queued.messages_for(run.pk))
        return messages, connection.connection is not None

    assert getattr(connection, "pool", None) is not None  # the site's pool, as in a worker
    with ThreadPoolExecutor(1) as thread:
        messages, holds = thread.submit(read_then_look).result()
    assert (messages, holds) == ([], False)
