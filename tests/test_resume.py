"""A run going on from its log: replay() of a log cut at every point, and run_agent(resume=...) from
there. No tool call that finished runs again, a call cut in the middle is answered as interrupted,
budgets and the breaker count across the cut, and the history stays a valid chat."""

import dataclasses
import json
from collections import Counter
from typing import Any

import pytest

from agent.llm.mock import MockLLM
from agent.llm.scripted import ScriptedLLM, answer
from core.events import (
    AnswerSource,
    BreakerTripped,
    Event,
    HaltReason,
    ModelReplied,
    ResumeReason,
    RunFinished,
    RunHalted,
    RunResumed,
    RunStarted,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
    event_from_dict,
)
from core.guards import Breaker
from core.history import INTERRUPTED_CALL, NOT_RUN_ENDED
from core.interrupt import Interrupt
from core.llm import LLMError, Message, Reply, ToolCall, ToolSpec, Usage
from core.loop import Limits, RunResult, run_agent
from core.state import messages_from_events, replay
from tests.fakes import CountingTools
from tests.test_loop import assert_history_valid

pytestmark = pytest.mark.fast

TASK = "the task"
NOTE = "[Loop] The person asked you to go on from where you stopped."


def asks(*calls: tuple[str, str, dict[str, Any]], tokens: int = 0) -> Reply:
    """A reply asking for calls with ids of its own, unique across the script."""
    return Reply(
        tool_calls=tuple(ToolCall(id, name, json.dumps(args)) for id, name, args in calls),
        usage=Usage(tokens, 0),
    )


class Script(ScriptedLLM):
    """ScriptedLLM with the call ids as written, so a resumed run's model goes on with the ids
    the first run's had at the same turns."""

    def chat(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        *,
        timeout: float | None = None,
        interrupt: Interrupt | None = None,
    ) -> Reply:
        self.turns.append((list(messages), tools))
        self.timeouts.append(timeout)
        if len(self.turns) > len(self.replies):
            raise LLMError("the script has no more replies")
        return self.replies[len(self.turns) - 1]


def run(
    replies: list[Reply], *, limits: Limits | None = None, tools=None, **options
) -> tuple[list[Event], RunResult]:
    events: list[Event] = []
    result = run_agent(
        TASK,
        llm=Script(replies),
        tools=tools or CountingTools(),
        sink=events.append,
        limits=limits or Limits(),
        **options,
    )
    return events, result


class Resumed:
    """A log cut after `cut` events, then resumed: the model is asked for the turns the log does
    not have (one in flight at the cut is asked again)."""

    def __init__(self, log: list[Event], cut: int, replies: list, **options) -> None:
        self.before = log[:cut]
        self.state = replay(self.before)
        answered = sum(isinstance(event, ModelReplied) for event in self.before)
        self.llm = Script(replies[answered:])
        self.tools = CountingTools()
        self.events: list[Event] = []
        self.result = run_agent(
            TASK,
            llm=self.llm,
            tools=self.tools,
            sink=self.events.append,
            resume=self.state,
            **options,
        )
        self.log = [*self.before, *self.events]

    def of(self, kind: type[Event]) -> list:
        return [event for event in self.log if isinstance(event, kind)]


def assert_each_call_ran_once(resumed: Resumed) -> None:
    """Every call the model asked for has one end; one started before the cut never runs again,
    and one left running at the cut ends interrupted."""
    asked = [call.id for event in resumed.of(ModelReplied) for call in event.tool_calls]
    ends = Counter(event.call_id for event in resumed.of(ToolCallFinished))
    starts = Counter(event.call_id for event in resumed.of(ToolCallStarted))
    assert ends == Counter(asked), "each call asked for ends exactly once"
    assert all(count == 1 for count in starts.values()), "no call starts twice"
    started_before = {e.call_id for e in resumed.before if isinstance(e, ToolCallStarted)}
    finished_before = {e.call_id for e in resumed.before if isinstance(e, ToolCallFinished)}
    started_after = [e.call_id for e in resumed.events if isinstance(e, ToolCallStarted)]
    assert not started_before & set(started_after)
    assert len(resumed.tools.dispatched) == len(started_after)
    for event in resumed.of(ToolCallFinished):
        if event.call_id in started_before - finished_before:
            assert (event.status, event.text) == ("interrupted", INTERRUPTED_CALL)


