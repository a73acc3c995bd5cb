"""A turn's outcome is a value: what the loop does next follows from which one it is.

`step()` (core.loop) asks the model and comes back with one of a small closed set: the model
answered, it asked for these tools, a guard halted the run, the run parks for its person's
decision, or it was stopped from outside. Running a reply's tools (core.tools_phase) comes back
with one of the last three, or nothing (the next turn follows). Exceptions are left for faults
(a provider that failed, a bug, a sink that no longer takes the run's events).
"""

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.guards import Halt
from core.interrupt import StopReason
from core.llm import (
    CALL_ID_CHARS,
    TOOL_NAME_CHARS,
    LLMError,
    Message,
    ModelMistake,
    Reply,
    ToolCall,
)


@dataclass(frozen=True)
class Answered:
    """The model's reply called no tool: its text ends the run. `help`: the reply said it is the
    model's help, not an answer."""

    text: str
    cut: bool = False
    help: bool = False


@dataclass(frozen=True)
class RunTools:
    """The model's reply asked for these calls, in its order."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Waiting:
    """These calls wait for their person's decision: the run parks."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Stopped:
    """The run was told to stop from outside (core.interrupt): cancelled, or handed back."""

    reason: StopReason


# A turn's outcome; `Halt` (core.guards) is the halted one.
Turn = Answered | RunTools | Halt | Waiting | Stopped

# What running a reply's calls can end in (None: the run goes on to its next turn).
Stop = Halt | Waiting | Stopped


def model_failure(error: LLMError) -> str:
    """A run's error when the model provider failed it, as people read it; what it means is the
    run's cause, EndCause.MODEL_DOWN, which no reader parses out of these words."""
    return f"Model failed: {error}"


def ask_correcting(chat: Callable[[list[Message]], Reply], history: Sequence[Message]) -> Reply:
    """A model turn with the model's mistakes put right: a ModelMistake's note (what was wrong
    with the reply, which is dropped) is sent after the history and the model asked again, once
    for each kind of mistake in the turn; the same kind twice ends the run with what the mistake
    says then. The note is sent for that ask only (the history keeps none of it: the next turn
    is asked without), and the reply carries the notes it took (`recovered_error`), which the
    run's log records with it."""
    notes: dict[str, Message] = {}
    retried: list[str] = []
    latest: list[Message] = []
    while True:
        try:
            reply = chat([*history, *latest])
        except ModelMistake as mistake:
            retried += mistake.retried
            if mistake.kind in notes:
                raise LLMError(mistake.again, status=mistake.status) from None
            notes[mistake.kind] = mistake.note
            latest = [mistake.note]  # the note on the reply just dropped
            continue
        if not notes:
            return reply
        recovered = "\n\n".join(str(note["content"]) for note in notes.values())
        return dataclasses.replace(
            reply, recovered_error=recovered, retried=(*retried, *reply.retried)
        )


def bounded_call(call: ToolCall) -> ToolCall:
    """The call as the run records and answers it: a name too long to record is cut, saying how
    long it was (no tool has such a name, so it is answered as an unknown tool); an id too long
    is cut and keeps a digest of the whole, so two long ids stay two."""
    name, call_id = call.name, call.id
    if len(name) <= TOOL_NAME_CHARS and len(call_id) <= CALL_ID_CHARS:
        return call  # as it came: most calls
    if len(name) > TOOL_NAME_CHARS:
        cut = f"…[{len(name)} chars]"
        name = name[: TOOL_NAME_CHARS - len(cut)] + cut
    if len(call_id) > CALL_ID_CHARS:
        digest = hashlib.sha256(call_id.encode(errors="surrogatepass")).hexdigest()[:16]
        call_id = f"{call_id[: CALL_ID_CHARS - len(digest) - 1]}…{digest}"
    return ToolCall(call_id, name, call.arguments)
