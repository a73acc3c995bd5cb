"""Runs as recorded in PostgreSQL: the event log, the audit rows, and the run operations."""

import pytest

from agent.llm.factory import ModelUnavailable
from agent.llm.scripted import ScriptedLLM, answer, call, calls
from agent.models import AgentRun, BreakerTrip, RunEvent
from agent.runs import InvalidTask, cancel_run, start_run
from agent.selectors import history_of, runs_for
from core.events import HaltReason, ModelReplied, RunStatus
from core.interrupt import Interrupt
from core.llm import LLMError, Usage
from core.loop import Limits
from engine.execution import RunNotQueued, execute_run
from memory.models import Memory

pytestmark = pytest.mark.django_db

DEMO = "Compute the sum of 1..100 and save it to a file"


def watched_interrupts(monkeypatch) -> list[Interrupt]:
    """Every Interrupt the engine makes for a run from now on, to wait on in a test."""
    made: list[Interrupt] = []

    class Watched(Interrupt):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr("engine.execution.Interrupt", Watched)
    return made


def scripted_run(user, replies, **limits) -> AgentRun:
    run = start_run(user, "a task", model="mock", limits=Limits(**limits))
    return execute_run(run, llm=ScriptedLLM(replies))


def test_the_demo_task_computes_fails_to_read_recovers_by_writing_and_answers(alice, workspaces):
    run = execute_run(start_run(alice, DEMO, model="mock"))
    assert run.status == RunStatus.SUCCEEDED
    assert run.answer == "The sum of 1..100 is 5050. I saved it to sum.txt."
    executions = list(run.tool_executions.values_list("tool", "status"))
    assert executions == [("run_code", "ok"), ("read_file", "error"), ("write_file", "ok")]
    run_code = run.tool_executions.get(tool="run_code")
    assert run_code.policy == "bubblewrap"
    assert "5050" in run_code.result
    assert "does not exist" in run.tool_executions.get(tool="read_file").error
    assert (workspaces / str(alice.pk) / "sum.txt").read_text() == "5050\n"
    remembered = Memory.objects.get(source_run_id=run.pk)
    assert remembered.owner == alice
    assert remembered.text == (
        f"Task: {DEMO}\nOutcome: succeeded\nAnswer: {run.answer}\nFiles written: sum.txt (5050)"
    )
    assert (run.iterations, run.tool_calls) == (4, 3)
    assert run.prompt_tokens > 0
    assert run.completion_tokens > 0
    assert run.finished_at is not None


def test_the_failing_task_is_stopped_by_the_breaker_and_the_trip_is_recorded(alice, workspaces):
    task = "Keep reading missing.txt until it exists"
    run = execute_run(start_run(alice, task, model="mock"))
    assert run.status == RunStatus.HALTED
    assert run.halt_reason == HaltReason.TOOL_FAILURES
    assert run.tool_executions.filter(tool="read_file", status="error").count() == 3
    trip = BreakerTrip.objects.get(run=run)
    assert trip.tool == "read_file"
    assert trip.reason == HaltReason.TOOL_FAILURES
    [failure] = trip.failures  # three failures, one error: listed once, with its count
    assert failure["times"] == "3"
    assert "does not exist" in failure["error"]
    assert "read_file failed 3 times in a row" in run.answer


def test_events_are_numbered_in_the_order_they_happened(alice):
    run = scripted_run(alice, [calls(("list_files", {}), ("no_such_tool", {})), answer("ok")])
    events = list(run.events.values_list("seq", "kind"))
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))
    assert [kind for _, kind in events] == [
        "run_started",
        "model_replied",
        "tool_call_started",
        "tool_call_started",
        "tool_call_finished",
        "tool_call_finished",
        "model_replied",
        "run_finished",
    ]


