"""What one run of the loop works with: its parts (the model, the tools, the sink...), its state
(the fold of the events it recorded, core.state) and the checks every step makes. The turn
(core.loop) and the tools phase (core.tools_phase) build on it."""

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from core.approval import Approval, ask_nothing
from core.events import (
    ApprovalRequested,
    Decision,
    Event,
    EventSink,
    HaltReason,
    ToolCallFinished,
)
from core.guards import Halt, HandedBack, Limits
from core.instructions import NO_INSTRUCTIONS, Instructions
from core.interrupt import Interrupt, StopReason
from core.llm import LLM, Message, ToolCall, ToolSpec
from core.recalled import RecalledMemory
from core.results import ToolResult, ToolStatus
from core.state import RunState, apply
from core.turn import Stopped


class Tools(Protocol):
    """The tools a run may call, already bound to the run's user."""

    def specs(self) -> list[ToolSpec]: ...

    def dispatch(self, name: str, arguments: str) -> ToolResult: ...


Recall = Callable[[str], Sequence[RecalledMemory]]


def recall_nothing(task: str) -> Sequence[RecalledMemory]:
    return ()


@dataclass(frozen=True)
class PersonMessage:
    """What the run's person sent it while it worked ("Send now"), by its id."""

    id: int
    text: str


# The messages sent to the run so far, heard or not (the state keeps which it has heard).
Inbox = Callable[[], Sequence[PersonMessage]]


def no_messages() -> Sequence[PersonMessage]:
    return ()


# Asked before each model turn: None, the run may go on; else why not (a quota of its person's
# reached, and when it resets), which its halt says.
Allowance = Callable[[], str | None]


def no_quota() -> str | None:
    return None


@dataclass(frozen=True)
class Parts:
    """What a run is given besides its task and limits."""

    llm: LLM
    tools: Tools
    sink: EventSink
    recall: Recall = recall_nothing
    history: Sequence[Message] = ()
    interrupt: Interrupt | None = None
    inbox: Inbox = no_messages
    approval: Approval = ask_nothing
    instructions: Instructions = NO_INSTRUCTIONS
    allowance: Allowance = no_quota


class RunCourse:
    """One run's parts, state and checks. Everything the run knows of itself is `state`, moved
    on only by `emit` (record, then apply); `asking` holds the requests for a decision made
    ready this turn, which go with the run's parking, not its log."""

    def __init__(
        self, task: str, parts: Parts, limits: Limits, state: RunState, worked_seconds: float
    ) -> None:
        self.task, self.parts, self.limits, self.state = task, parts, limits, state
        self.interrupt = parts.interrupt
        self.asking: dict[str, ApprovalRequested] = {}
        self.started = time.monotonic() - worked_seconds
        self.pool = ThreadPoolExecutor(limits.max_parallel_calls, thread_name_prefix="tool-call")

    def emit(self, event: Event) -> None:
        """Record the event, then apply it. A run handed back records nothing more: its next
        worker takes it up from the log (the sink's refusal, RunReleased, goes up as it is)."""
        if self.interrupt is not None and self.interrupt.reason is StopReason.HAND_BACK:
            raise HandedBack
        self.parts.sink(event)
        self.state = apply(self.state, event)

    def stop_asked(self) -> Stopped | None:
        if self.interrupt is not None and self.interrupt.reason is not None:
            return Stopped(self.interrupt.reason)
        return None

    def time_left(self) -> float:
        return self.limits.max_seconds - (time.monotonic() - self.started)

    def past_deadline(self) -> Halt | None:
        if self.time_left() >= 0:
            return None
        return Halt(
            HaltReason.DEADLINE,
            f"it ran past its deadline of {self.limits.max_seconds:g} seconds.",
            summarise=False,
        )

    def observe(self, call: ToolCall, result: ToolResult) -> None:
        decision = self.state.decisions.get(call.id)
        edited = decision is not None and decision.decision is Decision.EDIT
        self.emit(
            ToolCallFinished(
                step=self.state.step,
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                status=result.status,
                text=result.text,
                duration=round(result.duration, 6),
                policy=result.policy,
                truncated=result.truncated,
                stopped=result.stopped,
                edited=edited,
                remedy=result.remedy,
                saved=list(result.saved),
            )
        )

    def skip(self, calls: Sequence[ToolCall], why: str) -> None:
        """Every call the model asked for gets a result, so the history stays valid."""
        for call in calls:
            self.observe(call, ToolResult(ToolStatus.SKIPPED, why, 0.0))
