"""The loop's side of calls that wait for a person's decision (core.approval): the run
parks with its requests, and goes on from its log once decided. No database."""

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from agent.llm.scripted import ScriptedLLM, answer, call, calls
from core.approval import Ask, digest
from core.ending import Parked as ParkedRun
from core.ending import RunResult
from core.events import (
    ApprovalDecided,
    ApprovalRequested,
    Decision,
    HaltReason,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
)
from core.llm import ToolCall
from core.loop import Limits, run_agent
from core.state import replay
from tools.base import Tool, ToolContext, ToolError, ToolRegistry

pytestmark = pytest.mark.fast


class Text(BaseModel):
    text: str = ""


RAN: list[str] = []


def effect(arguments: Text, context: ToolContext) -> str:
    RAN.append(arguments.text)
    return f"did {arguments.text}"


def broken(arguments: Text, context: ToolContext) -> str:
    raise ToolError("broken")


TOOLS = ToolRegistry(
    [
        Tool("effect", "Has an effect.", Text, effect, own_deadline=True),
        Tool("look", "Looks.", Text, lambda arguments, context: "looked", own_deadline=True),
        Tool("broken", "Fails.", Text, broken, own_deadline=True),
    ]
).bind(ToolContext(1, "alice", Path("/nonexistent")))


def asks_about(*names: str):
    def approval(call: ToolCall) -> Ask | None:
        return Ask(f"asks before {call.name}") if call.name in names else None

    return approval


@pytest.fixture(autouse=True)
def nothing_ran():
    RAN.clear()


def awaiting(result: RunResult) -> list[ApprovalRequested]:
    """The requests a parked run's result carries (an ended run's carries none)."""
    return result.awaiting if isinstance(result, ParkedRun) else []


class Parked:
    """A run that parked, its log as a worker would record it (the requests with the parking)."""

    def __init__(self, replies, *, ask=("effect",), limits=None):
        self.llm = ScriptedLLM(replies)
        self.log = []
        self.result = run_agent(
            "task",
            llm=self.llm,
            tools=TOOLS,
            sink=self.log.append,
            approval=asks_about(*ask),
            limits=limits or Limits(),
        )
        self.log += awaiting(self.result)

    def decide(self, decision, *, arguments="", reason="", call_id=None):
        request = self.waiting(call_id)
        self.log.append(
            ApprovalDecided(
                step=request.step,
                call_id=request.call_id,
                tool=request.tool,
                decision=decision,
                arguments=arguments,
                reason=reason,
                by="alice",
            )
        )

    def waiting(self, call_id=None) -> ApprovalRequested:
        requests = [event for event in self.log if isinstance(event, ApprovalRequested)]
        return next(r for r in reversed(requests) if call_id in (None, r.call_id))

    def resume(self, ask=("effect",)):
        self.result = run_agent(
            "task",
            llm=self.llm,
            tools=TOOLS,
            sink=self.log.append,
            resume=replay(self.log),
            approval=asks_about(*ask),
        )
        self.log += awaiting(self.result)
        return self.result

    def of(self, kind):
        return [event for event in self.log if isinstance(event, kind)]


def test_a_call_that_asks_parks_the_run_before_it_runs_with_its_request_bound_to_the_call():
    run = Parked([call("effect", {"text": "x"}), answer("done")])
    assert run.result.status is RunStatus.AWAITING_APPROVAL
    assert RAN == []
    assert run.of(ToolCallStarted) == []
    [request] = run.result.awaiting
    assert (request.tool, request.why) == ("effect", "asks before effect")
    assert request.digest == digest("effect", '{"text": "x"}')
    assert not any(event.kind == "run_finished" for event in run.log)


def test_approved_the_call_runs_exactly_once_and_the_run_goes_on_to_its_answer():
    run = Parked([call("effect", {"text": "x"}), answer("done")])
    run.decide(Decision.APPROVE)
    result = run.resume()
    assert result.status is RunStatus.SUCCEEDED
    assert RAN == ["x"]
    assert [e.status for e in run.of(ToolCallFinished)] == ["ok"]


def test_calls_that_need_no_decision_run_at_once_and_results_enter_in_the_models_order():
    reply = calls(("look", {"text": "a"}), ("effect", {"text": "b"}), ("look", {"text": "c"}))
    run = Parked([reply, answer("done")])
    assert [e.tool for e in run.of(ToolCallFinished)] == ["look", "look"]
    run.decide(Decision.APPROVE)
    run.resume()
    messages, _ = run.llm.turns[1]
    order = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    [asked] = [m for m in messages if m.get("tool_calls")]
    assert order == [part["id"] for part in asked["tool_calls"]]
    assert replay(run.log).messages[: len(messages)] == messages


def test_an_edit_runs_with_the_persons_arguments_and_the_model_is_told():
    run = Parked([call("effect", {"text": "rm -rf"}), answer("done")])
    run.decide(Decision.EDIT, arguments=json.dumps({"text": "ls"}))
    run.resume()
    assert RAN == ["ls"]
    [finished] = run.of(ToolCallFinished)
    assert finished.edited
    assert finished.arguments == '{"text": "ls"}'
    messages, _ = run.llm.turns[1]
    assert "The person changed this call's arguments" in messages[-1]["content"]
    assert '{"text": "ls"}' in messages[-1]["content"]
    assert replay(run.log).messages[-2]["content"] == messages[-1]["content"]


def test_a_denial_is_a_result_the_model_reads_and_never_trips_the_breaker():
    replies = [call("effect", {"text": f"try {n}"}) for n in range(4)] + [answer("gave up")]
    run = Parked(replies, limits=Limits(max_tool_failures=2))
    for _ in range(4):
        run.decide(Decision.DENY, reason="not on my machine")
        run.resume()
    assert run.result.status is RunStatus.SUCCEEDED
    assert RAN == []
    assert {e.status for e in run.of(ToolCallFinished)} == {"denied"}
    messages, _ = run.llm.turns[-1]
    assert messages[-1]["content"] == "DENIED: by the person: not on my machine"


def test_an_expired_decision_never_runs_the_call_and_halts_the_run():
    run = Parked([call("effect", {"text": "x"}), answer("summary")])
    run.decide(Decision.EXPIRED)
    result = run.resume()
    assert RAN == []
    assert result.status is RunStatus.HALTED
    assert result.halt_reason is HaltReason.NO_DECISION


def test_a_run_resumed_before_every_call_is_decided_parks_again_without_asking_twice():
    reply = calls(("effect", {"text": "a"}), ("effect", {"text": "b"}))
    run = Parked([reply, answer("done")])
    assert len(run.result.awaiting) == 2
    first, second = (request.call_id for request in run.result.awaiting)
    run.decide(Decision.APPROVE, call_id=first)
    result = run.resume()
    assert result.status is RunStatus.AWAITING_APPROVAL
    assert result.awaiting == []  # asked already: its request is in the log
    assert RAN == ["a"]
    run.decide(Decision.DENY, call_id=second)
    assert run.resume().status is RunStatus.SUCCEEDED
    assert RAN == ["a"]


def test_a_guard_that_stops_the_batch_asks_nobody():
    replies = [call("broken", {}), call("broken", {}), calls(("broken", {}), ("effect", {}))]
    run = Parked(replies, limits=Limits(max_tool_failures=3))
    assert run.result.status is RunStatus.HALTED
    assert awaiting(run.result) == []
    assert run.of(ApprovalRequested) == []
