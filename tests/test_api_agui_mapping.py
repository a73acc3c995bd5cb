"""api/agui.py's mapping of a run's events to AG-UI 1.0 events, in-process: streamed pieces and
the stored reply never send text twice, calls are announced once then answered, a waiting call
is an interrupt, and each way a run ends is the protocol's."""

from datetime import UTC, datetime

import pytest
from ag_ui.core import EventType, RunFinishedEvent

from agent.selectors import Logged
from api.agui import AguiRun, Waiting, unsent
from api.follow import Delta, Ended, Quiet
from core.events import (
    ApprovalRequested,
    ModelReplied,
    RunFinished,
    RunStatus,
    ToolCallFinished,
)
from core.llm import ToolCall
from core.results import ToolStatus

pytestmark = pytest.mark.fast


def mapper() -> AguiRun:
    run = AguiRun("4", "7", "/api/v1/runs/7/approvals/{call_id}")
    run.started()
    return run


def reply(step: int, text: str, *calls: ToolCall) -> Logged:
    event = ModelReplied(
        step=step, text=text, tool_calls=list(calls), prompt_tokens=1, completion_tokens=1
    )
    return Logged(step * 10, event)


def types(events: list) -> list[str]:
    return [event.type.value for event in events]


def text_of(events: list) -> str:
    return "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)


def test_pieces_then_the_same_stored_reply_send_its_text_once():
    run = mapper()
    streamed = run.take(Delta(1, "Hello ", 0)) + run.take(Delta(1, "world", 6))
    stored = run.take(reply(1, "Hello world"))
    assert types(streamed) == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT"]
    assert types(stored) == ["TEXT_MESSAGE_END"]
    assert text_of(streamed + stored) == "Hello world"


def test_a_stored_reply_sends_what_its_pieces_did_not():
    run = mapper()
    events = run.take(Delta(1, "Hel", 0)) + run.take(reply(1, "Hello"))
    assert text_of(events) == "Hello"
    assert types(events)[-2:] == ["TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]


def test_a_reply_read_from_the_log_alone_is_sent_whole():
    events = mapper().take(reply(2, "The answer is 391."))
    assert types(events) == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]
    assert text_of(events) == "The answer is 391."
    assert events[0].message_id == "run-7-step-2"


def test_pieces_from_the_middle_of_a_reply_and_stale_ones_are_left_out():
    run = mapper()
    assert run.take(Delta(1, "world", 6)) == []  # joined mid-reply: the stored reply will do
    run.take(reply(1, "Hello world"))
    assert run.take(Delta(1, "late", 0)) == []  # its reply is stored already
    assert run.take(Quiet()) == []


def test_a_call_is_announced_once_then_answered():
    run = mapper()
    call = ToolCall("c1", "run_code", '{"code": "print(17 * 23)"}')
    announced = run.take(reply(1, "", call))
    finished = ToolCallFinished(
        step=1,
        call_id="c1",
        tool="run_code",
        arguments=call.arguments,
        status=ToolStatus.OK,
        text="391",
        duration=0.1,
    )
    answered = run.take(Logged(12, finished))
    assert types(announced) == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert announced[0].tool_call_name == "run_code"
    assert announced[1].delta == call.arguments
    assert types(answered) == ["TOOL_CALL_RESULT"]
    assert answered[0].tool_call_id == "c1"
    assert answered[0].content == "391"


def test_a_waiting_call_finishes_the_segment_with_an_interrupt_then_the_run_goes_on():
    run = mapper()
    asked = ApprovalRequested(
        step=1, call_id="c1", tool="run_code", arguments="{}", digest="d" * 64
    )
    events = run.take(Logged(3, asked))
    deadline = datetime(2030, 1, 1, tzinfo=UTC)
    waiting = Waiting("c1", "run_code", "{}", "d" * 64, deadline)
    events += run.interrupted([waiting])
    assert types(events) == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]
    end = events[-1]
    assert isinstance(end, RunFinishedEvent)
    assert end.outcome is not None
    assert end.outcome.type == "interrupt"
    interrupt = end.outcome.interrupts[0]
    assert interrupt.id == interrupt.tool_call_id == "c1"
    loop = interrupt.metadata["loop"]
    assert loop["tool"] == "run_code"
    assert loop["digest"] == "d" * 64
    assert loop["deadline"] == deadline.isoformat() == interrupt.expires_at
    assert loop["decide"]["path"] == "/api/v1/runs/7/approvals/c1"
    resumed = run.take(reply(2, "391"))
    assert types(resumed)[0] == "RUN_STARTED"


def ended(status: RunStatus, **fields) -> list:
    return mapper().take(Logged(9, RunFinished(status=status, answer="391", **fields)))


def test_each_end_is_the_protocols():
    success = ended(RunStatus.SUCCEEDED)[-1]
    assert success.type == EventType.RUN_FINISHED
    assert success.result == {"answer": "391", "status": "succeeded"}
    assert success.outcome.type == "success"
    assert ended(RunStatus.CANCELLED)[-1].outcome.type == "cancelled"
    failed = ended(RunStatus.FAILED, error="The model failed.")[-1]
    assert failed.type == EventType.RUN_ERROR
    assert (failed.message, failed.code) == ("The model failed.", "failed")
    assert ended(RunStatus.HALTED, detail="Too many tool calls.")[-1].code == "halted"


def test_a_run_gone_without_its_end_still_closes_its_segment():
    run = mapper()
    events = run.take(Delta(1, "Hi", 0)) + run.take(Ended(""))
    assert types(events)[-2:] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert run.take(Ended("")) == []


def test_unsent_is_the_rest_or_nothing():
    assert unsent("Hello world", "Hello ") == "world"
    assert unsent("Hello", "Hello") == ""
    assert unsent("Goodbye", "Hello") == ""