def assert_whole(resumed: Resumed) -> None:
    """The log with the resume is one run: one start, one end, steps in order, the history it
    gives is the one the loop kept, and a valid chat."""
    kinds = [event.kind for event in resumed.log]
    assert kinds.count("run_started") == 1
    assert kinds.count("run_finished") == 1
    assert kinds[-1] == "run_finished"
    steps = [event.step for event in resumed.of(ModelReplied)]
    assert steps == list(range(1, len(steps) + 1))
    assert messages_from_events(resumed.log) == resumed.result.messages
    assert_history_valid(resumed.result.messages)
    finished = resumed.log[-1]
    assert finished.iterations == len(steps) == resumed.result.iterations
    assert finished.tool_calls == len(resumed.of(ToolCallStarted)) == resumed.result.tool_calls
    used = sum(e.prompt_tokens + e.completion_tokens for e in resumed.of(ModelReplied))
    assert resumed.result.usage.total_tokens == used


def cuts(log: list[Event]) -> list[int]:
    """Every point a log can stop at before its end: after each event but the last."""
    return list(range(1, len(log)))


# --- a run that succeeds: a parallel batch of two calls, one more call, the answer -------------

SUCCEEDS = [
    asks(("a", "echo", {"text": "a"}), ("b", "echo", {"text": "b"}), tokens=10),
    asks(("c", "echo", {"text": "c"}), tokens=20),
    answer("done", usage=Usage(30, 5)),
]
SUCCEEDED_LOG, _ = run(SUCCEEDS)


def test_the_run_that_succeeds_logs_a_batch_of_two_in_parallel():
    assert [event.kind for event in SUCCEEDED_LOG] == [
        "run_started",
        "model_replied",
        "tool_call_started",
        "tool_call_started",
        "tool_call_finished",
        "tool_call_finished",
        "model_replied",
        "tool_call_started",
        "tool_call_finished",
        "model_replied",
        "run_finished",
    ]


@pytest.mark.parametrize("cut", cuts(SUCCEEDED_LOG))
def test_a_run_cut_anywhere_goes_on_and_succeeds_with_each_call_run_once(cut):
    resumed = Resumed(SUCCEEDED_LOG, cut, SUCCEEDS)
    assert (resumed.result.status, resumed.result.answer) == (RunStatus.SUCCEEDED, "done")
    assert_each_call_ran_once(resumed)
    assert_whole(resumed)


@pytest.mark.parametrize("cut", cuts(SUCCEEDED_LOG))
def test_a_run_cut_where_no_call_was_running_ends_with_the_log_it_would_have_had(cut):
    resumed = Resumed(SUCCEEDED_LOG, cut, SUCCEEDS)
    if resumed.state.dangling:
        assert resumed.log != SUCCEEDED_LOG
        return
    assert [comparable(event) for event in resumed.log] == [
        comparable(event) for event in SUCCEEDED_LOG
    ]


def comparable(event: Event) -> dict[str, Any]:
    """An event without the run's wall-clock duration, or its model's time to reply."""
    data = event.as_dict()
    if isinstance(event, RunFinished):
        data.pop("duration")
    if isinstance(event, ModelReplied):
        data.pop("seconds")
    return {"kind": event.kind, **data}


