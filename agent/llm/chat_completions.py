"""The chat-completions shape with tool calling, for Groq and any OpenAI-compatible server.

One implementation serves every server that speaks it: building the request, assembling a streamed
reply, reading usage, mapping errors and retrying. What differs between servers (the SDK, Groq's
reasoning fields and error codes, a server's quirks) is a `Dialect`, a small table each provider
module fills in (`agent/llm/groq.py`, `agent/llm/openai_compat.py`).

Retries live in one layer only, this one (the SDKs' own are switched off), because only this layer
knows the run's deadline: a 429, 408/409, 5xx, timeout, a connection that drops (before the reply
or while it streams in) and a stream that ends before its last chunk are retried after the
server's `retry-after` (or a short backoff) only while the wait still fits in the time the run has
left and in `MAX_WAIT`. Whatever is left after that is an LLMError that ends the run as failed,
saying what happened and, for a rate limit, when to try again. A server that refuses the
connection is down: that fails at once, naming its URL.

Each turn is bounded by the time the run has left as a whole, not per read: the SDK's timeout is
capped to it, and a watchdog cuts a reply still coming in when it runs out (ModelTimedOut: the run
halts on its deadline). A reply stopped at the model's output limit (finish reason `length`) is
returned marked as cut.

A reply the model got wrong is fed back to it once as a note it can act on, and a second one in a
row ends the run: a 400 about what the model generated (Groq's `tool_use_failed`), or a tool call
written as JSON text in the answer instead of being called. A model that does not exist fails at
once naming the setting to change and the check to run; so does a server that cannot call tools.

A run's `interrupt` (set by its owner) ends a wait before a retry at once, raising Interrupted: a
stopped run is never asked for again after a rate limit or an outage; a reply streaming in stops
being read (and shown) at its next piece.
"""

import dataclasses
import email.utils
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agent.history import loop_note, undelimited
from agent.interrupt import Interrupt
from agent.llm.base import LLMError, Message, ModelTimedOut, Reply, ToolCall, ToolSpec, Usage
from agent.llm.watchdog import Watchdog

# The longest wait for a rate limit or an outage that Loop sits out inside a run; a longer one
# fails the run at once with the time to try again.
MAX_WAIT = 60.0

REJECTED_REPLY_NOTE = loop_note(
    "Your last reply was rejected by the model provider and nothing in it ran: {reason} {hint}"
)

TEXT_TOOL_CALL_NOTE = loop_note(
    "Your last reply wrote a call to the tool {name} as text in your answer, so nothing ran. "
    "To use a tool, call it through tool calling, not in the text; otherwise answer in plain text."
)

SERVER_FLAGS_HINT = (
    "the server is probably not parsing the model's tool calls: see docs/models.md for the "
    "flags tool calling needs (vLLM's --enable-auto-tool-choice --tool-call-parser, llama.cpp's "
    "--jinja), or pick a model trained for tool calling"
)


@dataclass(frozen=True)
class Dialect:
    """What one provider's chat-completions service does its own way; everything else is shared.

    `sdk` is the provider's SDK module (`groq` or `openai`: they expose the same client and error
    classes) and `http` the HTTP library it is built on (`httpx` or `httpx2`), whose transport
    errors the SDK does not wrap while a reply is read."""

    provider: str  # what a run records as its provider, and the model names' prefix
    sdk: ModuleType
    http: ModuleType
    model_setting: str  # the setting that names the model, for a model that is not there
    check_command: str  # the `manage.py` command that checks the server and the model
    # Ask for usage in streamed replies (stream_options.include_usage): OpenAI's API and most
    # servers send none otherwise. Groq sends it anyway, in `x_groq`.
    asks_stream_usage: bool = False
    # The 400s that are about what the model generated, to be fed back to it once.
    rejected_reply: Callable[[Any], bool] = lambda error: False
    # The request options for a model (reasoning parameters), given the configured effort.
    reasoning_options: Callable[[str, str], dict[str, Any]] = lambda model, effort: {}


