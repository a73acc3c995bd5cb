"""Reading a chat-completions reply, streamed or whole, as one thing: a whole reply is read as the
one chunk of a stream that would have brought it.

A stream is read from its server-sent events as plain JSON (not a typed object per chunk, which cost
most of a streamed turn), line by line with a bound on a line, and assembled by `ReplyPieces`:
text shown as it comes (thinking in <think> tags held back by `ThinkingFilter`), tool calls from
their pieces with or without ids and indexes, usage, and the finish reason without which a stream
was cut. Whatever the server sends is bounded (MAX_REPLY_CHARS, MAX_TOOL_CALLS) and checked: a
chunk not shaped as the protocol says is NotAChunk, never a crash.
"""

import codecs
import json
import math
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from agent.llm.said import clipped
from core.interrupt import Interrupt
from core.llm import LLMError, Reply, ToolCall, Usage
from core.text import storable

# What Loop holds of one reply, whatever the server sends (a hostile or broken one may send
# gigabytes inside a run's deadline): the characters of text, reasoning and tool calls (several
# times what a model writes in a turn), one line of an event stream, and a body read whole (a
# reply not streamed, an error, the model list), room for the longest reply JSON-escaped.
MAX_REPLY_CHARS = 4_000_000


MAX_LINE_BYTES = 32 * 2**20


# The most tool calls one reply may ask for: a run takes few per turn (its limits run out at
# max_tool_calls, and every call past them is still recorded as not run), a hostile reply millions.
MAX_TOOL_CALLS = 128


class StreamCut(Exception):
    """A streamed reply ended before its last chunk (the one with the finish reason): what came
    is not the whole reply."""


def new_call_id() -> str:
    """An id for a tool call the server sent without one (some local servers do)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def whole_as_chunk(completion: Any) -> dict[str, Any]:
    """A whole chat completion as the one chunk of a stream that would have brought it."""
    if not isinstance(completion, dict):
        return {}
    choices = completion.get("choices")
    if not isinstance(choices, list):
        return completion  # not a completion: ReplyPieces says so
    return {**completion, "choices": [_whole_as_delta(choice) for choice in choices]}


def _whole_as_delta(choice: Any) -> Any:
    """A whole choice as a streamed one: its message the delta, each call a piece with its
    position as its index (a whole message's calls are each a call of its own, even when two
    carry the same id)."""
    if not isinstance(choice, dict):
        return choice
    delta = choice.get("message") or {}
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    if isinstance(calls, list):
        indexed = [
            {"index": index, **call} if isinstance(call, dict) else call
            for index, call in enumerate(calls)
        ]
        delta = {**delta, "tool_calls": indexed}
    return {"delta": delta, "finish_reason": choice.get("finish_reason")}


def arguments_text(arguments: Any, empty: str = "{}") -> str:
    """A tool call's arguments as JSON text, as the protocol has them; a server that sends them
    as a JSON object (not text) gets them written out."""
    if isinstance(arguments, str):
        return arguments or empty
    return empty if arguments is None else json.dumps(arguments)


def usage_of(usage: dict[str, Any] | None) -> Usage:
    # Reasoning tokens are counted in completion_tokens, as OpenAI does.
    if not usage:
        return Usage()
    prompt = _count(usage.get("prompt_tokens"))
    # OpenAI's and Groq's prompt cache: prompt_tokens_details.cached_tokens, part of the prompt.
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(prompt, _count(usage.get("completion_tokens")), min(cached, prompt))


# More tokens than any model reads or writes in a turn: a count past it is not believed.
MAX_TOKEN_COUNT = 10**9


def _count(value: Any) -> int:
    """A token count as a server reports it, or 0 for one that is not a count (text, a negative
    number, `1e308`): the run's token budget adds them up and must neither crash nor be wound
    back."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not math.isfinite(value) or not 0 <= value <= MAX_TOKEN_COUNT:
        return 0
    return int(value)


