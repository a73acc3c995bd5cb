"""Stopping a run from outside: the Interrupt itself, a model call abandoned, a tool call seen out,
a hand-back that records nothing more, a sink that lost the run, and Groq's retry wait woken.

A run handed back, or whose sink lost it, is no exception out of run_agent: its result says it was
released, and nothing more is recorded."""

import signal
import threading

import pytest

from agent.llm.scripted import ScriptedLLM, answer, call
from core.ending import Released
from core.events import ModelReplied, RunFinished, RunStarted, RunStatus, ToolCallFinished
from core.guards import RunReleased
from core.interrupt import Interrupt, Interrupted, StopReason, interruptibly
from core.llm import Reply, ToolCall
from core.loop import Limits, RunResult, run_agent
from tests.conftest import wait_for
from tests.fakes import BlockingLLM, CountingTools
from tests.groq_server import groq_server_fixture  # noqa: F401 (the fixture)
from tests.test_groq import QUESTION, TOOLS, make_llm
from tests.test_loop import assert_history_valid

pytestmark = pytest.mark.fast

# --- the Interrupt --------------------------------------------------------------------------------


def test_the_first_reason_wins_and_hooks_run_once():
    interrupt = Interrupt()
    heard: list[StopReason | None] = []
    interrupt.on_set(lambda: heard.append(interrupt.reason))
    assert not interrupt.is_set()
    assert interrupt.reason is None

    assert interrupt.set(StopReason.HAND_BACK) is True
    assert interrupt.set(StopReason.CANCEL) is False

    assert interrupt.is_set()
    assert interrupt.reason is StopReason.HAND_BACK
    assert heard == [StopReason.HAND_BACK]


def test_a_hook_added_after_the_interrupt_runs_at_once():
    interrupt = Interrupt()
    interrupt.set(StopReason.CANCEL)
    heard: list[str] = []
    interrupt.on_set(lambda: heard.append("late"))
    assert heard == ["late"]


def test_a_failing_hook_does_not_keep_the_others_from_running():
    interrupt = Interrupt()
    heard: list[str] = []

    def broken() -> None:
        raise OSError("the sandbox was already gone")

    interrupt.on_set(broken)
    interrupt.on_set(lambda: heard.append("second"))
    interrupt.set(StopReason.CANCEL)
    assert heard == ["second"]


def test_hooks_run_in_the_thread_that_sets_it():
    interrupt = Interrupt()
    threads: list[str] = []
    interrupt.on_set(lambda: threads.append(threading.current_thread().name))
    setter = threading.Thread(target=interrupt.set, args=(StopReason.CANCEL,), name="setter")
    setter.start()
    setter.join()
    assert threads == ["setter"]


def test_wait_wakes_when_it_is_set_from_another_thread():
    interrupt = Interrupt()
    threading.Timer(0.05, interrupt.set, (StopReason.CANCEL,)).start()
    assert interrupt.wait(30) is True


def test_wait_times_out_when_nothing_sets_it():
    assert Interrupt().wait(0.01) is False


def test_interruptibly_returns_the_result_or_raises_the_error_of_the_call():
    interrupt = Interrupt()
    assert interruptibly(lambda a, b=0: a + b, interrupt, 2, b=3) == 5

    def broken() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        interruptibly(broken, interrupt)


def test_interruptibly_without_an_interrupt_runs_the_call_in_this_thread():
    assert interruptibly(lambda: threading.current_thread(), None) is threading.current_thread()


def test_interruptibly_abandons_a_hanging_call_as_soon_as_it_is_set():
    interrupt = Interrupt()
    release, finished = threading.Event(), threading.Event()

    def hang() -> str:
        release.wait(30)
        finished.set()
        return "too late"

    threading.Timer(0.05, interrupt.set, (StopReason.CANCEL,)).start()
    with pytest.raises(Interrupted) as raised:
        interruptibly(hang, interrupt)
    assert raised.value.reason is StopReason.CANCEL
    assert not finished.is_set()  # abandoned, not waited out
    release.set()


def test_interruptibly_does_not_start_a_call_once_interrupted():
    interrupt = Interrupt()
    interrupt.set(StopReason.HAND_BACK)
    started: list[int] = []
    with pytest.raises(Interrupted):
        interruptibly(lambda: started.append(1), interrupt)
    assert started == []


# --- the loop, interrupted ---------------------------------------------------------------------


def set_when(event: threading.Event, interrupt: Interrupt, reason: StopReason) -> None:
    """Interrupt as soon as `event` happens (from a thread of its own, as a Stop would)."""

    def watch() -> None:
        if event.wait(30):
            interrupt.set(reason)

    threading.Thread(target=watch, daemon=True).start()