# Servers that answered 400 to stream_options: asked without it from then on, in this process.
_REFUSE_STREAM_OPTIONS: set[str] = set()


class ChatCompletionsLLM:
    """One model on one chat-completions server. `server` names it in messages ("Groq", or "the
    model server at <url>"), `server_s` in the possessive."""

    dialect: Dialect

    def __init__(
        self,
        model: str,
        *,
        client: Any,
        server: str,
        server_s: str,
        deltas: Callable[[str], None] | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        reasoning_effort: str = "",
    ) -> None:
        self.provider = self.dialect.provider
        self.model = model
        self.client = client
        self.server = server
        self.server_s = server_s
        self.timeout = timeout
        self.max_retries = max_retries
        self.reasoning_effort = reasoning_effort
        # Hears the answer's text as it is generated; the reply is then streamed, and tool calls
        # are assembled from their pieces.
        self.deltas = deltas
        # Set (by the run's owner) to stop waiting to retry as soon as the run is interrupted.
        self.interrupt: Interrupt | None = None
        self.logger = logging.getLogger(f"agent.llm.{self.provider}")
        sdk = self.dialect.sdk
        self.transient_errors: tuple[type[Exception], ...] = (
            sdk.APIStatusError,
            sdk.APIConnectionError,
            self.dialect.http.TransportError,
            StreamCut,
        )

    @property
    def base_url(self) -> str:
        return str(self.client.base_url)

    @property
    def retry_note(self) -> str:
        """Streamed when a reply broke off and is asked for again: the pieces already shown stay
        until the stored reply replaces them, so the page says why new text follows them."""
        return f"\n\n[{_sentence(self.server_s)} reply broke off; Loop asked for it again.]\n\n"

    # --- a turn -------------------------------------------------------------------------------

    def chat(
        self, messages: list[Message], tools: list[ToolSpec] | None, *, timeout: float | None = None
    ) -> Reply:
        deadline = None if timeout is None else time.monotonic() + timeout
        retried: list[str] = []
        try:
            reply = self._send(messages, tools, deadline, retried)
        except self.dialect.sdk.BadRequestError as error:
            note = self._rejected_reply_note(error, tools)
            if note is None:
                raise LLMError(self._describe(error), status=error.status_code) from None
            reply = self._send_corrected([*messages, note], tools, deadline, retried)
        else:
            reply = self._correct_text_tool_call(reply, messages, tools, deadline, retried)
        return dataclasses.replace(reply, retried=tuple(retried))

    def _send_corrected(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        deadline: float | None,
        retried: list[str],
    ) -> Reply:
        """The turn again, with the note on the rejected reply last in `messages`."""
        try:
            reply = self._send(messages, tools, deadline, retried)
        except self.dialect.sdk.BadRequestError as error:
            again = (
                " again, after the first was fed back" if self.dialect.rejected_reply(error) else ""
            )
            raise LLMError(f"{self._describe(error)}{again}", status=error.status_code) from None
        return dataclasses.replace(reply, recovered_error=messages[-1]["content"])

    def _correct_text_tool_call(
        self,
        reply: Reply,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        deadline: float | None,
        retried: list[str],
    ) -> Reply:
        """A reply that wrote a tool call as JSON text instead of calling it is fed back once;
        a second in a row is a failure that says what to do about the server."""
        name = text_tool_call(reply, tools)
        if name is None:
            return reply
        note = {"role": "user", "content": TEXT_TOOL_CALL_NOTE.format(name=name)}
        if self.deltas is not None:
            self.deltas(f"\n\n[{self.model} wrote a tool call as text; Loop asked it again.]\n\n")
        corrected = self._send_corrected([*messages, note], tools, deadline, retried)
        if text_tool_call(corrected, tools) is not None:
            raise LLMError(
                f"{self.model} on {self.server} wrote its tool call to {name} as text instead of "
                f"calling it, twice, the second time after being told: {SERVER_FLAGS_HINT}."
            )
        return corrected

    def available_models(self) -> list[str]:
        """The models the server lists (GET /models) for this key."""
        sdk = self.dialect.sdk
        try:
            return sorted(model.id for model in self.client.models.list().data)
        except sdk.APIStatusError as error:
            raise LLMError(self._describe(error), status=error.status_code) from None
        except sdk.APIConnectionError as error:
            raise LLMError(self._unreachable(error)) from None

    def request_options(self, tools: list[ToolSpec] | None) -> dict[str, Any]:
        options: dict[str, Any] = {"tools": tools, "tool_choice": "auto"} if tools else {}
        return {**options, **self.dialect.reasoning_options(self.model, self.reasoning_effort)}

    def _stream_options(self) -> dict[str, Any]:
        if not self.dialect.asks_stream_usage or self.base_url in _REFUSE_STREAM_OPTIONS:
            return {}
        return {"stream_options": {"include_usage": True}}

    # --- attempts and retries -----------------------------------------------------------------

    def _send(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        deadline: float | None,
        retried: list[str],
    ) -> Reply:
        """One completion, retried while the wait fits (what went wrong on each attempt retried
        is added to `retried`); a 400 is raised for `chat` to judge."""
        sdk = self.dialect.sdk
        attempt, ask_usage = 0, True
        while True:
            options = self.request_options(tools)
            if self.deltas is not None:
                options.update(stream=True, **(self._stream_options() if ask_usage else {}))
            limit = self._attempt_limit(deadline)
            pieces = ReplyPieces(self.deltas, self.interrupt)
            watchdog = Watchdog(deadline)
            try:
                with watchdog:
                    return self._attempt(messages, options, limit, watchdog, pieces)
            except sdk.BadRequestError as error:
                if not self._refused_stream_options(error, options):
                    raise
                ask_usage = False
                continue  # asked again at once without the option: not a retry
            except self.transient_errors as error:
                wait = self._wait_to_retry(error, attempt, limit, deadline, watchdog)
                retried.append(self._describe(error, limit, wait))
                self.logger.warning(
                    "%s: attempt %d failed, retrying: %s",
                    _sentence(self.server),
                    attempt + 1,
                    retried[-1],
                )
                if pieces.text and self.deltas is not None:
                    self.deltas(self.retry_note)
            except sdk.APIError as error:  # a reply the SDK could not make sense of
                raise LLMError(f"{_sentence(self.server_s)} reply made no sense: {error}") from None
            self._sit_out(wait)
            attempt += 1

    def _refused_stream_options(self, error: Any, options: dict[str, Any]) -> bool:
        """A server that does not take stream_options says so in a 400: remembered, so the
        turn (and every later one) is asked without it."""
        if "stream_options" not in options:
            return False
        message = _status_message(error).lower()
        if "stream_options" not in message and "include_usage" not in message:
            return False
        self.logger.info("%s does not take stream_options; asking without", self.server)
        _REFUSE_STREAM_OPTIONS.add(self.base_url)
        return True

    def _sit_out(self, wait: float) -> None:
        """The wait before the next attempt; an interrupt ends it with Interrupted, no retry."""
        if self.interrupt is None:
            time.sleep(wait)
        elif self.interrupt.wait(wait):
            self.interrupt.raise_if_set()

    def _wait_to_retry(
        self,
        error: Exception,
        attempt: int,
        limit: float,
        deadline: float | None,
        watchdog: Watchdog,
    ) -> float:
        """How long to wait before the next attempt; raises when there is to be none."""
        if watchdog.fired.is_set() or self._deadline_timeout(error, limit):
            raise ModelTimedOut(
                f"{_sentence(self.server)} did not finish its reply within the {limit:.1f} "
                "seconds the run had left."
            ) from None
        wait = self._retry_wait(error, attempt)
        if not self._may_retry(error, attempt, wait, deadline):
            described = self._describe(error, limit, wait, attempt + 1)
            raise LLMError(described, status=getattr(error, "status_code", None)) from None
        return wait

    def _attempt(
        self,
        messages: list[Message],
        options: dict[str, Any],
        limit: float,
        watchdog: Watchdog,
        pieces: "ReplyPieces",
    ) -> Reply:
        """One request. The response is handed to the watchdog as soon as its headers are in,
        so the body, streamed or not, is read within the deadline.

        The body goes to the SDK as `extra_body`, which it sends as it is: given as arguments,
        the messages and tools would each be checked against the SDK's types first, a cost that
        grows with the history (milliseconds a turn, some turns in). A streamed reply is read
        from its server-sent events as plain JSON for the same reason (the SDK builds a typed
        object of every chunk)."""
        body = {"messages": messages, **{k: v for k, v in options.items() if k != "stream"}}
        stream = {"stream": True} if options.get("stream") else {}
        with self.client.chat.completions.with_streaming_response.create(
            model=self.model, messages=[], timeout=limit, extra_body=body, **stream
        ) as response:
            http_response = response.http_response
            watchdog.watch(http_response)
            if not stream:
                self._check_content_type(http_response, "json")
                return self._reply(response.parse())
            if "json" in http_response.headers.get("content-type", ""):
                # A server that does not stream sent the whole reply: one chunk of it all.
                return pieces.read([self._whole_chunk(http_response)], self.transient_errors)
            self._check_content_type(http_response, "text/event-stream")
            return pieces.read(self._events(http_response), self.transient_errors)

    def _check_content_type(self, response: Any, expected: str) -> None:
        """A 200 that is not a chat completion (a web page, a proxy's sign-in) is a wrong base
        URL, said as such, not a crash or a retry."""
        content_type = response.headers.get("content-type", "")
        if expected in content_type:
            return
        text = response.read().decode("utf-8", "replace")[:200]
        raise LLMError(
            f"{_sentence(self.server)} answered with {content_type or 'no content type'}, not a "
            f"chat completion: {text!r}. Is its base URL right? An OpenAI-compatible one usually "
            "ends in /v1."
        )

    def _whole_chunk(self, response: Any) -> dict[str, Any]:
        try:
            return whole_as_chunk(json.loads(response.read()))
        except ValueError:
            raise LLMError(f"{_sentence(self.server)} sent a reply that is not JSON.") from None

    def _events(self, response: Any) -> Iterator[dict[str, Any]]:
        """The data of each server-sent event of a streamed reply, up to `[DONE]`; an event
        that is an error (the server gave up mid-reply) ends the turn with an LLMError."""
        for data in sse_data(response.iter_lines()):
            if data.startswith("[DONE]"):
                return
            try:
                chunk = json.loads(data)
            except ValueError:
                raise LLMError(
                    f"{_sentence(self.server)} sent a stream that is not JSON: {data[:200]!r}"
                ) from None
            if isinstance(chunk, dict) and chunk.get("error"):
                error = chunk["error"]
                message = error.get("message") if isinstance(error, dict) else None
                if not isinstance(message, str) or not message:
                    message = "An error occurred during streaming"
                raise LLMError(f"{_sentence(self.server_s)} stream ended with an error: {message}")
            if isinstance(chunk, dict):
                yield chunk

    def _reply(self, completion: Any) -> Reply:
        if not completion.choices:
            raise LLMError(f"{_sentence(self.server)} returned no choices.")
        choice = completion.choices[0]
        message = choice.message
        calls = tuple(
            ToolCall(
                call.id or new_call_id(),
                call.function.name,
                arguments_text(call.function.arguments),
            )
            for call in message.tool_calls or ()
        )
        reasoning, text = split_thinking(message.content or "")
        return Reply(
            text=text,
            tool_calls=calls,
            usage=usage_of(completion.usage),
            reasoning=reasoning_of(message) or reasoning,
            cut=choice.finish_reason == "length",
        )

    def _deadline_timeout(self, error: Exception, limit: float) -> bool:
        """A timeout while the time the run had left, not the configured timeout, was the cap."""
        return self._timed_out(error) and limit < self.timeout

    def _timed_out(self, error: Exception) -> bool:
        timeouts = (self.dialect.sdk.APITimeoutError, self.dialect.http.TimeoutException)
        return isinstance(error, timeouts)

    def _may_retry(
        self, error: Exception, attempt: int, wait: float, deadline: float | None
    ) -> bool:
        return (
            self._retryable(error)
            and attempt < self.max_retries
            and wait <= MAX_WAIT
            and _fits(wait, deadline)
        )

    def _retryable(self, error: Exception) -> bool:
        sdk = self.dialect.sdk
        if self._unreached(error):
            return False  # nothing listens there: the server is down, or the URL is wrong
        if not isinstance(error, sdk.APIStatusError):  # a timeout or a dropped connection
            return True
        if cannot_call_tools(_status_message(error)):
            return False  # llama.cpp says it with a 500: asking again cannot help
        return error.status_code in {408, 409, 429} or error.status_code >= 500

    def _unreached(self, error: Exception) -> bool:
        """A connection never made (refused, or no such host), not one that broke: the openai
        SDK wraps a reset while a reply streams in in the same APIConnectionError."""
        sdk = self.dialect.sdk
        if not isinstance(error, sdk.APIConnectionError) or isinstance(error, sdk.APITimeoutError):
            return False
        return _broken_connection(error, self.dialect.http) is None

    def _retry_wait(self, error: Exception, attempt: int) -> float:
        """The server's own hint when it gives one, else a short exponential backoff."""
        if isinstance(error, self.dialect.sdk.APIStatusError):
            hinted = hinted_wait(error.response.headers)
            if hinted is not None:
                return hinted
        return min(0.5 * 2**attempt, 8.0)

    def _attempt_limit(self, deadline: float | None) -> float:
        if deadline is None:
            return self.timeout
        return max(min(self.timeout, deadline - time.monotonic()), 0.001)

    # --- saying what went wrong ---------------------------------------------------------------

    def _describe(
        self, error: Exception, limit: float = 0.0, wait: float = 0.0, attempts: int = 1
    ) -> str:
        sdk = self.dialect.sdk
        server = _sentence(self.server)
        if self._timed_out(error):
            return f"{server} did not answer within {_seconds(limit)}{_on_attempts(attempts)}."
        if isinstance(error, StreamCut):
            return (
                f"{server} cut its reply short: the stream ended before its last chunk"
                f"{_on_attempts(attempts)}."
            )
        if broken := _broken_connection(error, self.dialect.http):
            # The SDK wraps what breaks before the reply's headers; what breaks after is raw.
            when = "before" if isinstance(error, sdk.APIConnectionError) else "while"
            return (
                f"The connection to {self.server} broke {when} its reply came in"
                f"{_on_attempts(attempts)}: {broken or type(broken).__name__}"
            )
        if not isinstance(error, sdk.APIStatusError):
            return self._unreachable(error)
        message = _status_message(error)
        if cannot_call_tools(message):
            return self._cannot_call_tools(message)
        if self._model_missing(error, message):
            return self._missing_model(message)
        if error.status_code == 404:
            return (
                f"{server} answered 404 for {error.request.url.path}: {message} Is its base "
                "URL right? An OpenAI-compatible one usually ends in /v1."
            )
        if error.status_code == 429:
            owner = _sentence(self.server_s)
            return f"{owner} rate limit was reached: {message} Try again {_when(wait)}."
        return f"{server} answered {error.status_code}: {message}"

    def _unreachable(self, error: Exception) -> str:
        return f"Could not reach {self.server}: {unreachable_detail(error)}"

    def _model_missing(self, error: Any, message: str) -> bool:
        code = _error_body(error).get("code")
        if code in {"model_not_found", "model_decommissioned"}:
            return True
        named = self.model.lower() in message.lower() or "model" in message.lower()
        return error.status_code in {400, 404} and named and _says_missing(message)

    def _missing_model(self, message: str) -> str:
        return (
            f"{_sentence(self.server)} has no model {self.model!r} ({message}). Set "
            f"{self.dialect.model_setting} (or LOOP_MODEL, or runagent --model) to one it has; "
            f"`manage.py {self.dialect.check_command}` lists them."
        )

    def _cannot_call_tools(self, message: str) -> str:
        return (
            f"{self.model} on {self.server} cannot call tools ({message}). Loop's agent needs "
            "tool calling: pick a model that supports it, or start the server with tool calling "
            "on (docs/models.md shows how for each server)."
        )

    def _rejected_reply_note(self, error: Any, tools: list[ToolSpec] | None) -> Message | None:
        """The note that feeds a rejected reply back to the model, or None for other 400s."""
        if not self.dialect.rejected_reply(error):
            return None
        details = _error_body(error)
        reason = str(details.get("message") or "the reply was malformed")
        generation = str(details.get("failed_generation") or "")[:2000]
        if generation:
            reason += f" Your own output, quoted as data: <<<{undelimited(generation)}>>>"
        if tools:
            hint = (
                f"Call one of the tools you have ({tool_names(tools)}) with arguments that are "
                "valid JSON matching its schema, or answer in text."
            )
        else:
            hint = "Tools are switched off for this turn: answer in plain text, calling no tool."
        return {"role": "user", "content": REJECTED_REPLY_NOTE.format(reason=reason, hint=hint)}