class CheckingLLM(ScriptedLLM):
    """At every turn, checks the history rebuilt from the database is what the model is shown."""

    def __init__(self, run, replies):
        super().__init__(replies)
        self.run = run
        self.checked = 0

    def chat(self, messages, tools, **options):
        assert history_of(self.run) == messages
        self.checked += 1
        return super().chat(messages, tools, **options)


# The model is asked in a thread of its own (a Stop abandons the call): what it reads from the
# database must be committed.
@pytest.mark.django_db(transaction=True)
def test_the_history_is_recoverable_from_the_database_after_every_step(alice, workspaces):
    run = start_run(alice, "a task", model="mock", limits=Limits(max_iterations=3))
    script = [
        calls(("write_file", {"path": "a.txt", "content": "A"}), ("read_file", {"path": "a.txt"})),
        call("read_file", {"path": "missing.txt"}),
        call("list_files", {}),
        answer("Summary of what I did."),
    ]
    llm = CheckingLLM(run, script)
    run = execute_run(run, llm=llm)
    assert llm.checked == 4  # three turns with tools, then the summary turn at the cap
    assert run.halt_reason == HaltReason.ITERATION_CAP
    assert run.answer == "Summary of what I did."


def test_every_event_is_persisted_before_it_is_published(alice):
    published = []

    def publish(event):
        # The n-th event published is the n-th stored (a reply is stored with what follows it).
        stored = RunEvent.objects.filter(run=run).order_by("seq")[len(published)]
        assert stored.kind == event.kind
        published.append(event.kind)

    run = start_run(alice, "a task", model="mock")
    execute_run(run, llm=ScriptedLLM([call("list_files", {}), answer("ok")]), on_event=publish)
    assert len(published) == RunEvent.objects.filter(run=run).count() == 6


def test_a_failing_subscriber_does_not_stop_the_run_or_its_record(alice):
    def publish(event):
        raise BrokenPipeError("the terminal went away")

    run = start_run(alice, "a task", model="mock")
    run = execute_run(
        run, llm=ScriptedLLM([call("list_files", {}), answer("ok")]), on_event=publish
    )
    assert run.status == RunStatus.SUCCEEDED
    assert run.events.count() == 6


def test_a_provider_failure_is_recorded_as_failed_with_the_error(alice):
    run = scripted_run(alice, [call("list_files", {}), LLMError("Groq answered 503: overloaded")])
    assert run.status == RunStatus.FAILED
    assert run.error == "Model failed: Groq answered 503: overloaded"
    assert not Memory.objects.exists()  # a provider's failure teaches nothing about the task
    assert "What worked: list_files." in run.answer
    assert run.events.last().kind == "run_finished"


def test_calls_that_never_ran_are_recorded_as_skipped(alice):
    script = [
        calls(("list_files", {}), ("list_files", {"path": "."}), ("list_files", {"path": "x"}))
    ]
    run = scripted_run(alice, [*script, answer("summary")], max_tool_calls=1)
    assert list(run.tool_executions.values_list("status", flat=True)) == [
        "ok",
        "skipped",
        "skipped",
    ]
    assert run.halt_reason == HaltReason.TOOL_CALL_BUDGET


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("", "The task is empty"),
        ("  \n\t ", "The task is empty"),
        ("x" * 10_001, "the limit is 10,000"),
    ],
)
def test_a_malformed_task_is_refused_and_nothing_is_stored(alice, task, message):
    with pytest.raises(InvalidTask, match=message):
        start_run(alice, task)
    assert not AgentRun.objects.exists()


def test_a_groq_model_without_a_key_is_refused(alice, settings):
    settings.GROQ_API_KEY = ""
    with pytest.raises(ModelUnavailable, match="needs GROQ_API_KEY"):
        start_run(alice, "a task", model="llama-3.3-70b-versatile")