def test_cancel_during_a_model_call_ends_the_run_cancelled_without_waiting_for_the_model():
    llm, interrupt, events = BlockingLLM(), Interrupt(), []
    set_when(llm.asked, interrupt, StopReason.CANCEL)

    result = run_agent(
        "the task", llm=llm, tools=CountingTools(), sink=events.append, interrupt=interrupt
    )

    assert result.status is RunStatus.CANCELLED
    assert not llm.answered.is_set()  # the call was abandoned, not waited out
    assert [type(event) for event in events] == [RunStarted, RunFinished]
    assert events[-1].status == "cancelled"
    assert_history_valid(result.messages)
    llm.release.set()


def test_cancel_during_a_tool_call_is_seen_once_the_tool_returns():
    interrupt, events = Interrupt(), []
    tools = CountingTools(during=lambda name: interrupt.set(StopReason.CANCEL))
    llm = ScriptedLLM([call("echo", {"text": "a"}), answer("never asked for")])

    result = run_agent("the task", llm=llm, tools=tools, sink=events.append, interrupt=interrupt)

    assert result.status is RunStatus.CANCELLED
    assert len(llm.turns) == 1  # the model is not asked again
    [finished] = [event for event in events if isinstance(event, ToolCallFinished)]
    assert finished.status == "ok"  # the call that was running is recorded as it ended
    assert_history_valid(result.messages)


def test_cancel_before_a_call_starts_skips_it():
    interrupt, events = Interrupt(), []
    llm = ScriptedLLM([Reply(tool_calls=(ToolCall("c1", "echo", "{}"),))])
    tools = CountingTools()
    original = llm.chat

    def chat_then_stop(*args, **kwargs):
        reply = original(*args, **kwargs)
        interrupt.set(StopReason.CANCEL)  # Stop pressed as the reply arrives
        return reply

    llm.chat = chat_then_stop
    result = run_agent("the task", llm=llm, tools=tools, sink=events.append, interrupt=interrupt)

    assert result.status is RunStatus.CANCELLED
    assert tools.dispatched == []
    [finished] = [event for event in events if isinstance(event, ToolCallFinished)]
    assert (finished.status, finished.text) == ("skipped", "not run: the run was cancelled")


def assert_released(result: RunResult) -> None:
    """The run was let go unfinished: not over, and its result says so."""
    assert isinstance(result, Released)
    assert result.status is RunStatus.RUNNING


def test_hand_back_during_a_model_call_releases_the_run_and_records_nothing_more():
    llm, interrupt, events = BlockingLLM(), Interrupt(), []
    set_when(llm.asked, interrupt, StopReason.HAND_BACK)

    result = run_agent(
        "the task", llm=llm, tools=CountingTools(), sink=events.append, interrupt=interrupt
    )

    assert_released(result)
    assert [type(event) for event in events] == [RunStarted]
    llm.release.set()


def test_hand_back_during_a_tool_call_records_nothing_after_it():
    interrupt, events = Interrupt(), []
    tools = CountingTools(during=lambda name: interrupt.set(StopReason.HAND_BACK))
    llm = ScriptedLLM([call("echo", {"text": "a"}), answer("never asked for")])

    result = run_agent("the task", llm=llm, tools=tools, sink=events.append, interrupt=interrupt)

    assert_released(result)
    assert [event.kind for event in events] == ["run_started", "model_replied", "tool_call_started"]
    assert tools.dispatched == [("echo", '{"text": "a"}')]


def test_hand_back_while_the_model_answers_keeps_its_reply_unrecorded():
    """The reply came, but the run was handed back first: the next worker asks again."""
    interrupt, events = Interrupt(), []
    llm = ScriptedLLM([answer("done")])
    original = llm.chat

    def answer_as_the_worker_stops(*args, **kwargs):
        interrupt.set(StopReason.HAND_BACK)
        return original(*args, **kwargs)

    llm.chat = answer_as_the_worker_stops
    result = run_agent("t", llm=llm, tools=CountingTools(), sink=events.append, interrupt=interrupt)
    assert_released(result)
    assert [type(event) for event in events] == [RunStarted]


class RunLost(RunReleased):
    """What the recorder raises when its write is fenced off."""