# --- reading replies --------------------------------------------------------------------------


def unreachable_detail(error: Exception) -> str:
    """Why a connection failed, from the transport's error under the SDK's "Connection error."."""
    cause = error.__cause__
    return str(cause or error) if not isinstance(cause, type(error)) else str(error)


def _broken_connection(error: Exception, http: ModuleType) -> Exception | None:
    """The transport's error of a connection that broke (a reset, a body cut mid-way), as
    raised or under the SDK's APIConnectionError; None for one that was never made."""
    cause = error if isinstance(error, http.TransportError) else error.__cause__
    if isinstance(cause, http.TransportError) and not isinstance(cause, http.ConnectError):
        return cause
    return None


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
    choices = [
        {"delta": choice.get("message") or {}, "finish_reason": choice.get("finish_reason")}
        for choice in completion.get("choices") or ()
        if isinstance(choice, dict)
    ]
    return {**completion, "choices": choices}


def arguments_text(arguments: Any, empty: str = "{}") -> str:
    """A tool call's arguments as JSON text, as the protocol has them; a server that sends them
    as a JSON object (not text) gets them written out."""
    if isinstance(arguments, str):
        return arguments or empty
    return empty if arguments is None else json.dumps(arguments)


def usage_of(usage: Any) -> Usage:
    # Reasoning tokens are counted in completion_tokens, as OpenAI does.
    if not usage:
        return Usage()
    return Usage(_field(usage, "prompt_tokens") or 0, _field(usage, "completion_tokens") or 0)