# Where servers put a reasoning model's thinking apart from its answer: Groq, OpenRouter and vLLM
# (its newer name) in `reasoning`; llama.cpp, LM Studio, DeepSeek and older vLLM in
# `reasoning_content`.
REASONING_FIELDS = ("reasoning", "reasoning_content")


def reasoning_of(part: dict[str, Any]) -> str:
    """The thinking in a reply's delta (or message), as the JSON the server sent has it."""
    for name in REASONING_FIELDS:
        value = part.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The data of each server-sent event in a stream's lines (an event's data lines joined);
    comments (`: keep-alive`), event names and ids are skipped."""
    data: list[str] = []
    for number, line in enumerate(lines):
        if number == 0:
            line = line.removeprefix("\ufeff")  # a byte order mark opening the stream
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            if joined := "\n".join(data):  # an event with empty data is none (a keep-alive)
                yield joined
            data = []
    if data and (joined := "\n".join(data)):
        yield joined


class EventStream:
    """A streamed response's lines, read with `event_lines` (bounded) rather than httpx2's own
    iter_lines (which holds a line however long it grows)."""

    def __init__(self, response: Any) -> None:
        self.response = response

    def iter_lines(self) -> Iterator[str]:
        return event_lines(self.response.iter_bytes())


class LineTooLong(Exception):
    """A line of an event stream passed MAX_LINE_BYTES before it ended."""


def event_lines(pieces: Iterable[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The lines of an event stream as its bytes come in, split at CRLF, LF or CR as the
    standard says, UTF-8 decoded. Unlike httpx2's iter_lines, a line is not held past `limit`
    bytes: a server that never ends one would fill the worker's memory."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    held: list[str] = []  # the line so far
    size, after_cr = 0, False
    for piece in pieces:
        text = decoder.decode(piece)
        if not text:
            continue
        if after_cr and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF split across two reads
        after_cr = text.endswith("\r")
        first, *lines = _LINE_BREAK.split(text)
        held.append(first)
        size += len(first)
        if lines:
            if size > limit or max(map(len, lines)) > limit:
                raise LineTooLong
            yield "".join(held)
            *ended, last = lines
            yield from ended
            held, size = [last], len(last)
        elif size > limit:
            raise LineTooLong
    if rest := "".join(held) + decoder.decode(b"", final=True):
        yield rest


_LINE_BREAK = re.compile("\r\n|\r|\n")


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_thinking(text: str) -> tuple[str, str]:
    """(reasoning, answer) of a reply that opens with <think>...</think> in its text."""
    stripped = text.lstrip()
    if not stripped.startswith(THINK_OPEN):
        return "", text
    thought, closed, answer = stripped[len(THINK_OPEN) :].partition(THINK_CLOSE)
    if not closed:
        return thought.strip(), ""  # cut off while still thinking
    return thought.strip(), answer.lstrip()


class ThinkingFilter:
    """The streaming form of split_thinking: text pieces in, answer pieces out (to be shown), the
    thinking kept apart. Only a reply that opens with <think> has thinking; the opening is held
    back only until it can be told apart from an answer."""

    def __init__(self) -> None:
        self.state = "start"  # start → thinking → thought → answer
        self.held = ""
        # The whitespace a reply opens with, kept apart from `held` so that a reply of endless
        # blank pieces costs each its own length, not all before it again.
        self.blank: list[str] = []
        self.thought: list[str] = []

    def feed(self, piece: str) -> str:
        """The part of `piece` that is answer, possibly empty."""
        if self.state == "answer":
            return piece
        if self.state == "thought":  # the answer starts at its first non-blank character
            return self._answer_from(piece.lstrip()) if piece.strip() else ""
        if self.state == "start" and not self.held and not piece.strip():
            self.blank.append(piece)
            return ""  # only whitespace so far
        self.held += piece
        if self.state == "start":
            stripped = self.held.lstrip()
            if THINK_OPEN.startswith(stripped):
                return ""  # still could be the opening tag
            if not stripped.startswith(THINK_OPEN):
                return self._answer_from("".join(self.blank) + self.held)
            self.state, self.held = "thinking", stripped[len(THINK_OPEN) :]
        thought, closed, answer = self.held.partition(THINK_CLOSE)
        if not closed:
            keep = _partial_suffix(self.held, THINK_CLOSE)
            self.thought.append(self.held[: len(self.held) - keep])
            self.held = self.held[len(self.held) - keep :]
            return ""
        self.thought.append(thought)
        self.state, self.held = "thought", ""
        return self.feed(answer)

    def _answer_from(self, text: str) -> str:
        self.state, self.held = "answer", ""
        return text

    @property
    def thinking(self) -> str:
        return "".join(self.thought).strip()


def _partial_suffix(text: str, tag: str) -> int:
    """How many of `text`'s last characters could be the start of `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