def test_a_call_cut_in_the_middle_is_answered_interrupted_and_never_run_again():
    started_a = SUCCEEDED_LOG.index(
        next(e for e in SUCCEEDED_LOG if isinstance(e, ToolCallStarted))
    )
    resumed = Resumed(SUCCEEDED_LOG, started_a + 1, SUCCEEDS)

    assert resumed.tools.dispatched == [("echo", '{"text": "b"}'), ("echo", '{"text": "c"}')]
    a_ended = next(e for e in resumed.events if isinstance(e, ToolCallFinished))
    assert (a_ended.call_id, a_ended.status, a_ended.text) == ("a", "interrupted", INTERRUPTED_CALL)
    assert a_ended.step == 1  # the step of the reply that asked for it
    shown, _ = resumed.llm.turns[0]
    assert {"role": "tool", "tool_call_id": "a", "content": "INTERRUPTED: " + INTERRUPTED_CALL} in (
        shown
    )


# --- replay at the points that matter ------------------------------------------------------------


def cut_after(log: list[Event], kind: type[Event], nth: int = 1) -> int:
    seen = 0
    for index, event in enumerate(log):
        seen += isinstance(event, kind)
        if seen == nth:
            return index + 1
    raise AssertionError(f"no {kind.__name__} number {nth}")


def test_replay_after_the_start_has_the_first_messages_and_nothing_to_do():
    state = replay(SUCCEEDED_LOG[: cut_after(SUCCEEDED_LOG, RunStarted)])
    started = SUCCEEDED_LOG[0]
    assert state.messages == started.messages
    assert state.limits == dataclasses.asdict(Limits())
    assert (state.step, state.tool_calls, state.usage) == (0, 0, Usage())
    assert (state.pending, state.dangling, state.final, state.halted) == ([], [], None, None)


def test_replay_after_a_reply_asking_for_two_calls_has_both_pending():
    state = replay(SUCCEEDED_LOG[: cut_after(SUCCEEDED_LOG, ModelReplied)])
    assert [call.id for call in state.pending] == ["a", "b"]
    assert (state.step, state.tool_calls, state.usage) == (1, 0, Usage(10, 0))
    assert state.messages[-1]["tool_calls"][0]["id"] == "a"
    assert state.dangling == []
    assert state.final is None


def test_replay_after_one_call_started_has_it_dangling_and_the_other_pending():
    state = replay(SUCCEEDED_LOG[: cut_after(SUCCEEDED_LOG, ToolCallStarted)])
    assert [call.id for call in state.dangling] == ["a"]
    assert [call.id for call in state.pending] == ["b"]
    assert state.tool_calls == 1


def test_replay_after_one_of_two_calls_finished_has_the_other_dangling():
    state = replay(SUCCEEDED_LOG[: cut_after(SUCCEEDED_LOG, ToolCallFinished)])
    assert [call.id for call, _ in state.observations] == ["a"]
    assert [call.id for call in state.dangling] == ["b"]
    assert state.pending == []
    assert state.messages[-1] == {
        "role": "tool",
        "tool_call_id": "a",
        "content": 'echo ran with {"text": "a"}',
    }


def test_replay_after_a_final_reply_has_its_text_to_finish_with():
    state = replay(SUCCEEDED_LOG[:-1])
    assert state.final == "done"
    assert state.last_text == "done"
    assert (state.step, state.tool_calls, state.usage) == (3, 3, Usage(60, 5))
    assert state.finished is None


def test_replay_of_a_whole_log_has_its_end():
    state = replay(SUCCEEDED_LOG)
    assert state.finished == SUCCEEDED_LOG[-1]
    assert state.final is None


def test_replay_reads_events_as_they_are_stored():
    stored = [event_from_dict(event.kind, event.as_dict()) for event in SUCCEEDED_LOG[:-1]]
    assert replay(stored) == replay(SUCCEEDED_LOG[:-1])


@pytest.mark.parametrize("reason", [ResumeReason.WORKER_LOST, ResumeReason.HANDED_BACK])
def test_a_log_that_has_the_runs_end_is_only_read_back(reason):
    """Its worker stopped right after recording the end: taken over, the run stays ended."""
    _, first = run(SUCCEEDS)
    state = replay([*SUCCEEDED_LOG, resumed_event(reason)])
    assert state.finished == SUCCEEDED_LOG[-1]

    events, result = run([], resume=state)

    assert events == []
    assert result == first


