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

Whatever a server sends is bounded and checked, since a hostile or broken one may send anything
(docs/security.md): a reply holds at most MAX_REPLY_CHARS, a line of its event stream
MAX_LINE_BYTES and a body read whole MAX_BODY_BYTES; nothing compressed is taken; redirects are not
followed; a chunk not shaped as the protocol says is an LLMError, not a crash; what a server says in
an error is shortened, its control characters dropped, and the key and the base URL's secrets
never shown even when it echoes them.

A run's `interrupt` (set by its owner) ends a wait before a retry at once, raising Interrupted: a
stopped run is never asked for again after a rate limit or an outage; a reply streaming in stops
being read (and shown) at its next piece.
"""

import codecs
import contextlib
import dataclasses
import email.utils
import functools
import json
import logging
import math
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from agent.history import loop_note, undelimited
from agent.interrupt import Interrupt
from agent.llm.base import LLMError, Message, ModelTimedOut, Reply, ToolCall, ToolSpec, Usage
from agent.llm.watchdog import Watchdog

# The longest wait for a rate limit or an outage that Loop sits out inside a run; a longer one
# fails the run at once with the time to try again.
MAX_WAIT = 60.0

# What Loop holds of one reply, whatever the server sends (a hostile or broken one may send
# gigabytes inside a run's deadline): the characters of text, reasoning and tool calls (several
# times what a model writes in a turn), one line of an event stream, and a body read whole (a
# reply not streamed, an error, the model list), room for the longest reply JSON-escaped.
MAX_REPLY_CHARS = 4_000_000
MAX_LINE_BYTES = 32 * 2**20
MAX_BODY_BYTES = 32 * 2**20
# The most tool calls one reply may ask for: a run takes few per turn (its limits run out at
# max_tool_calls, and every call past them is still recorded as not run), a hostile reply millions.
MAX_TOOL_CALLS = 128

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
    base_url_setting: str  # the setting that says where the server is, for a redirect
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
        self.secrets = secrets_of(str(client.base_url), client.api_key)
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
        with self._secrets_kept():
            return self._chat(messages, tools, timeout)

    def _chat(
        self, messages: list[Message], tools: list[ToolSpec] | None, timeout: float | None
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
        """The models the server lists (GET /models) for this key; entries without a name
        are left out."""
        sdk = self.dialect.sdk
        try:
            with (
                self._secrets_kept(),
                self._own_errors(),
                self.client.models.with_streaming_response.list() as response,
            ):
                listing = self._json(response.http_response)
        except sdk.APIStatusError as error:
            raise LLMError(
                self._redacted(self._describe(error)), status=error.status_code
            ) from None
        except sdk.APIConnectionError as error:
            raise LLMError(self._redacted(self._unreachable(error))) from None
        models = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(models, list):
            raise LLMError(f"{_sentence(self.server)} sent a model list that is not one.")
        return sorted(
            {model["id"] for model in models if isinstance(model, dict) and _named(model)}
        )

    # --- what a server says, as Loop shows it ----------------------------------------------

    @contextlib.contextmanager
    def _secrets_kept(self) -> Iterator[None]:
        """Whatever a turn fails with is shown to the person and recorded: it never carries
        the key or the base URL's secrets, even when the server echoes them back."""
        try:
            yield
        except LLMError as error:
            error.args = (self._redacted(str(error)), *error.args[1:])
            raise

    def _redacted(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        return text

    def _said(self, text: str) -> str:
        """What the server said, fit to be shown: short, without control characters (which a
        terminal would act on), without the key."""
        return self._redacted(_clipped(text))

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
                retried.append(self._redacted(self._describe(error, limit, wait)))
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
        with (
            self._own_errors(),
            self.client.chat.completions.with_streaming_response.create(
                model=self.model, messages=[], timeout=limit, extra_body=body, **stream
            ) as response,
        ):
            http_response = response.http_response
            watchdog.watch(http_response)
            if not stream:
                self._check_content_type(http_response, "json")
                return self._reply(self._json(http_response))
            if "json" in http_response.headers.get("content-type", ""):
                # A server that does not stream sent the whole reply: one chunk of it all.
                return self._read(pieces, [self._whole_chunk(http_response)])
            self._check_content_type(http_response, "text/event-stream")
            return self._read(pieces, self._events(EventStream(http_response)))

    @contextlib.contextmanager
    def _own_errors(self) -> Iterator[None]:
        """What the response guard refused (a redirect, a compressed or oversized body) is
        raised inside the SDK, which wraps it as a connection error: it is raised as itself."""
        try:
            yield
        except self.dialect.sdk.APIConnectionError as error:
            if isinstance(error.__cause__, LLMError):
                raise error.__cause__ from None
            raise

    def _read(
        self,
        pieces: "ReplyPieces",
        chunks: Iterable[dict[str, Any]],
        what: str = "chat completion chunk",
    ) -> Reply:
        try:
            return pieces.read(chunks, self.transient_errors)
        except ReplyTooLong:
            raise LLMError(
                f"{_sentence(self.server_s)} reply came to more than {MAX_REPLY_CHARS:,} "
                "characters, far more than a model writes in a turn; Loop read no more of it. "
                "Is the model stuck repeating itself?"
            ) from None
        except TooManyCalls:
            raise LLMError(
                f"{_sentence(self.server_s)} reply asked for more than {MAX_TOOL_CALLS} tool "
                "calls at once; Loop runs none of them."
            ) from None
        except NotAChunk as error:
            raise LLMError(
                f"{_sentence(self.server)} sent a reply that is not a {what}: "
                f"{self._said(str(error))}"
            ) from None

    def _check_content_type(self, response: Any, expected: str) -> None:
        """A 200 that is not a chat completion (a web page, a proxy's sign-in) is a wrong base
        URL, said as such, not a crash or a retry."""
        content_type = response.headers.get("content-type", "")
        if expected in content_type:
            return
        text = _head_of(response, 200)
        raise LLMError(
            f"{_sentence(self.server)} answered with {content_type or 'no content type'}, not a "
            f"chat completion: {self._said(repr(text))}. Is its base URL right? An "
            "OpenAI-compatible one usually ends in /v1."
        )

    def _json(self, response: Any) -> Any:
        """A body read whole (at most MAX_BODY_BYTES: the response guard sees to it)."""
        try:
            return json.loads(response.read())
        except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
            raise LLMError(f"{_sentence(self.server)} sent a reply that is not JSON.") from None

    def _whole_chunk(self, response: Any) -> dict[str, Any]:
        return whole_as_chunk(self._json(response))

    def _events(self, stream: Any) -> Iterator[dict[str, Any]]:
        """The data of each server-sent event of a streamed reply (`stream.iter_lines()`, an
        EventStream's), up to `[DONE]`; an event that is an error (the server gave up mid-reply)
        ends the turn with an LLMError."""
        try:
            for data in sse_data(stream.iter_lines()):
                if data.startswith("[DONE]"):
                    return
                yield self._chunk(data)
        except LineTooLong:
            raise LLMError(
                f"{_sentence(self.server)} sent a line of more than {MAX_LINE_BYTES // 2**20} "
                "MiB in its event stream; Loop read no more of it."
            ) from None

    def _chunk(self, data: str) -> dict[str, Any]:
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
            raise LLMError(
                f"{_sentence(self.server)} sent a stream that is not JSON: "
                f"{self._said(repr(data[:200]))}"
            ) from None
        if not isinstance(chunk, dict):
            raise LLMError(
                f"{_sentence(self.server)} sent a reply that is not a chat completion chunk: "
                f"{self._said(repr(data[:200]))}"
            )
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else None
            if not isinstance(message, str) or not message:
                message = "An error occurred during streaming"
            raise LLMError(
                f"{_sentence(self.server_s)} stream ended with an error: {self._said(message)}"
            )
        return chunk

    def _reply(self, completion: Any) -> Reply:
        """A whole completion, read as the one chunk of a stream that brought it all, so it is
        checked and bounded as a streamed one is."""
        if not isinstance(completion, dict) or not completion.get("choices"):
            raise LLMError(f"{_sentence(self.server)} returned no choices.")
        pieces = ReplyPieces(None, whole=True)
        return self._read(pieces, [whole_as_chunk(completion)], "chat completion")

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
        reason = _clipped(str(details.get("message") or "the reply was malformed"))
        generation = storable(str(details.get("failed_generation") or "")[:2000])
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


# --- the HTTP client ---------------------------------------------------------------------------


def bounded_http_client(dialect: Dialect, server: str) -> Any:
    """The HTTP client for a dialect's SDK, with what the SDK's own lacks against a hostile or
    broken server: redirects to another origin are not followed (the SDK follows them, and a
    307 would carry the conversation, or a 302 fetch a URL on the worker's network such as a
    cloud's metadata service, whose answer the error would show), nothing compressed is asked
    for or taken (a small gzip body can inflate to gigabytes), and a body read whole is cut at
    MAX_BODY_BYTES."""
    guard = ResponseGuard(dialect, server)
    return dialect.sdk.DefaultHttpxClient(
        follow_redirects=True,  # within the server's own origin: the guard refuses the others
        headers={"Accept-Encoding": "identity"},
        event_hooks={"response": [guard]},
    )


class ResponseGuard:
    """httpx's response hook: runs once a response's headers are in, before the SDK reads it.
    What it refuses is an LLMError (the SDK wraps it; `_own_errors` unwraps it)."""

    def __init__(self, dialect: Dialect, server: str) -> None:
        self.dialect = dialect
        self.server = server
        self.body_class = _bounded_body_class(dialect.http)

    def __call__(self, response: Any) -> None:
        if response.has_redirect_location and not self._same_origin(response):
            response.close()
            location = scrubbed_url(response.headers.get("location", ""))
            raise LLMError(
                f"{_sentence(self.server)} answered {response.status_code} with a redirect to "
                f"{_clipped(location)}; Loop follows a model server's redirects only within its "
                "own scheme, host and port. Set "
                f"{self.dialect.base_url_setting} to the URL the server means.",
                status=response.status_code,
            )
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in {"", "identity"}:
            response.close()
            raise LLMError(
                f"{_sentence(self.server)} sent a compressed reply ({_clipped(encoding)}) it was "
                "not asked for; Loop does not inflate one."
            )
        if "text/event-stream" not in response.headers.get("content-type", ""):
            # A stream is bounded as it is read, line by line and reply by reply.
            response.stream = self.body_class(response.stream, self.server)

    @staticmethod
    def _same_origin(response: Any) -> bool:
        """Whether a redirect stays on the server's scheme, host and port."""
        try:
            target = response.url.join(response.headers["location"])
        except Exception:  # a Location httpx cannot read is not followed
            return False
        return bool(target.scheme == response.url.scheme and target.netloc == response.url.netloc)


@functools.cache
def _bounded_body_class(http: ModuleType) -> type:
    """The bounded body for an HTTP library (httpx or httpx2): a stream of its own kind."""

    class BoundedBody(http.SyncByteStream):  # type: ignore[name-defined,misc]
        """A response body that ends the turn once it passes MAX_BODY_BYTES."""

        def __init__(self, stream: Any, server: str) -> None:
            self.stream = stream
            self.server = server

        def __iter__(self) -> Iterator[bytes]:
            read = 0
            for piece in self.stream:
                read += len(piece)
                if read > MAX_BODY_BYTES:
                    raise LLMError(
                        f"{_sentence(self.server)} sent more than {MAX_BODY_BYTES // 2**20} MiB "
                        "in one answer; Loop read no more of it."
                    )
                yield piece

        def close(self) -> None:
            self.stream.close()

    return BoundedBody


def secrets_of(base_url: str, api_key: str) -> tuple[str, ...]:
    """What a message must never show: the key, and the base URL's password and query values
    (as given and as sent, percent-encoded). Short ones are left: they would blank out words."""
    parts = urlsplit(base_url)
    found = [api_key, parts.password or ""]
    found += [value for _, value in parse_qsl(parts.query)]
    found += [quote(value, safe="") for value in found]
    return tuple(sorted({secret for secret in found if len(secret) >= 6}, key=len, reverse=True))


def scrubbed_url(url: str) -> str:
    """A URL as a message shows it: without a user, password, query or fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "a URL Loop cannot read"
    return urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))


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


def usage_of(usage: Any) -> Usage:
    # Reasoning tokens are counted in completion_tokens, as OpenAI does.
    if not usage:
        return Usage()
    return Usage(_count(_field(usage, "prompt_tokens")), _count(_field(usage, "completion_tokens")))


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
    """A streamed response's lines, read with `event_lines` (bounded) rather than httpx's own
    iter_lines (which holds a line however long it grows)."""

    def __init__(self, response: Any) -> None:
        self.response = response

    def iter_lines(self) -> Iterator[str]:
        return event_lines(self.response.iter_bytes())


class LineTooLong(Exception):
    """A line of an event stream passed MAX_LINE_BYTES before it ended."""


def event_lines(pieces: Iterable[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The lines of an event stream as its bytes come in, split at CRLF, LF or CR as the
    standard says, UTF-8 decoded. Unlike httpx's iter_lines, a line is not held past `limit`
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
        """One chunk, as the JSON the server sent; NotAChunk when it is not shaped as one."""
        groq_part = _part(chunk, "x_groq")  # Groq's own: its usage, or its error
        if error := groq_part.get("error"):
            raise LLMError(f"Groq's stream ended with an error: {_clipped(str(error))}")
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


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """Text as PostgreSQL can keep it (in a text column and in JSON): a NUL or a lone surrogate
    (both a JSON escape away for a server, `\\u0000`, `\\ud800`) made U+FFFD. Either would
    otherwise fail the run's record on an internal error, its answer lost."""
    return _UNSTORABLE.sub("\ufffd", text) if _UNSTORABLE.search(text) else text


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


# --- a model's mistakes and a server's limits -------------------------------------------------


def tool_names(tools: list[ToolSpec]) -> str:
    return ", ".join(spec["function"]["name"] for spec in tools)


def _unwrapped(text: str, opening: str, closing: str, *, closed: bool) -> str | None:
    """`text` without the `opening` it starts with and the `closing` it ends with (which may be
    missing unless `closed`), stripped; None if it is not so wrapped. Plain string work: a
    regular expression for it backtracked without end on a reply of a few thousand spaces."""
    if not text.startswith(opening):
        return None
    inner = text[len(opening) :]
    if inner.endswith(closing):
        inner = inner[: -len(closing)]
    elif closed:
        return None
    return inner.strip()


def _unfenced(text: str) -> str:
    """The text in a ```json fence, or in <tool_call> tags (the closing one may be missing)."""
    if len(text) >= 6 and (fenced := _unwrapped(text, "```", "```", closed=True)) is not None:
        text = fenced.removeprefix("json").strip()
    tagged = _unwrapped(text, "<tool_call>", "</tool_call>", closed=False)
    return text if tagged is None else tagged


def text_tool_call(reply: Reply, tools: list[ToolSpec] | None) -> str | None:
    """The tool a reply with no tool calls wrote a call to as JSON text, or None: `{"name": ...,
    "arguments": {...}}` (or "parameters"), bare, in a ```json fence or in <tool_call> tags."""
    if reply.tool_calls or not tools:
        return None
    try:
        written = json.loads(_unfenced(reply.text.strip()))
    except (ValueError, RecursionError):
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
    """What the server said in an error response, shortened."""
    return _clipped(str(_error_body(error).get("message") or error.message))


# What is kept of what a server says (an error's message, a page where a reply should be).
MAX_SAID_CHARS = 500
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _clipped(text: str) -> str:
    """Text a server sent, as Loop shows and records it: at most MAX_SAID_CHARS, its control
    characters (a terminal's escapes) written as `?`."""
    text = storable(_CONTROL.sub("?", text))
    if len(text) > MAX_SAID_CHARS:
        return f"{text[:MAX_SAID_CHARS]}… ({len(text) - MAX_SAID_CHARS:,} more characters)"
    return text


def _named(model: dict[str, Any]) -> bool:
    """A model list's entry with a name one could set: `manage.py modelcheck` prints it in the
    operator's terminal, so never a control character (a terminal's escape) or a page of text."""
    name = model.get("id")
    return isinstance(name, str) and 0 < len(name) <= 256 and not _CONTROL.search(name)


def _head_of(response: Any, size: int) -> str:
    """The start of a body, reading no more of it than that."""
    head = b""
    for piece in response.iter_bytes():
        head += piece
        if len(head) >= size:
            break
    return head[:size].decode("utf-8", "replace")


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


# The longest wait a server's hint is taken at: a longer one (or a nonsense one, a year or
# `1e308`) is said as this, never handed to the clock, which cannot show it.
MAX_HINT = 7 * 24 * 3600.0


def hinted_wait(headers: Mapping[str, str]) -> float | None:
    """How long the server says to wait, if it says so sensibly (a number of seconds or
    milliseconds, a date, a reset time); at most MAX_HINT."""
    hinted = _hint(headers)
    return None if hinted is None else min(hinted, MAX_HINT)


def _hint(headers: Mapping[str, str]) -> float | None:
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
    """A count of seconds a server sent: finite and not negative, or none (`nan`, `-5`)."""
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


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
