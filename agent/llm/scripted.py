"""A model that replays a fixed list of replies, for tests and benchmarks."""

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from core.interrupt import Interrupt
from core.llm import LLMError, Message, Reply, ToolCall, ToolSpec


def answer(text: str, **reply: Any) -> Reply:
    return Reply(text=text, **reply)


def call(name: str, arguments: dict[str, Any] | str | None = None, **reply: Any) -> Reply:
    """A reply asking for one tool call (a str is sent as the raw, possibly malformed, JSON)."""
    return calls((name, arguments), **reply)


def calls(*requests: tuple[str, dict[str, Any] | str | None], **reply: Any) -> Reply:
    tool_calls = tuple(
        ToolCall(
            f"call_{name}_{n}",
            name,
            arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
        )
        for n, (name, arguments) in enumerate(requests)
    )
    return Reply(tool_calls=tool_calls, **reply)


class ScriptedLLM:
    """Replays `replies` in order; an exception in the list is raised at its turn.

    Records the messages and tool specs of every turn in `turns`, so tests can check exactly what
    the model was shown.
    """

    provider = "scripted"
    model = "scripted"

    def __init__(self, replies: Iterable[Reply | Exception]) -> None:
        self.replies = list(replies)
        self.turns: list[tuple[list[Message], list[ToolSpec] | None]] = []
        self.timeouts: list[float | None] = []

    def chat(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        *,
        timeout: float | None = None,
        interrupt: Interrupt | None = None,
    ) -> Reply:
        self.turns.append((list(messages), tools))
        self.timeouts.append(timeout)
        if len(self.turns) > len(self.replies):
            raise LLMError("the script has no more replies")
        reply = self.replies[len(self.turns) - 1]
        if isinstance(reply, Exception):
            raise reply
        return _unique_ids(reply, len(self.turns))


def _unique_ids(reply: Reply, turn: int) -> Reply:
    """Call ids must be unique across the run, as a provider's are."""
    if not reply.tool_calls:
        return reply
    renamed = tuple(
        ToolCall(f"{tool_call.id}_t{turn}", tool_call.name, tool_call.arguments)
        for tool_call in reply.tool_calls
    )
    return dataclasses.replace(reply, tool_calls=renamed)