def test_a_final_reply_the_log_has_is_finished_without_asking_the_model():
    resumed = Resumed(SUCCEEDED_LOG, len(SUCCEEDED_LOG) - 1, SUCCEEDS)
    assert resumed.llm.turns == []
    assert [event.kind for event in resumed.events] == ["run_finished"]
    assert resumed.result.answer == "done"


def test_a_help_reply_the_log_has_is_finished_as_help():
    """The mark survives a worker lost between the model's help and the run's end."""
    helped = [answer("I can only add numbers.", help=True)]
    log, _ = run(helped)
    resumed = Resumed(log, len(log) - 1, helped)
    assert resumed.llm.turns == []
    [finished] = resumed.events
    assert isinstance(finished, RunFinished)
    assert finished.answer_source is resumed.result.answer_source is AnswerSource.HELP


# --- a run that halts: a batch of two, the iteration cap, the summary ---------------------------

HALTS = [
    asks(("a", "echo", {"text": "a"}), ("b", "fail", {"text": "b"})),
    answer("I stopped at the cap."),
]
ONE_STEP = Limits(max_iterations=1)
HALTED_LOG, _ = run(HALTS, limits=ONE_STEP)


def test_the_run_that_halts_asks_for_its_summary():
    assert [event.kind for event in HALTED_LOG][-3:] == [
        "run_halted",
        "model_replied",
        "run_finished",
    ]


def cuts_in_a_call(log: list[Event]) -> list[int]:
    """The cuts that leave a call started and unfinished: the resume answers it interrupted."""
    return [cut for cut in cuts(log) if replay(log[:cut]).dangling]


@pytest.mark.parametrize("cut", sorted(set(cuts(HALTED_LOG)) - set(cuts_in_a_call(HALTED_LOG))))
def test_a_halting_run_cut_anywhere_halts_once_with_its_summary(cut):
    resumed = Resumed(HALTED_LOG, cut, HALTS)
    assert resumed.result.status is RunStatus.HALTED
    assert resumed.result.halt_reason is HaltReason.ITERATION_CAP
    assert resumed.result.answer == "I stopped at the cap."
    assert len(resumed.of(RunHalted)) == 1
    assert_each_call_ran_once(resumed)
    assert_whole(resumed)


@pytest.mark.parametrize("cut", cuts_in_a_call(HALTED_LOG))
def test_a_run_at_its_cap_gets_the_turn_an_interrupted_call_costs(cut):
    """The turn the model spends on what the lost worker left unfinished is not the run's: a
    run at its cap is not halted for it (issue 25, 14)."""
    resumed = Resumed(HALTED_LOG, cut, HALTS, limits=ONE_STEP)
    assert resumed.result.status is RunStatus.SUCCEEDED
    assert resumed.result.answer == "I stopped at the cap."
    assert not resumed.of(RunHalted)
    assert resumed.state.interrupted_steps == set()
    assert replay(resumed.log).interrupted_steps == {1}
    assert resumed.result.iterations == 2  # the record keeps every turn taken
    assert_each_call_ran_once(resumed)
    assert_whole(resumed)


def test_a_second_resume_in_the_same_step_frees_no_second_turn():
    """Calls of one step interrupted by two resumes cost the model one turn, not two."""
    first = Resumed(HALTED_LOG, cut_after(HALTED_LOG, ToolCallStarted), HALTS)
    again_at = len(first.before) + 2  # a's interrupted end, then b started
    log = first.log[:again_at]
    assert replay(log).dangling
    resumed = Resumed(log, again_at, [*HALTS[:1], asks(("c", "echo", {})), answer("done")])
    assert resumed.result.halt_reason is HaltReason.ITERATION_CAP
    assert replay(resumed.log).interrupted_steps == {1}