def test_the_model_defaults_to_the_mock_without_a_key_and_groq_with_one(alice, settings):
    settings.GROQ_API_KEY = ""
    assert start_run(alice, "a task").model == "mock"
    settings.GROQ_API_KEY = "gsk_test"
    settings.LOOP_GROQ_MODEL = "openai/gpt-oss-20b"
    run = start_run(alice, "a task")
    assert (run.provider, run.model) == ("groq", "openai/gpt-oss-20b")


def test_a_run_is_executed_once_only(alice):
    run = scripted_run(alice, [answer("done")])
    with pytest.raises(RunNotQueued):
        execute_run(run, llm=ScriptedLLM([answer("again")]))


def test_cancelling_a_queued_run_ends_it_at_once(alice):
    run = start_run(alice, "a task", model="mock")
    run = cancel_run(alice, run.pk)
    assert run.status == RunStatus.CANCELLED
    assert list(run.events.values_list("kind", flat=True)) == ["run_finished"]
    with pytest.raises(RunNotQueued):
        execute_run(run)


# The run's watcher reads the Stop in a thread of its own: it must be committed to be seen.
@pytest.mark.django_db(transaction=True)
def test_cancelling_a_running_run_stops_it_at_the_next_check(alice, monkeypatch):
    interrupts = watched_interrupts(monkeypatch)

    def user_cancels(event):
        if isinstance(event, ModelReplied):  # as if the user pressed Cancel as the page showed
            cancel_run(alice, run.pk)  # the reply (stored with its call's start: that call runs)
            assert interrupts[0].wait(5)  # the run's watcher heard it

    run = start_run(alice, "a task", model="mock")
    script = ScriptedLLM([call("list_files", {}), answer("never")])
    run = execute_run(run, llm=script, on_event=user_cancels)
    assert run.status == RunStatus.CANCELLED
    assert run.cancel_requested_at is not None
    assert list(run.tool_executions.values_list("status", flat=True)) == ["ok"]
    assert len(script.turns) == 1, "the model was asked again after the Stop"


def test_nobody_can_cancel_another_users_run(alice, bob):
    run = start_run(alice, "a task", model="mock")
    with pytest.raises(AgentRun.DoesNotExist):
        cancel_run(bob, run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert run.cancel_requested_at is None


def test_a_users_runs_are_only_their_own(alice, bob):
    mine = start_run(alice, "mine", model="mock")
    start_run(bob, "theirs", model="mock")
    assert list(runs_for(alice)) == [mine]


def test_a_process_stopped_mid_run_leaves_the_run_interrupted_not_running(alice):
    class StoppedLLM(ScriptedLLM):
        def chat(self, messages, tools, **options):
            if len(self.turns) == 1:
                raise KeyboardInterrupt  # the second Ctrl-C: the process goes away
            return super().chat(messages, tools, **options)

    used = Usage(prompt_tokens=120, completion_tokens=30)  # the first turn's, before the stop
    run = start_run(alice, "a task", model="mock")
    with pytest.raises(KeyboardInterrupt):
        execute_run(run, llm=StoppedLLM([call("list_files", {}, usage=used), answer("never")]))
    run.refresh_from_db()
    assert run.status == RunStatus.INTERRUPTED
    assert "KeyboardInterrupt" in run.error
    assert run.events.last().kind == "run_finished"
    # The progress made before it stopped is kept.
    assert run.tool_executions.count() == 1
    assert (run.iterations, run.tool_calls) == (1, 1)
    assert (run.prompt_tokens, run.completion_tokens) == (120, 30)  # the counts are not reset


def test_a_run_that_cannot_start_is_recorded_as_failed_with_the_reason(alice, settings):
    settings.GROQ_API_KEY = "gsk_at_start"
    run = start_run(alice, "a task", model="llama-3.3-70b-versatile")
    settings.GROQ_API_KEY = ""  # the worker that executes it has no key
    run = execute_run(run)
    assert run.status == RunStatus.FAILED
    assert "The run could not start" in run.error
    assert "needs GROQ_API_KEY" in run.error
    assert run.events.last().kind == "run_finished"
