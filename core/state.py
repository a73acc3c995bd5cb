"""A run's state is one fold over its events: `apply(state, event)`, and nothing else, moves it on.

The live loop records each event, then applies it (core.loop: `emit`); a run taken up from its log
(after a lost worker, a hand-back, a decision or a person's Continue) is the fold of that log
(`replay`); the recorder counts what it wrote with the same fold (agent.recorder). So what the loop
goes on with, what a replay rebuilds and what the run's row says are one computation, and resuming
is "apply the log, then take the next step".

A run that ended (RunFinished) or was continued with a note while calls were open closes them in
its messages as the loop would have: a started call as interrupted, one never started as not run,
so the history stays a valid chat (each tool call answered once, in order).
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from core.events import (
    ApprovalDecided,
    ApprovalRequested,
    BreakerTripped,
    Decision,
    Event,
    ModelReplied,
    PersonSaid,
    ResumeReason,
    RunFinished,
    RunHalted,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from core.guards import Breaker, Limits, Trip
from core.history import (
    INTERRUPTED_CALL,
    NOT_RUN_ENDED,
    add_result,
    assistant_message,
    summary_request,
    tool_message,
)
from core.llm import Message, ToolCall, Usage
from core.results import ToolResult, ToolStatus


@dataclass
class RunState:
    """Where a run stands after the events folded into it, as the loop needs it to go on.

    `pending`: calls the last reply asked for that never started; `dangling`: calls that started
    and never finished; `final`: the text of a last reply that called no tool, with no RunFinished
    after it (the run only has to finish), `final_help` whether that reply was marked as the
    model's help; `halted`: a RunHalted with no RunFinished after it; `tripped`: a BreakerTripped
    with no RunHalted after it; `finished`: the RunFinished the log ends with (None once a
    Continue follows it); `limits`: the latest RunStarted or RunResumed limits; `breaker`: the
    circuit breaker as the calls since the last Continue left it, and `trip` the first trip
    their results caused (the run halts on it); `interrupted_steps`: the steps whose calls a
    resume answered as interrupted; `last_trip`: the latest BreakerTripped with no call that
    worked after it (a Continue makes the breaker remember its errors: they trip it at once);
    `heard`: the ids of the messages the person sent while it worked that the model has read
    (PersonSaid); `asked` and `decisions`: the calls that asked for their person's decision, and
    the decisions made, by call id.
    """

    messages: list[Message] = field(default_factory=list)
    step: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    observations: list[tuple[ToolCall, ToolResult]] = field(default_factory=list)
    last_text: str = ""
    pending: list[ToolCall] = field(default_factory=list)
    dangling: list[ToolCall] = field(default_factory=list)
    final: str | None = None
    final_cut: bool = False
    final_help: bool = False
    halted: RunHalted | None = None
    tripped: BreakerTripped | None = None
    finished: RunFinished | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    breaker: Breaker = field(default_factory=Breaker)
    trip: Trip | None = None
    interrupted_steps: set[int] = field(default_factory=set)
    last_trip: BreakerTripped | None = None
    heard: set[int] = field(default_factory=set)
    asked: dict[str, ApprovalRequested] = field(default_factory=dict)
    decisions: dict[str, ApprovalDecided] = field(default_factory=dict)

    @property
    def ok_tool_calls(self) -> int:
        return sum(result.ok for _, result in self.observations)


def replay(events: Iterable[Event]) -> RunState:
    """The state of a run after `events`, its log in order: the fold of `apply` over them.
    Pure: the log is only read."""
    state = RunState()
    for event in events:
        state = apply(state, event)
    return state


def messages_from_events(events: Iterable[Event]) -> list[Message]:
    return replay(events).messages


def apply(state: RunState, event: Event) -> RunState:
    """The state after `event`. The fold's accumulator: `state` is moved on in place (a run's
    messages are never copied per event) and returned."""
    match event:
        case RunStarted():
            state.messages.extend(event.messages)
            state.limits = dict(event.limits)
            state.breaker = fresh_breaker(state.limits)
        case ModelReplied():
            _replied(state, event)
        case ToolCallStarted():
            state.pending, asked = _without(state.pending, event.call_id)
            state.dangling.append(_as_called(asked, event.call_id, event.tool, event.arguments))
            state.tool_calls += 1
        case ToolCallFinished():
            _finished_call(state, event)
        case BreakerTripped():
            state.tripped = state.last_trip = event
        case RunHalted():
            state.halted, state.tripped, state.final = event, None, None
            if event.summary_prompt:
                state.messages.append(summary_request(event.summary_prompt))
        case RunFinished():
            _close_open_calls(state)
            state.finished, state.halted, state.tripped, state.final = event, None, None, None
        case RunResumed():
            _resumed(state, event)
        case PersonSaid():
            state.messages.append({"role": "user", "content": event.text})
            state.heard.add(event.message)
        case ApprovalRequested():
            state.asked[event.call_id] = event
        case ApprovalDecided():
            state.decisions[event.call_id] = event
    return state


def fresh_breaker(limits: dict[str, Any]) -> Breaker:
    defaults = Limits()
    return Breaker(
        limits.get("max_tool_failures", defaults.max_tool_failures),
        limits.get("max_identical_calls", defaults.max_identical_calls),
    )


def _replied(state: RunState, event: ModelReplied) -> None:
    calls = list(event.tool_calls)
    state.messages.append(assistant_message(event.text, calls))
    state.step = max(state.step, event.step)
    used = state.usage
    state.usage = Usage(
        used.prompt_tokens + event.prompt_tokens,
        used.completion_tokens + event.completion_tokens,
        used.cached_tokens + event.cached_tokens,
    )
    state.last_text = event.text or state.last_text
    state.pending = calls
    state.final, state.final_cut = (None, False) if calls else (event.text, event.cut)
    state.final_help = not calls and event.help


def _without(calls: list[ToolCall], call_id: str) -> tuple[list[ToolCall], ToolCall | None]:
    """`calls` less the one with this id, and that one (None: none has it)."""
    for at, call in enumerate(calls):
        if call.id == call_id:
            return [*calls[:at], *(c for c in calls[at + 1 :] if c.id != call_id)], call
    return calls, None


def _as_called(known: ToolCall | None, call_id: str, tool: str, arguments: str) -> ToolCall:
    """The call as an event names it: the one the state holds already when it is the same (a
    call its person edited runs with other arguments), else a new one."""
    if known is not None and known.name == tool and known.arguments == arguments:
        return known
    return ToolCall(call_id, tool, arguments)


def _finished_call(state: RunState, event: ToolCallFinished) -> None:
    state.dangling, started = _without(state.dangling, event.call_id)
    state.pending, asked = _without(state.pending, event.call_id)
    call = _as_called(started or asked, event.call_id, event.tool, event.arguments)
    result = ToolResult(
        event.status,
        event.text,
        event.duration,
        event.policy,
        event.truncated,
        stopped=event.stopped,
        remedy=event.remedy,
        saved=tuple(event.saved),
    )
    if result.status is ToolStatus.INTERRUPTED:
        state.interrupted_steps.add(event.step)
    if result.ok:  # as the breaker forgets a trip once a call works
        state.last_trip = None
    _breaker_after(state, call, result)
    _observe(state, call, result, event.arguments if event.edited else None)


def _breaker_after(state: RunState, call: ToolCall, result: ToolResult) -> None:
    """The breaker hears a call that ran, until it trips: a call that never ran (skipped)
    never reached it, and one it does not count (`counts`) says nothing about the tool."""
    if state.trip is not None or result.status is ToolStatus.SKIPPED:
        return
    if not counts(state, call, result):
        return
    state.breaker.before(call)  # a trip here stopped the call from running: never the case
    state.trip = state.breaker.after(call, result)


def counts(state: RunState, call: ToolCall, result: ToolResult) -> bool:
    """Whether the breaker counts the call's result: a denial is the person's choice, which
    says nothing about the tool (core.approval); an interrupted call's outcome is unknown, a
    stopped one failed for the Stop: neither says anything about the tool either."""
    decision = state.decisions.get(call.id)
    if decision is not None and decision.decision is Decision.DENY:
        return False
    return result.status is not ToolStatus.INTERRUPTED and not result.stopped


def breaker_probe(state: RunState) -> Breaker:
    """The breaker as it stands with the calls still running started: a copy to ask about the
    calls that would start next, the state staying as it is."""
    probe = state.breaker.probe()
    for running in state.dangling:
        probe.before(running)
    return probe


def _observe(
    state: RunState, call: ToolCall, result: ToolResult, edited: str | None = None
) -> None:
    state.observations.append((call, result))
    add_result(state.messages, tool_message(call.id, result.status, result.text, edited))


def _close_open_calls(state: RunState) -> None:
    """Answer, in the messages only, the calls the run left open; in the model's order."""
    for call in state.dangling:
        _observe(state, call, ToolResult(ToolStatus.INTERRUPTED, INTERRUPTED_CALL, 0.0))
    for call in state.pending:
        _observe(state, call, ToolResult(ToolStatus.SKIPPED, NOT_RUN_ENDED, 0.0))
    state.dangling, state.pending = [], []


def _resumed(state: RunState, event: RunResumed) -> None:
    """Only a Continue reopens a run that ended; a run taken over after its end stays ended.
    A Continue starts the breaker afresh, remembering the errors of the trip it went on after."""
    if event.limits:
        state.limits = dict(event.limits)
        state.breaker.max_failures = fresh_breaker(state.limits).max_failures
        state.breaker.max_identical = fresh_breaker(state.limits).max_identical
    if event.reason == ResumeReason.CONTINUED:
        state.breaker, state.trip = fresh_breaker(state.limits), None
        if state.last_trip is not None:
            state.breaker.remember_trip(state.last_trip.tool, state.last_trip.failures)
        state.finished, state.halted, state.tripped, state.final = None, None, None, None
    if event.note:
        _close_open_calls(state)
        state.messages.append({"role": "user", "content": event.note})