def test_replay_after_the_halt_has_it_and_its_summary_request_last():
    state = replay(HALTED_LOG[: cut_after(HALTED_LOG, RunHalted)])
    assert state.halted is not None
    assert state.halted.reason == "iteration_cap"
    assert state.messages[-1] == {"role": "user", "content": state.halted.summary_prompt}


def test_a_halt_without_its_summary_asks_for_it_again_without_tools():
    resumed = Resumed(HALTED_LOG, cut_after(HALTED_LOG, RunHalted), HALTS)
    [(shown, tools)] = resumed.llm.turns
    assert tools is None
    summary_requests = [m for m in shown if m["content"] == resumed.state.halted.summary_prompt]
    assert len(summary_requests) == 1
    assert shown[-1] == summary_requests[0]


# --- budgets and the breaker across a resume ------------------------------------------------------


def test_iterations_count_across_a_resume():
    replies = [asks(("a", "echo", {})), asks(("b", "echo", {})), answer("the summary")]
    log, _ = run(replies, limits=Limits(max_iterations=2))
    resumed = Resumed(log, cut_after(log, ToolCallFinished, 2), replies)
    assert resumed.result.halt_reason is HaltReason.ITERATION_CAP
    [(_, tools)] = resumed.llm.turns  # asked only for its summary
    assert tools is None


def test_tool_calls_count_across_a_resume():
    replies = [asks(("a", "echo", {})), asks(("b", "echo", {})), asks(("c", "echo", {}))]
    log, first = run([*replies, answer("summary")], limits=Limits(max_tool_calls=2))
    assert first.halt_reason is HaltReason.TOOL_CALL_BUDGET
    resumed = Resumed(log, cut_after(log, ToolCallFinished, 2), [*replies, answer("summary")])
    assert resumed.result.halt_reason is HaltReason.TOOL_CALL_BUDGET
    assert resumed.tools.dispatched == []
    assert resumed.of(ToolCallFinished)[-1].status == "skipped"


def test_tokens_count_across_a_resume():
    replies = [asks(("a", "echo", {}), tokens=60), asks(("b", "echo", {}), tokens=50)]
    log, _ = run([*replies, answer("done")], limits=Limits(max_tokens=100))
    resumed = Resumed(log, cut_after(log, ToolCallFinished), [*replies, answer("done")])
    assert resumed.result.halt_reason is HaltReason.TOKEN_BUDGET
    assert resumed.tools.dispatched == []  # b's turn spent the budget: b is skipped


def test_pending_calls_are_skipped_when_the_log_had_spent_the_token_budget():
    replies = [asks(("a", "echo", {}), ("b", "echo", {}), tokens=150), answer("done")]
    log, _ = run(replies, limits=Limits(max_tokens=100))
    resumed = Resumed(log, cut_after(log, ModelReplied), replies)
    assert resumed.result.halt_reason is HaltReason.TOKEN_BUDGET
    assert resumed.tools.dispatched == []


def test_the_deadline_counts_the_time_already_worked():
    resumed = Resumed(
        SUCCEEDED_LOG, cut_after(SUCCEEDED_LOG, RunStarted), SUCCEEDS, worked_seconds=601.0
    )
    assert resumed.result.halt_reason is HaltReason.DEADLINE
    assert resumed.llm.turns == []
    assert resumed.log[-1].duration >= 601.0


def test_the_model_gets_only_the_time_the_run_has_left():
    resumed = Resumed(
        SUCCEEDED_LOG, cut_after(SUCCEEDED_LOG, RunStarted), SUCCEEDS, worked_seconds=590.0
    )
    assert resumed.result.status is RunStatus.SUCCEEDED
    assert resumed.llm.timeouts[0] <= 10.0


FAILS = [asks((f"f{n}", "fail", {"text": str(n)})) for n in range(1, 4)]


