"""One dataclass per thing that happens in a run.

The loop reports every event to a sink: the Django recorder persists it (then publishes it), the
CLI prints it, tests assert on it. `as_dict()` is the JSON stored on the run's event log.
"""

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Protocol


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    HALTED = "halted"
    CANCELLED = "cancelled"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class HaltReason(StrEnum):
    TOOL_FAILURES = "tool_failures"
    REPEATED_FAILED_CALL = "repeated_failed_call"
    IDENTICAL_CALLS = "identical_calls"
    ITERATION_CAP = "iteration_cap"
    DEADLINE = "deadline"
    TOKEN_BUDGET = "token_budget"  # noqa: S105 (a reason, not a secret)
    TOOL_CALL_BUDGET = "tool_call_budget"

    @property
    def is_breaker(self) -> bool:
        return self in BREAKER_REASONS


BREAKER_REASONS = frozenset(
    {HaltReason.TOOL_FAILURES, HaltReason.REPEATED_FAILED_CALL, HaltReason.IDENTICAL_CALLS}
)


class ResumeReason(StrEnum):
    WORKER_LOST = "worker_lost"  # the worker working it died; a live one took the run over
    HANDED_BACK = "handed_back"  # the worker working it was stopped and handed it back
    CONTINUED = "continued"  # a person asked a run that had ended to go on


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RunStarted(Event):
    kind = "run_started"
    task: str
    provider: str
    model: str
    messages: list[dict[str, Any]]
    limits: dict[str, Any]


@dataclass(frozen=True)
class MemoriesRecalled(Event):
    kind = "memories_recalled"
    memories: list[dict[str, Any]]


@dataclass(frozen=True)
class ModelReplied(Event):
    kind = "model_replied"
    step: int
    text: str
    tool_calls: list[dict[str, str]]
    prompt_tokens: int
    completion_tokens: int
    recovered_error: str = ""
    reasoning: str = ""
    cut: bool = False  # the provider stopped the reply at the model's output limit
    # What went wrong on each attempt at this turn that the client retried.
    retried: list[str] = dataclasses.field(default_factory=list)


@dataclass(frozen=True)
class ToolCallStarted(Event):
    kind = "tool_call_started"
    step: int
    call_id: str
    tool: str
    arguments: str


@dataclass(frozen=True)
class ToolCallFinished(Event):
    kind = "tool_call_finished"
    step: int
    call_id: str
    tool: str
    arguments: str
    status: str
    text: str
    duration: float
    policy: str = ""
    truncated: bool = False


@dataclass(frozen=True)
class BreakerTripped(Event):
    kind = "breaker_tripped"
    step: int
    tool: str
    reason: str
    failures: list[dict[str, str]]


@dataclass(frozen=True)
class RunHalted(Event):
    """A guard stopped the run. `summary_prompt` is what the model was asked for its last turn."""

    kind = "run_halted"
    step: int
    reason: str
    detail: str
    summary_prompt: str = ""


@dataclass(frozen=True)
class RunFinished(Event):
    kind = "run_finished"
    status: str
    answer: str
    halt_reason: str = ""
    error: str = ""
    iterations: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration: float = 0.0
    cut: bool = False  # the answer is the model's, stopped at its output limit


@dataclass(frozen=True)
class RunResumed(Event):
    """The run goes on from its log, at claim `attempt`. `note`, when set, is a user message the
    model reads (a person's Continue); `limits` are the run's limits from here on, absolute (a
    continue adds fresh budgets to what was already used)."""

    kind = "run_resumed"
    attempt: int = 0
    reason: str = ResumeReason.WORKER_LOST.value
    lost_worker: str = ""
    note: str = ""
    limits: dict[str, Any] = dataclasses.field(default_factory=dict)
    by: str = ""  # who asked a continued run to go on: "owner" or "operator"


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RunStarted,
        MemoriesRecalled,
        ModelReplied,
        ToolCallStarted,
        ToolCallFinished,
        BreakerTripped,
        RunHalted,
        RunFinished,
        RunResumed,
    )
}


def event_from_dict(kind: str, data: dict[str, Any]) -> Event:
    return EVENT_TYPES[kind](**data)


class EventSink(Protocol):
    def __call__(self, event: Event) -> None: ...