@pytest.mark.parametrize("lost_at", ["model_replied", "tool_call_started", "run_finished"])
def test_a_sink_that_lost_the_run_stops_it_with_nothing_more_recorded(lost_at):
    events: list = []

    def sink(event) -> None:
        if event.kind == lost_at:
            raise RunLost("another worker resumed this run")
        events.append(event)

    tools = CountingTools()
    llm = ScriptedLLM([call("echo", {"text": "a"}), answer("done")])
    assert_released(run_agent("the task", llm=llm, tools=tools, sink=sink))

    kinds = [event.kind for event in events]
    assert lost_at not in kinds
    assert "run_finished" not in kinds
    whole = ["run_started", "model_replied", "tool_call_started", "tool_call_finished"]
    assert kinds == [*whole, "model_replied"][: len(kinds)]
    if lost_at == "tool_call_started":
        assert tools.dispatched == []  # a call whose start could not be recorded never runs


def test_without_an_interrupt_a_run_goes_as_before():
    events: list = []
    result = run_agent(
        "t",
        llm=ScriptedLLM([call("echo", {"text": "a"}), answer("done")]),
        tools=CountingTools(),
        sink=events.append,
        limits=Limits(),
    )
    assert result.status is RunStatus.SUCCEEDED
    assert [type(event) for event in events].count(ModelReplied) == 2


# --- Groq's wait before a retry ----------------------------------------------------------------


def test_groqs_rate_limit_wait_ends_at_once_on_an_interrupt_and_is_not_retried(groq_server):
    groq_server.rate_limited(retry_after=30)
    llm, interrupt = make_llm(groq_server, max_retries=2), Interrupt()
    threading.Timer(0.2, interrupt.set, (StopReason.CANCEL,)).start()

    with pytest.raises(Interrupted):
        llm.chat(QUESTION, TOOLS, timeout=120, interrupt=interrupt)

    assert len(groq_server.requests) == 1  # asked once; no retry after the interrupt


def test_a_run_stopped_during_groqs_rate_limit_wait_ends_cancelled(groq_server):
    groq_server.rate_limited(retry_after=30)
    llm, interrupt, events = make_llm(groq_server, max_retries=2), Interrupt(), []
    threading.Timer(0.2, interrupt.set, (StopReason.CANCEL,)).start()
    handed: list[Interrupt | None] = []
    chat = llm.chat
    llm.chat = lambda *args, **options: (
        handed.append(options.get("interrupt")) or chat(*args, **options)
    )

    result = run_agent(
        "the task", llm=llm, tools=CountingTools(), sink=events.append, interrupt=interrupt
    )

    assert result.status is RunStatus.CANCELLED
    assert handed == [interrupt]  # the loop handed its interrupt to the model's waits
    assert len(groq_server.requests) == 1
    assert [type(event) for event in events] == [RunStarted, RunFinished]


def test_a_reply_streaming_in_is_read_no_further_once_the_run_is_interrupted(groq_server):
    groq_server.reply("word " * 200, drip=0.05)  # over 6 s, a chunk at a time
    llm, heard, interrupt = make_llm(groq_server, max_retries=2), [], Interrupt()

    def hear(piece: str) -> None:
        heard.append(piece)
        interrupt.set(StopReason.CANCEL)  # Stop pressed as the answer starts showing

    llm.deltas = hear
    with pytest.raises(Interrupted):
        llm.chat(QUESTION, TOOLS, timeout=120, interrupt=interrupt)

    assert len(heard) == 1  # the first piece, and nothing shown after the Stop
    [sent] = wait_for(lambda: groq_server.streams, "the server to stop dripping")
    assert sent.client_left
    assert len(groq_server.requests) == 1


def test_calls_one_after_another_are_made_by_one_thread_started_once():
    interrupt = Interrupt()
    first = interruptibly(threading.get_ident, interrupt)
    assert interruptibly(threading.get_ident, interrupt) == first != threading.get_ident()


def test_a_call_left_hanging_does_not_hold_up_the_next_run_s_calls():
    hung, release = Interrupt(), threading.Event()
    threading.Timer(0.05, hung.set, args=(StopReason.CANCEL,)).start()
    with pytest.raises(Interrupted):
        interruptibly(release.wait, hung, 30)
    try:
        assert interruptibly(lambda: "answered", Interrupt()) == "answered"
    finally:
        release.set()


def test_a_signal_another_thread_received_is_handled_while_a_call_is_waited_for():
    """The kernel may hand the process's signal to any thread; its handler runs in the main
    thread only: the wait for a call wakes for it, as runagent's Ctrl-C needs."""
    handled = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.set())

    def wait_for_the_handler() -> bool:
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # to this thread, not main
        return handled.wait(3)

    try:
        assert interruptibly(wait_for_the_handler, Interrupt())
    finally:
        signal.signal(signal.SIGUSR1, previous)