def test_failures_before_and_after_a_resume_trip_the_breaker():
    replies = [*FAILS, answer("the summary")]
    log, first = run(replies, limits=Limits(max_tool_failures=3))
    assert first.halt_reason is HaltReason.TOOL_FAILURES
    resumed = Resumed(log, cut_after(log, ToolCallFinished, 2), replies)
    assert resumed.result.halt_reason is HaltReason.TOOL_FAILURES
    assert resumed.tools.dispatched == [("fail", '{"text": "3"}')]
    [trip] = resumed.of(BreakerTripped)
    assert [failure["error"] for failure in trip.failures] == [
        f'failed on {{"text": "{n}"}}' for n in range(1, 4)
    ]


BREAKS = [*FAILS, answer("the summary")]
BROKEN_LOG, _ = run(BREAKS, limits=Limits(max_tool_failures=3))


@pytest.mark.parametrize("cut", cuts(BROKEN_LOG))
def test_a_run_the_breaker_stops_cut_anywhere_trips_once_saying_why(cut):
    resumed = Resumed(BROKEN_LOG, cut, BREAKS)
    assert_each_call_ran_once(resumed)
    assert_whole(resumed)
    if resumed.state.dangling:  # that call's outcome is unknown, not a failure: no trip
        assert resumed.result.status is RunStatus.SUCCEEDED
        assert not resumed.of(BreakerTripped)
        return
    assert resumed.result.halt_reason is HaltReason.TOOL_FAILURES
    assert len(resumed.of(BreakerTripped)) == 1
    [halted] = resumed.of(RunHalted)
    [original] = [event for event in BROKEN_LOG if isinstance(event, RunHalted)]
    assert halted == original


def test_an_interrupted_call_is_no_failure_the_model_may_ask_for_again():
    replies = [asks(("x", "fail", {"text": "x"})), asks(("y", "fail", {"text": "x"})), answer("ok")]
    log, _ = run(replies, limits=Limits(max_tool_failures=2))
    resumed = Resumed(log, cut_after(log, ToolCallStarted), replies, limits=Limits())
    # The same call again after an interrupted one runs (no "repeated failed call" trip) ...
    assert resumed.tools.dispatched == [("fail", '{"text": "x"}')]
    # ... and its failure is the first one the breaker counts, so the run goes on.
    assert resumed.result.status is RunStatus.SUCCEEDED


# --- a log with RunResumed: a lost worker, a Continue ------------------------------------------


def resumed_event(reason=ResumeReason.WORKER_LOST, note="", limits=None, attempt=2) -> RunResumed:
    return RunResumed(
        attempt=attempt,
        reason=reason.value,
        lost_worker="host:123" if reason is ResumeReason.WORKER_LOST else "",
        note=note,
        limits=dataclasses.asdict(limits) if limits else {},
    )


def test_a_resume_marker_changes_no_message_and_its_limits_apply():
    cut = cut_after(SUCCEEDED_LOG, ToolCallStarted)
    marked = [*SUCCEEDED_LOG[:cut], resumed_event(limits=Limits(max_tool_calls=1))]
    state = replay(marked)
    assert state.messages == replay(SUCCEEDED_LOG[:cut]).messages
    assert state.limits["max_tool_calls"] == 1
    assert [call.id for call in state.dangling] == ["a"]  # still open: the loop answers it


def test_a_run_resumed_twice_still_runs_each_call_once():
    first = Resumed(SUCCEEDED_LOG, cut_after(SUCCEEDED_LOG, ToolCallStarted), SUCCEEDS)
    marked = [*first.before, resumed_event(), *first.events]
    again_at = len(first.before) + 1 + 2  # after the interrupted end of a and b's start
    assert marked[again_at - 1].kind == "tool_call_started"
    second = Resumed(marked, again_at, SUCCEEDS)
    assert second.result.status is RunStatus.SUCCEEDED
    assert_each_call_ran_once(second)
    ends = {e.call_id: e.status for e in second.of(ToolCallFinished)}
    assert ends == {"a": "interrupted", "b": "interrupted", "c": "ok"}


