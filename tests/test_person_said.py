"""A message its person sends a running run ("Send now"): the loop alone, with a scripted model
and an inbox in memory. The model reads it before its next turn, once, however the run goes on;
its log says where it entered, and a run resumed from that log does not hear it twice."""

import pytest

from agent.llm.scripted import ScriptedLLM, answer, call
from core.events import PersonSaid, RunStatus
from core.loop import Limits, run_agent
from core.run import PersonMessage
from core.state import replay
from tests.test_loop import assert_history_valid, bound

pytestmark = pytest.mark.fast


class Inbox:
    """What the person has sent so far; `after_turns` turns in, the message arrives."""

    def __init__(self, llm: ScriptedLLM, after_turns: int, *messages: PersonMessage) -> None:
        self.llm, self.after_turns, self.messages = llm, after_turns, messages
        self.asked = 0

    def __call__(self) -> tuple[PersonMessage, ...]:
        self.asked += 1
        return self.messages if len(self.llm.turns) >= self.after_turns else ()


def test_the_model_reads_what_the_person_sent_before_its_next_turn_once():
    llm = ScriptedLLM(
        [call("echo", {"text": "one"}), call("echo", {"text": "two"}), answer("Done, in French.")]
    )
    inbox = Inbox(llm, 1, PersonMessage(7, "Answer in French, please."))
    events: list = []
    result = run_agent("the task", llm=llm, tools=bound(), sink=events.append, inbox=inbox)

    assert result.status is RunStatus.SUCCEEDED
    first, second, third = (messages for messages, _ in llm.turns)
    assert not any(m["content"] == "Answer in French, please." for m in first)
    assert second[-1] == {"role": "user", "content": "Answer in French, please."}
    assert second[-2]["role"] == "tool"  # after the first call's result
    assert [m["content"] for m in third].count("Answer in French, please.") == 1
    [said] = [event for event in events if isinstance(event, PersonSaid)]
    assert (said.step, said.message, said.text) == (1, 7, "Answer in French, please.")
    assert inbox.asked == 3  # once before each turn
    assert_history_valid(result.messages)


def test_a_run_resumed_from_its_log_has_heard_what_it_heard_and_hears_what_is_new():
    llm = ScriptedLLM([call("echo", {"text": "one"}), call("echo", {"text": "two"})])
    inbox = Inbox(llm, 1, PersonMessage(1, "Use metres."))
    events: list = []
    run_agent("the task", llm=llm, tools=bound(), sink=events.append, inbox=inbox)  # model runs out
    log = [event for event in events if event.kind != "run_finished"]
    state = replay(log)
    assert state.heard == {1}
    assert {"role": "user", "content": "Use metres."} in state.messages

    again = ScriptedLLM([answer("Done in metres, and short.")])
    later = (PersonMessage(1, "Use metres."), PersonMessage(2, "Keep it short."))
    resumed_events: list = []
    result = run_agent(
        "the task",
        llm=again,
        tools=bound(),
        sink=resumed_events.append,
        resume=state,
        inbox=lambda: later,
    )
    assert result.status is RunStatus.SUCCEEDED
    [(messages, _)] = again.turns
    contents = [m["content"] for m in messages]
    assert contents.count("Use metres.") == 1
    assert contents[-1] == "Keep it short."
    assert [e.message for e in resumed_events if isinstance(e, PersonSaid)] == [2]


def test_the_summary_turn_of_a_halted_run_reads_no_inbox():
    llm = ScriptedLLM([call("echo", {"text": "again"})] * 2 + [answer("Summary.")])
    inbox = Inbox(llm, 0, PersonMessage(3, "Late words."))
    events: list = []
    run_agent(
        "the task",
        llm=llm,
        tools=bound(),
        sink=events.append,
        inbox=inbox,
        limits=Limits(max_iterations=2),
    )
    said = [event for event in events if isinstance(event, PersonSaid)]
    assert [e.message for e in said] == [3]  # heard once, before the first turn
    assert inbox.asked == 2  # the two turns with tools; not the summary the cap asks for