class ReplyPieces:
    """A reply put together from a stream: text pieces go to `deltas` as they come (thinking in
    <think> tags kept apart); a tool call's id and name come in its first piece and its arguments
    in any number of them, or all at once. Only a stream that reached its finish reason is a
    reply. An interrupted run's reply is read no further."""

    def __init__(
        self,
        deltas: Callable[[str], None] | None,
        interrupt: Interrupt | None = None,
        *,
        whole: bool = False,
    ) -> None:
        self.deltas = deltas
        self.interrupt = interrupt
        # A whole reply (not streamed) is complete without a finish reason.
        self.whole = whole
        self.size = 0  # characters held so far, bounded by MAX_REPLY_CHARS
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.thinking = ThinkingFilter()
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None

    def read(self, chunks: Iterable[Any], transient: tuple[type[Exception], ...]) -> Reply:
        try:
            for chunk in chunks:
                if self.interrupt is not None:
                    self.interrupt.raise_if_set()
                self.take(chunk)
        except transient:
            if self.finish_reason is None:
                raise
            # Everything came; only the connection's end (after [DONE]) went wrong.
        return self.reply()

    def take(self, chunk: dict[str, Any]) -> None:
        """One chunk, as the JSON the server sent; NotAChunk when it is not shaped as one."""
        groq_part = _part(chunk, "x_groq")  # Groq's own: its usage, or its error
        if error := groq_part.get("error"):
            raise LLMError(f"Groq's stream ended with an error: {clipped(str(error))}")
        choices = chunk.get("choices") or []  # a usage chunk may have none, or null
        if not isinstance(choices, list):
            raise NotAChunk("its choices are not a list")
        for choice in choices[:1]:
            if not isinstance(choice, dict):
                raise NotAChunk("a choice is not an object")
            self.add(_part(choice, "delta"))
            finish_reason = choice.get("finish_reason")
            if finish_reason is not None and not isinstance(finish_reason, str):
                raise NotAChunk("its finish reason is not text")
            self.finish_reason = finish_reason or self.finish_reason
        usage = groq_part.get("usage") or chunk.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise NotAChunk("its usage is not an object")
        self.usage = usage or self.usage

    def add(self, delta: dict[str, Any]) -> None:
        if content := storable(_text(delta, "content")):
            self._hold(content)
            self.text.append(content)
            shown = self.thinking.feed(content)
            if shown and self.deltas is not None:
                self.deltas(shown)
        if reasoning := storable(reasoning_of(delta)):
            self._hold(reasoning)
            self.reasoning.append(reasoning)
        calls = delta.get("tool_calls") or []
        if not isinstance(calls, list):
            raise NotAChunk("its tool calls are not a list")
        for piece in calls:
            self._add_call(piece)

    def _add_call(self, piece: Any) -> None:
        if not isinstance(piece, dict):
            raise NotAChunk("a tool call is not an object")
        function = _part(piece, "function")
        if not function and self.whole:
            raise NotAChunk("a tool call has no function")
        index = piece.get("index")
        if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
            raise NotAChunk("a tool call's index is not a number")
        id, name = storable(_text(piece, "id")), storable(_text(function, "name"))
        arguments = storable(arguments_text(function.get("arguments"), ""))
        self._hold(id + name + arguments)
        index = self._index_of(piece, function)
        if index not in self.calls and len(self.calls) >= MAX_TOOL_CALLS:
            raise TooManyCalls
        call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        call["id"] = id or call["id"]
        call["name"] = name or call["name"]
        if arguments:  # a piece without any holds nothing, however many come
            call["arguments"].append(arguments)

    def _hold(self, text: str) -> None:
        self.size += len(text)
        if self.size > MAX_REPLY_CHARS:
            raise ReplyTooLong

    def _index_of(self, piece: dict[str, Any], function: dict[str, Any]) -> int:
        """Which call a piece belongs to. A server that sends no index sends each call whole, or
        its first piece with its id (if any) and name and the rest with neither."""
        if isinstance(given := piece.get("index"), int):  # checked in _add_call: a number or none
            return given
        for index, call in self.calls.items():
            if piece.get("id") and call["id"] == piece["id"]:
                return index
        named = bool(function.get("name"))
        if piece.get("id") or not self.calls or (named and self.calls[max(self.calls)]["name"]):
            return len(self.calls)  # a new call: an id, or a name while the last has one
        return max(self.calls)

    def reply(self) -> Reply:
        if self.finish_reason is None and not self.whole:
            raise StreamCut
        cut = self.finish_reason == "length"
        calls = self._tool_calls()
        reasoning, text = answer_and_thought("".join(self.text), cut or bool(calls))
        return Reply(
            text=text,
            tool_calls=calls,
            usage=usage_of(self.usage),
            reasoning="".join(self.reasoning) or reasoning,
            cut=cut,
        )

    def _tool_calls(self) -> tuple[ToolCall, ...]:
        """The calls, each with an id of its own: one the server sent that is odd (too long,
        not plain, or another call's) is replaced, as a missing one is, since the page and the
        history tell calls apart by it."""
        calls, seen = [], set()
        for _, call in sorted(self.calls.items()):
            id = call["id"] if plain_call_id(call["id"]) and call["id"] not in seen else ""
            id = id or new_call_id()
            seen.add(id)
            calls.append(ToolCall(id, call["name"], "".join(call["arguments"]) or "{}"))
        return tuple(calls)


