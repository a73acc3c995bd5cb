"""Tool calls that wait for a person's decision: the loop's side, without Django.

A run asks its `Approval` about each call the model proposes. A call that needs a decision is
recorded (ApprovalRequested, with the call's digest) and the run parks (core.turn.Waiting): its
worker lets it go, and nothing holds it until its person decides. Each decision is an
ApprovalDecided in the run's log; once every call the run waits on is decided, a worker takes
the run up from its log (core.state.replay) and carries the decisions out: an approved call
runs once, an edited one runs with the person's arguments, a denied one is answered with the
person's reason, an expired one never runs and the run halts. Nothing is ever run for want of a
decision.
"""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from core.events import ApprovalDecided, Decision
from core.llm import ToolCall
from core.results import ToolResult, ToolStatus


def digest(tool: str, arguments: str) -> str:
    """What a decision is bound to: the tool and its arguments exactly as the model sent them.
    A decision carrying another digest is for another call, and is refused."""
    return hashlib.sha256(f"{tool}\x00{arguments}".encode(errors="surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Ask:
    """A call needs a decision; `why` says whose rule asks ("the site asks before run_code")."""

    why: str


# Whether a call needs its person's decision before it runs (None: it runs as it is).
Approval = Callable[[ToolCall], Ask | None]


def ask_nothing(call: ToolCall) -> Ask | None:
    return None


BY_PERSON, BY_OPERATOR = "by the person", "by an operator of this site"
NO_REASON = " (no reason given)"


@dataclass(frozen=True)
class Denial:
    """A denial as `denial_in` reads it back from a denied call's result."""

    reason: str  # "" when none was given
    operator: bool  # an operator denied it on the person's behalf


def denied_text(reason: str, operator: bool = False) -> str:
    """A denied call's result as the model reads it (after "DENIED: "); `denial_in` reads it."""
    who = BY_OPERATOR if operator else BY_PERSON
    return f"{who}: {reason}" if reason else who + NO_REASON


def denial_in(text: str) -> Denial | None:
    """The denial `denied_text` wrote, or None for a result it did not write (a tool's own
    refusal, which is denied too)."""
    for who, operator in ((BY_PERSON, False), (BY_OPERATOR, True)):
        if text == who + NO_REASON:
            return Denial("", operator)
        if text.startswith(f"{who}: "):
            return Denial(text.removeprefix(f"{who}: "), operator)
    return None


EXPIRED_TEXT = "not run: nobody decided in time whether it may run"
CANCELLED_TEXT = "not run: the run was stopped while this call waited for a decision"


def unrun_result(decision: ApprovalDecided) -> ToolResult | None:
    """The result of a call its decision did not let run (None: it runs). A denial is the
    person's choice, which the model adapts to and the breaker never counts."""
    match decision.decision:
        case Decision.DENY:
            text = denied_text(decision.reason, decision.operator)
            return ToolResult(ToolStatus.DENIED, text, 0.0)
        case Decision.EXPIRED:
            return ToolResult(ToolStatus.SKIPPED, EXPIRED_TEXT, 0.0)
        case Decision.CANCELLED:
            return ToolResult(ToolStatus.SKIPPED, CANCELLED_TEXT, 0.0)
    return None


def decided_call(call: ToolCall, decision: ApprovalDecided) -> ToolCall:
    """The call as it runs: with the person's arguments when they edited it."""
    if decision.decision is Decision.EDIT:
        return ToolCall(call.id, call.name, decision.arguments)
    return call
