"""How a run comes out: ended, released or parked, three values of their own; and the one place
a run's end (RunFinished) is made, from the run's state.

Whoever ends a run builds its end here, from what its state says was done: the loop at its end,
Loop on behalf of a run whose process is gone, the recorder for a run the loop could not finish,
a Stop of a queued run. Reading a recorded end back is no building: `Ended(state.finished, state)`.
"""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.events import (
    AnswerSource,
    ApprovalRequested,
    EndCause,
    HaltReason,
    RunFinished,
    RunStatus,
)
from core.llm import Message, ToolCall, Usage
from core.progress import Outcome, progress_in_words
from core.results import Remedy, ToolResult
from core.state import RunState
from core.text import excerpt

# How much of the model's last words a progress report quotes.
LAST_WORDS_CHARS = 600

# The run's note on an answer the model was stopped from finishing; the answer is kept, marked.
CUT_ANSWER = (
    "The answer is cut short: the model reached the most it may write in one reply, so it may be "
    "incomplete. It is kept, but not remembered for later runs."
)


def run_end(
    state: RunState,
    status: RunStatus,
    answer: str | None = None,
    *,
    source: AnswerSource = AnswerSource.PROGRESS,
    halt_reason: HaltReason | None = None,
    error: str = "",
    cut: bool = False,
    cause: EndCause | None = None,
    detail: str = "",
    duration: float = 0.0,
) -> RunFinished:
    """The run's end, its figures from `state`. `answer`: None for Loop's account of what was
    done (`progress`); `source`: whose account it is; `cut`: the answer is the model's own,
    stopped at its output limit (the end's error says so, unless it has one of its own)."""
    return RunFinished(
        status=status,
        answer=progress(state) if answer is None else answer,
        halt_reason=halt_reason,
        error=error or (CUT_ANSWER if cut else ""),
        iterations=state.step,
        tool_calls=state.tool_calls,
        prompt_tokens=state.usage.prompt_tokens,
        completion_tokens=state.usage.completion_tokens,
        duration=round(duration, 6),
        cut=cut,
        answer_source=source,
        ok_tool_calls=state.ok_tool_calls,
        cause=cause,
        detail=detail,
        on_hold=on_hold(state.observations),
    )


@dataclass(frozen=True, eq=False)
class Ended:
    """The run ended: `end` is its RunFinished (recorded, or, when that failed, for its caller
    to record), `state` where it stood. Two are equal when they tell the same outcome (how long
    each took to work is no part of it)."""

    end: RunFinished
    state: RunState

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ended) and self.outcome() == other.outcome()

    __hash__ = None  # type: ignore[assignment]  # (as a dataclass with eq)

    def outcome(self) -> tuple[object, ...]:
        return (dataclasses.replace(self.end, duration=0.0), self.ok_tool_calls, self.messages)

    @property
    def status(self) -> RunStatus:
        return self.end.status

    @property
    def answer(self) -> str:
        return self.end.answer

    @property
    def halt_reason(self) -> HaltReason | None:
        return self.end.halt_reason

    @property
    def error(self) -> str:
        return self.end.error

    @property
    def cause(self) -> EndCause | None:
        return self.end.cause

    @property
    def detail(self) -> str:
        return self.end.detail

    @property
    def iterations(self) -> int:
        return self.end.iterations

    @property
    def tool_calls(self) -> int:
        return self.end.tool_calls

    @property
    def ok_tool_calls(self) -> int:
        return self.state.ok_tool_calls

    @property
    def usage(self) -> Usage:
        return Usage(self.end.prompt_tokens, self.end.completion_tokens)

    @property
    def answer_source(self) -> AnswerSource | None:
        return self.end.answer_source

    @property
    def answer_cut(self) -> bool:
        return self.end.cut

    @property
    def on_hold(self) -> list[str]:
        return list(self.end.on_hold)

    @property
    def messages(self) -> list[Message]:
        return self.state.messages


@dataclass(frozen=True)
class Released:
    """This process let the run go unfinished (its worker handed it back, or its recorder was
    fenced off) and recorded nothing of its end; whoever works the run next takes it up from its
    log. The run is not over."""

    state: RunState
    status = RunStatus.RUNNING

    @property
    def messages(self) -> list[Message]:
        return self.state.messages


@dataclass(frozen=True)
class Parked:
    """The run waits for its person's decision on calls: `awaiting` are the requests not in its
    log yet, which whoever parks the run records with its parking (core.approval)."""

    state: RunState
    awaiting: list[ApprovalRequested] = field(default_factory=list)
    status = RunStatus.AWAITING_APPROVAL

    @property
    def messages(self) -> list[Message]:
        return self.state.messages


RunResult = Ended | Released | Parked


def progress(state: RunState) -> str:
    return progress_report(state.last_text, state.observations)


def on_hold(observations: Sequence[tuple[ToolCall, ToolResult]]) -> list[str]:
    """The tools the run called that were on hold for review, once each, in the order called."""
    held = (call.name for call, result in observations if result.remedy is Remedy.REVIEW)
    return list(dict.fromkeys(held))


def progress_report(last_text: str, observations: Sequence[tuple[ToolCall, ToolResult]]) -> str:
    """What was done so far, in words, for a run that ends without the model's own account of it:
    the model's last words, then what worked and what failed and why (core.progress). The
    tools' outputs stay in the run's cards."""
    lines = ["Stopped before a final answer."]
    if last_text:
        lines.append(f"The model last said: {excerpt(last_text, LAST_WORDS_CHARS)}")
    outcomes = [
        Outcome(call.name, result.status, result.text, result.stopped)
        for call, result in observations
    ]
    return "\n\n".join([*lines, *progress_in_words(outcomes)])