def continued(log: list[Event], limits: Limits) -> list[Event]:
    return [*log, resumed_event(ResumeReason.CONTINUED, NOTE, limits)]


def test_a_continued_halted_run_reads_the_note_and_goes_on_with_fresh_limits():
    log = continued(HALTED_LOG, Limits(max_iterations=5))
    state = replay(log)
    assert (state.finished, state.halted, state.final) == (None, None, None)
    assert state.limits["max_iterations"] == 5
    assert state.messages[-1] == {"role": "user", "content": NOTE}

    events, result = run([answer("Now it is done.")], resume=state)

    assert (result.status, result.answer) == (RunStatus.SUCCEEDED, "Now it is done.")
    assert [event.kind for event in events] == ["model_replied", "run_finished"]
    assert events[0].step == state.step + 1
    assert messages_from_events([*log, *events]) == result.messages
    assert_history_valid(result.messages)


def test_a_continue_starts_the_breaker_afresh():
    replies = [*FAILS[:2], answer("gave up")]
    log, _ = run(replies, limits=Limits(max_tool_failures=3))
    state = replay(continued(log, Limits(max_tool_failures=3)))
    assert state.breaker == Breaker(max_failures=3, max_identical=3)  # nothing counted since

    tools = CountingTools()
    third = asks(("f3", "fail", {"text": "3"}))
    events, result = run([third, answer("still failing")], resume=state, tools=tools)

    assert result.status is RunStatus.SUCCEEDED  # one failure since the Continue, not three
    assert not [event for event in events if isinstance(event, BreakerTripped)]


def test_a_continued_run_that_ended_with_calls_open_closes_them_and_runs_none():
    cut = cut_after(SUCCEEDED_LOG, ToolCallStarted)
    worker_stopped = RunFinished(status="interrupted", answer="", error="The worker stopped.")
    ended = [*SUCCEEDED_LOG[:cut], worker_stopped]
    state = replay(continued(ended, Limits()))
    assert (state.pending, state.dangling) == ([], [])
    closing = [m for m in state.messages if m["role"] == "tool"]
    assert closing == [
        {"role": "tool", "tool_call_id": "a", "content": "INTERRUPTED: " + INTERRUPTED_CALL},
        {"role": "tool", "tool_call_id": "b", "content": "SKIPPED: " + NOT_RUN_ENDED},
    ]
    assert_history_valid(state.messages)

    tools = CountingTools()
    events, result = run([answer("Picked up.")], resume=state, tools=tools)
    assert result.status is RunStatus.SUCCEEDED
    assert tools.dispatched == []
    assert messages_from_events([*continued(ended, Limits()), *events]) == result.messages


def test_the_continue_note_is_a_user_message_in_the_history():
    messages = messages_from_events(continued(HALTED_LOG, Limits()))
    assert messages[-1] == {"role": "user", "content": NOTE}
    assert_history_valid(messages)


def test_the_mock_model_asks_again_for_the_call_a_lost_worker_was_in():
    """The keyless model goes on after a resume, as the worker tests need it to."""
    first: list[Event] = []
    run_agent("Count slowly to 3", llm=MockLLM(), tools=CountingTools(), sink=first.append)
    cut = cut_after(first, ToolCallStarted, 2)
    tools, events = CountingTools(), []

    result = run_agent(
        "Count slowly to 3",
        llm=MockLLM(),
        tools=tools,
        sink=events.append,
        resume=replay(first[:cut]),
    )

    assert (result.status, result.answer) == (
        RunStatus.SUCCEEDED,
        "I counted to 3, one step a second.",
    )
    ends = [event.status for event in events if isinstance(event, ToolCallFinished)]
    assert ends == ["interrupted", "ok", "ok"]
    assert [json.loads(arguments)["code"][-8:] for _, arguments in tools.dispatched] == [
        "print(2)",
        "print(3)",
    ]
    assert_history_valid(result.messages)