class ReplyTooLong(Exception):
    """A reply passed MAX_REPLY_CHARS."""


class TooManyCalls(Exception):
    """A reply asked for more than MAX_TOOL_CALLS tool calls."""


class NotAChunk(ValueError):
    """A chunk (or a whole completion) not shaped as the protocol has it; says what is off."""


def _part(whole: dict[str, Any], name: str) -> dict[str, Any]:
    part = whole.get(name) or {}
    if not isinstance(part, dict):
        raise NotAChunk(f"its {name} is not an object")
    return part


def _text(part: dict[str, Any], name: str) -> str:
    value = part.get(name) or ""
    if not isinstance(value, str):
        raise NotAChunk(f"its {name} is not text")
    return value


_PLAIN_CALL_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")


def plain_call_id(id: str) -> bool:
    """An id as servers make them (`call_...`, `toolu_...`, nine letters): kept as sent."""
    return bool(_PLAIN_CALL_ID.fullmatch(id))


def answer_and_thought(text: str, cut_or_called: bool) -> tuple[str, str]:
    """(reasoning, answer) of a reply's text. A reply that opened <think> and finished without
    closing it (not cut at the output limit, calling nothing) has no answer apart from it: all of
    it is the answer, rather than an empty one the person cannot see a reason for."""
    reasoning, answer = split_thinking(text)
    if reasoning and not answer and not cut_or_called and THINK_CLOSE not in text:
        return "", reasoning
    return reasoning, answer
