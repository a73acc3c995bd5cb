"""Running a reply's tool calls: up to `max_parallel_calls` at once, their results in the model's
order; calls that need their person's decision wait for it after the others ran. What stops the
phase comes back as a value (core.turn: a halt, a park, a stop), never raised."""

import dataclasses
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future

from core.approval import decided_call, digest, unrun_result
from core.events import ApprovalRequested, Decision, HaltReason, ToolCallStarted
from core.guards import Breaker, Halt
from core.interrupt import StopReason
from core.llm import ToolCall
from core.results import ToolResult
from core.run import RunCourse
from core.state import breaker_probe
from core.turn import Stop, Stopped, Waiting

Refusal = Halt | Stopped


def not_run(refusal: Refusal) -> str:
    reason = "the run was cancelled" if isinstance(refusal, Stopped) else refusal.detail
    return f"not run: {reason}"


def handed_back(refusal: Refusal | None) -> bool:
    """A hand-back stops the phase at once: nothing more is recorded, not even the skips."""
    return isinstance(refusal, Stopped) and refusal.reason is StopReason.HAND_BACK


class Done:
    """A call's result had at once (it ran right here, or never ran): read as a Future's is, with
    none of a Future's lock and condition, which only a result from another thread needs."""

    __slots__ = ("value",)

    def __init__(self, value: ToolResult) -> None:
        self.value = value

    def result(self) -> ToolResult:
        return self.value


class ToolsPhase(RunCourse):
    def run_tools(self, calls: Sequence[ToolCall]) -> Stop | None:
        """Run the calls; once a guard stops the batch, no further call starts, and those get a
        result saying why they did not run. Calls that need their person's decision wait for it
        after the others ran: the run parks (Waiting). A spent token budget runs none."""
        if (spent := self.spent_tokens(calls)) is not None:
            return spent
        ready, undecided = self.sort_out(calls)
        if (stop := self.run_calls(ready)) is not None:
            if not handed_back(stop):  # nobody is asked about a call that cannot run now
                self.skip(undecided, not_run(stop))
            return stop
        return self.wait_for_decision(undecided) if undecided else None

    def sort_out(self, calls: Sequence[ToolCall]) -> tuple[list[ToolCall], list[ToolCall]]:
        """The calls that may run (or were decided), and those that wait for a decision."""
        ready: list[ToolCall] = []
        undecided: list[ToolCall] = []
        for call in calls:
            if call.id in self.state.decisions:
                ready.append(call)
            elif call.id in self.state.asked or self.needs_asking(call):
                undecided.append(call)
            else:
                ready.append(call)
        return ready, undecided

    def needs_asking(self, call: ToolCall) -> bool:
        """Whether the run's approval asks about this call; its request is made ready here."""
        ask = self.parts.approval(call)
        if ask is None:
            return False
        self.asking[call.id] = ApprovalRequested(
            step=self.state.step,
            call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            digest=digest(call.name, call.arguments),
            why=ask.why,
        )
        return True

    def wait_for_decision(self, calls: list[ToolCall]) -> Stop:
        """Park the run on these calls, unless a guard stops it first (no person is asked
        about a call that could not run anyway: none of them runs, each skipped, saying why)."""
        probe = breaker_probe(self.state)
        for call in calls:
            refusal = self.refusal(call, probe)
            if handed_back(refusal):
                return Stopped(StopReason.HAND_BACK)
            if refusal is not None:
                self.skip(calls, not_run(refusal))
                return refusal
        return Waiting(tuple(calls))

    def run_calls(self, calls: Sequence[ToolCall]) -> Refusal | None:
        waiting = deque(calls)
        running: deque[tuple[ToolCall, Future[ToolResult] | Done]] = deque()
        stop: Refusal | None = None
        alone = len(calls) == 1 or self.limits.max_parallel_calls == 1
        while waiting or running:
            while waiting and stop is None and len(running) < self.limits.max_parallel_calls:
                stop = self.refusal(waiting[0], breaker_probe(self.state))
                if handed_back(stop):
                    return stop
                if stop is None:
                    running.append(self.start(waiting.popleft(), alone=alone))
            if not running:
                break
            call, future = running.popleft()
            self.observe(call, self.as_stopped(future.result()))
            if stop is None:
                stop = self.state.trip
        if stop is None and self.expired(calls):
            stop = Halt(
                HaltReason.NO_DECISION,
                "nobody decided in time whether a call it waited on may run.",
                summarise=True,
            )
        if stop is not None:
            self.skip(waiting, not_run(stop))
        return stop

    def expired(self, calls: Sequence[ToolCall]) -> bool:
        decisions = self.state.decisions
        return any(
            decisions[call.id].decision is Decision.EXPIRED
            for call in calls
            if call.id in decisions
        )

    def start(self, call: ToolCall, *, alone: bool) -> tuple[ToolCall, "Future[ToolResult] | Done"]:
        """A call run alone runs right here: a thread hand-off would only add latency. A decided
        call runs as its person decided: with their arguments, or not at all (its result says
        why, and it never started)."""
        if (decision := self.state.decisions.get(call.id)) is not None:
            if (unrun := unrun_result(decision)) is not None:
                return call, Done(unrun)
            call = decided_call(call, decision)
        self.emit(
            ToolCallStarted(
                step=self.state.step, call_id=call.id, tool=call.name, arguments=call.arguments
            )
        )
        dispatch = self.parts.tools.dispatch
        if not alone:
            return call, self.pool.submit(dispatch, call.name, call.arguments)
        return call, Done(dispatch(call.name, call.arguments))

    def as_stopped(self, result: ToolResult) -> ToolResult:
        """A call that failed once the run was asked to stop failed because of the Stop (a snippet
        killed by it, say): marked so, it shows as stopped, and the breaker does not count it."""
        if result.ok or self.interrupt is None or self.interrupt.reason is not StopReason.CANCEL:
            return result
        return dataclasses.replace(result, stopped=True)

    def refusal(self, call: ToolCall, breaker: Breaker) -> Refusal | None:
        """What stops `call` from starting, if anything; `breaker` hears it as the next call."""
        if (stop := self.stop_asked()) is not None:
            return stop
        if (late := self.past_deadline()) is not None:
            return late
        if self.state.tool_calls >= self.limits.max_tool_calls:
            return Halt(
                HaltReason.TOOL_CALL_BUDGET,
                f"it used its budget of {self.limits.max_tool_calls} tool calls.",
                summarise=True,
            )
        return breaker.before(call)

    def spent_tokens(self, calls: Sequence[ToolCall]) -> Halt | None:
        """Before a reply's calls run: a spent budget skips them and halts the run."""
        used, budget = self.state.usage.total_tokens, self.limits.max_tokens
        if used < budget:
            return None
        self.skip(calls, "not run: the run's token budget is spent")
        return Halt(
            HaltReason.TOKEN_BUDGET,
            f"it used {used} tokens of its {budget} budget.",
            summarise=False,
        )
