"""The one interface every model speaks: chat(messages, tools) -> text and/or tool calls, usage.

Messages use the OpenAI / Groq chat format (plain dicts), so the history is a plain list that can be
logged, persisted, replayed and sent to a provider unchanged.
"""

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from core.interrupt import Interrupt

Message = dict[str, Any]
ToolSpec = dict[str, Any]


# The longest tool name and call id a run records (the audit rows' columns): the model sends
# names and ids as it likes, and they are data, never a reason for a run to fail.
TOOL_NAME_CHARS = 64
CALL_ID_CHARS = 128


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for. `arguments` is the raw JSON text exactly as the model sent it."""

    id: str
    name: str
    arguments: str

    def as_message_part(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Of the prompt tokens, those the provider read from its prompt cache (priced apart,
    # accounting/prices.py); counted in prompt_tokens too, as OpenAI's usage counts them.
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
        )


@dataclass(frozen=True)
class Reply:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    # A reasoning model's thinking, apart from its answer: shown and recorded, never sent back.
    reasoning: str = ""
    # The notes on the model's mistakes this turn that the loop fed back to it (a ModelMistake's
    # note: a rejected generation, a tool call written as text) before this reply; kept so the
    # run's record shows they happened.
    recovered_error: str = ""
    # The provider stopped at its output limit (finish_reason "length"): the text is incomplete.
    cut: bool = False
    # What went wrong on each attempt at this turn that was retried (a drop, a cut stream, a 503).
    retried: tuple[str, ...] = ()
    # The reply is the model's help (what it can do: the mock's answer to a task it cannot work),
    # not an answer to the task, so it is worth no memory; said by the model, never guessed.
    help: bool = False


class LLMError(Exception):
    """The provider could not give a reply (down, out of retries, rejected the request).

    It ends the run as `failed` with this message; it is never fed back to the model. `status`
    is the HTTP status the server answered with, when it answered (a check says what to change
    after a 401 or a 404 without reading the message).
    """

    def __init__(self, message: str = "", *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ModelTimedOut(LLMError):
    """The provider did not finish its reply within the time the run had left.

    The run's deadline, not the provider's health, ended the turn: the run is halted, not failed.
    """


class ModelMistake(LLMError):
    """The model got its reply wrong in a way it can put right when told: the reply is not
    returned, and `note` (a user message) says what was wrong. The loop feeds the note back and
    asks again, once per kind in a turn (core.loop.ask_correcting); the same kind again
    fails the run with `again`. Its own message is the failure for a caller that does not feed
    it back. `retried` is what went wrong on the attempts the client retried on the way."""

    kind: ClassVar[str]

    def __init__(
        self,
        message: str,
        *,
        note: Message,
        again: str,
        status: int | None = None,
        retried: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, status=status)
        self.note = note
        self.again = again
        self.retried = retried


class RejectedGeneration(ModelMistake):
    """The provider refused what the model generated (Groq's tool_use_failed: a call to a tool
    not offered, arguments that are not JSON, a call in a turn without tools)."""

    kind = "rejected_generation"


class ToolCallAsText(ModelMistake):
    """The model wrote a tool call as JSON text in its answer instead of calling the tool."""

    kind = "tool_call_as_text"


class LLM(Protocol):
    provider: str
    model: str

    def chat(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        *,
        timeout: float | None = None,
        interrupt: Interrupt | None = None,
    ) -> Reply:
        """One model turn. `tools=None` means the model must answer in text; `timeout` is the
        time the run has left, which a provider that waits on the network must not exceed for
        the whole reply (raising ModelTimedOut when it would). `interrupt` is the run's one stop
        signal: a provider that waits (on the network, to retry, to think) wakes on it and
        raises Interrupted."""
        ...