# Where servers put a reasoning model's thinking apart from its answer: Groq, OpenRouter and vLLM
# (its newer name) in `reasoning`; llama.cpp, LM Studio, DeepSeek and older vLLM in
# `reasoning_content`.
REASONING_FIELDS = ("reasoning", "reasoning_content")


def _field(part: Any, name: str) -> Any:
    """A field of a part of a reply: typed by the SDK that knows it, a dict where it does not."""
    if isinstance(part, dict):
        return part.get(name)
    return getattr(part, name, None)


def reasoning_of(part: Any) -> str:
    for name in REASONING_FIELDS:
        value = _field(part, name)
        if value is None and not isinstance(part, dict):
            value = (getattr(part, "model_extra", None) or {}).get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The data of each server-sent event in a stream's lines (an event's data lines joined);
    comments (`: keep-alive`), event names and ids are skipped."""
    data: list[str] = []
    for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            yield "\n".join(data)
            data = []
    if data:
        yield "\n".join(data)


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
        self.thought: list[str] = []

    def feed(self, piece: str) -> str:
        """The part of `piece` that is answer, possibly empty."""
        if self.state == "answer":
            return piece
        if self.state == "thought":  # the answer starts at its first non-blank character
            return self._answer_from(piece.lstrip()) if piece.strip() else ""
        self.held += piece
        if self.state == "start":
            stripped = self.held.lstrip()
            if THINK_OPEN.startswith(stripped):
                return ""  # still could be the opening tag (or only whitespace so far)
            if not stripped.startswith(THINK_OPEN):
                return self._answer_from(self.held)
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
        self, deltas: Callable[[str], None] | None, interrupt: Interrupt | None = None
    ) -> None:
        self.deltas = deltas
        self.interrupt = interrupt
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.thinking = ThinkingFilter()
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Any = None
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
        """One chunk, as the JSON the server sent."""
        groq_part = chunk.get("x_groq") or {}  # Groq's own: its usage, or its error
        if error := groq_part.get("error"):
            raise LLMError(f"Groq's stream ended with an error: {error}")
        for choice in (chunk.get("choices") or ())[:1]:  # a usage chunk may have none, or null
            self.add(choice.get("delta") or {})
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        self.usage = groq_part.get("usage") or chunk.get("usage") or self.usage

    def add(self, delta: dict[str, Any]) -> None:
        if content := delta.get("content"):
            self.text.append(content)
            shown = self.thinking.feed(content)
            if shown and self.deltas is not None:
                self.deltas(shown)
        if reasoning := reasoning_of(delta):
            self.reasoning.append(reasoning)
        for piece in delta.get("tool_calls") or ():
            function = piece.get("function") or {}
            call = self.calls.setdefault(
                self._index_of(piece, function), {"id": "", "name": "", "arguments": []}
            )
            call["id"] = piece.get("id") or call["id"]
            call["name"] = function.get("name") or call["name"]
            call["arguments"].append(arguments_text(function.get("arguments"), ""))

    def _index_of(self, piece: dict[str, Any], function: dict[str, Any]) -> int:
        """Which call a piece belongs to. A server that sends no index sends each call whole, or
        its first piece with its id (if any) and name and the rest with neither."""
        if piece.get("index") is not None:
            return piece["index"]
        for index, call in self.calls.items():
            if piece.get("id") and call["id"] == piece["id"]:
                return index
        named = bool(function.get("name"))
        if piece.get("id") or not self.calls or (named and self.calls[max(self.calls)]["name"]):
            return len(self.calls)  # a new call: an id, or a name while the last has one
        return max(self.calls)

    def reply(self) -> Reply:
        if self.finish_reason is None:
            raise StreamCut
        reasoning, text = split_thinking("".join(self.text))
        return Reply(
            text=text,
            tool_calls=tuple(
                ToolCall(
                    call["id"] or new_call_id(), call["name"], "".join(call["arguments"]) or "{}"
                )
                for _, call in sorted(self.calls.items())
            ),
            usage=usage_of(self.usage),
            reasoning="".join(self.reasoning) or reasoning,
            cut=self.finish_reason == "length",
        )


# --- a model's mistakes and a server's limits -------------------------------------------------


def tool_names(tools: list[ToolSpec]) -> str:
    return ", ".join(spec["function"]["name"] for spec in tools)


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_TOOL_CALL_TAG = re.compile(r"^<tool_call>\s*(.*?)\s*(?:</tool_call>)?$", re.DOTALL)


def text_tool_call(reply: Reply, tools: list[ToolSpec] | None) -> str | None:
    """The tool a reply with no tool calls wrote a call to as JSON text, or None: `{"name": ...,
    "arguments": {...}}` (or "parameters"), bare, in a ```json fence or in <tool_call> tags."""
    if reply.tool_calls or not tools:
        return None
    text = reply.text.strip()
    for pattern in (_FENCE, _TOOL_CALL_TAG):
        if match := pattern.match(text):
            text = match.group(1)
    try:
        written = json.loads(text)
    except ValueError:
        return None
    if isinstance(written, dict) and isinstance(written.get("function"), dict):
        written = written["function"]
    if not isinstance(written, dict) or not ({"arguments", "parameters"} & written.keys()):
        return None
    name = written.get("name")
    offered = {spec["function"]["name"] for spec in tools}
    return name if isinstance(name, str) and name in offered else None


# How servers say a model (or the server as started) cannot take `tools`: Ollama, vLLM without
# --enable-auto-tool-choice, llama.cpp without --jinja, and the wording others use.
_NO_TOOLS = (
    "does not support tools",
    "doesn't support tools",
    "tools are not supported",
    "tools not supported",
    "tool use is not supported",
    "tool calling is not supported",
    "requires --enable-auto-tool-choice",
    "enable-auto-tool-choice",
    "tools param requires --jinja",
    "--jinja",
    "unsupported param: tools",
)


def cannot_call_tools(message: str) -> bool:
    lowered = message.lower()
    return any(known in lowered for known in _NO_TOOLS)


_MISSING = (
    "not found",
    "does not exist",
    "not exist",
    "no such model",
    "unknown model",
    "try pulling",
)


def _says_missing(message: str) -> bool:
    lowered = message.lower()
    return any(known in lowered for known in _MISSING)


def _status_message(error: Any) -> str:
    """What the server said in an error response."""
    return str(_error_body(error).get("message") or error.message)


def _error_body(error: Any) -> dict[str, Any]:
    """The error's details: Groq's SDK keeps the whole body ({"error": {...}}), OpenAI's the inner
    object; vLLM and others put the message at the top."""
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]
    return body if isinstance(body, dict) else {}


# --- retries ----------------------------------------------------------------------------------


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _seconds(amount: float) -> str:
    return f"{amount:g} second{'' if amount == 1 else 's'}"


def _on_attempts(attempts: int) -> str:
    return f", on each of {attempts} attempts" if attempts > 1 else ""


def _fits(wait: float, deadline: float | None) -> bool:
    return deadline is None or time.monotonic() + wait < deadline


def hinted_wait(headers: Mapping[str, str]) -> float | None:
    if milliseconds := _number(headers.get("retry-after-ms")):
        return milliseconds / 1000
    retry_after = headers.get("retry-after")
    if retry_after:
        seconds = _number(retry_after)
        if seconds is not None:
            return seconds
        try:
            when = email.utils.parsedate_to_datetime(retry_after).timestamp()
        except (TypeError, ValueError):
            return None
        return max(when - time.time(), 0.0)
    # No retry-after: the reset time of whichever rate-limit window is spent.
    for window in ("tokens", "requests"):
        if headers.get(f"x-ratelimit-remaining-{window}") == "0":
            reset = _duration(headers.get(f"x-ratelimit-reset-{window}", ""))
            if reset is not None:
                return reset
    return None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _duration(text: str) -> float | None:
    """Reset times look like `7.66s`, `2m59.56s` or `120ms` (Groq, OpenAI)."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def _when(wait: float) -> str:
    """`in 8 seconds (after 18:32:05 UTC)`: a person can act on both halves."""
    at = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + wait))
    if wait < 90:
        seconds = max(round(wait), 1)
        amount = f"{seconds} second{'s' if seconds > 1 else ''}"
    elif wait < 90 * 60:
        amount = f"{round(wait / 60)} minutes"
    else:
        amount = f"{wait / 3600:.1f} hours"
    return f"in {amount} (after {at})"
