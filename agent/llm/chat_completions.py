"""The chat-completions shape with tool calling, for Groq and any OpenAI-compatible server.

One implementation serves every server that speaks it: building the request, assembling a streamed
reply, reading usage, mapping errors and retrying. What differs between servers (the SDK, Groq's
reasoning fields and error codes, a server's quirks) is a `Dialect`, a small table each provider
module fills in (`agent/llm/groq.py`, `agent/llm/openai_compat.py`). This module is the client: a
turn, its attempts and retries, and what to say when one fails. Its parts: `replies.py` reads a
reply (streamed or whole), `mistakes.py` knows a model's mistakes and a server's limits, `waits.py`
the server's hints of how long to wait, `http_guard.py` the HTTP client under both SDKs, and
`said.py` what of a server's words may be shown.

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

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agent.core.history import undelimited
from agent.core.interrupt import Interrupt
from agent.core.llm import LLMError, Message, ModelTimedOut, Reply, ToolSpec
from agent.llm.mistakes import (
    REJECTED_REPLY_NOTE,
    SERVER_FLAGS_HINT,
    TEXT_TOOL_CALL_NOTE,
    cannot_call_tools,
    says_missing,
    text_tool_call,
    tool_names,
)
from agent.llm.replies import (
    MAX_LINE_BYTES,
    MAX_REPLY_CHARS,
    MAX_TOOL_CALLS,
    EventStream,
    LineTooLong,
    NotAChunk,
    ReplyPieces,
    ReplyTooLong,
    StreamCut,
    TooManyCalls,
    sse_data,
    whole_as_chunk,
)
from agent.llm.said import clipped, listable_name, secrets_of, sentence, storable
from agent.llm.waits import MAX_WAIT, fits, hinted_wait, try_again_at
from agent.llm.watchdog import Watchdog


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
        # The interrupt of the turn being asked (chat's argument): waits to retry wake on it.
        self._interrupt: Interrupt | None = None
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
        return f"\n\n[{sentence(self.server_s)} reply broke off; Loop asked for it again.]\n\n"

    # --- a turn -------------------------------------------------------------------------------

    def chat(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        *,
        timeout: float | None = None,
        interrupt: Interrupt | None = None,
    ) -> Reply:
        self._interrupt = interrupt
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
            raise LLMError(f"{sentence(self.server)} sent a model list that is not one.")
        return sorted(
            {model["id"] for model in models if isinstance(model, dict) and listable_name(model)}
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
        return self._redacted(clipped(text))

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
            pieces = ReplyPieces(self.deltas, self._interrupt)
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
                    sentence(self.server),
                    attempt + 1,
                    retried[-1],
                )
                if pieces.text and self.deltas is not None:
                    self.deltas(self.retry_note)
            except sdk.APIError as error:  # a reply the SDK could not make sense of
                raise LLMError(f"{sentence(self.server_s)} reply made no sense: {error}") from None
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
        if self._interrupt is None:
            time.sleep(wait)
        elif self._interrupt.wait(wait):
            self._interrupt.raise_if_set()

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
                f"{sentence(self.server)} did not finish its reply within the {limit:.1f} "
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
                f"{sentence(self.server_s)} reply came to more than {MAX_REPLY_CHARS:,} "
                "characters, far more than a model writes in a turn; Loop read no more of it. "
                "Is the model stuck repeating itself?"
            ) from None
        except TooManyCalls:
            raise LLMError(
                f"{sentence(self.server_s)} reply asked for more than {MAX_TOOL_CALLS} tool "
                "calls at once; Loop runs none of them."
            ) from None
        except NotAChunk as error:
            raise LLMError(
                f"{sentence(self.server)} sent a reply that is not a {what}: "
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
            f"{sentence(self.server)} answered with {content_type or 'no content type'}, not a "
            f"chat completion: {self._said(repr(text))}. Is its base URL right? An "
            "OpenAI-compatible one usually ends in /v1."
        )

    def _json(self, response: Any) -> Any:
        """A body read whole (at most MAX_BODY_BYTES: the response guard sees to it)."""
        try:
            return json.loads(response.read())
        except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
            raise LLMError(f"{sentence(self.server)} sent a reply that is not JSON.") from None

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
                f"{sentence(self.server)} sent a line of more than {MAX_LINE_BYTES // 2**20} "
                "MiB in its event stream; Loop read no more of it."
            ) from None

    def _chunk(self, data: str) -> dict[str, Any]:
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
            raise LLMError(
                f"{sentence(self.server)} sent a stream that is not JSON: "
                f"{self._said(repr(data[:200]))}"
            ) from None
        if not isinstance(chunk, dict):
            raise LLMError(
                f"{sentence(self.server)} sent a reply that is not a chat completion chunk: "
                f"{self._said(repr(data[:200]))}"
            )
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else None
            if not isinstance(message, str) or not message:
                message = "An error occurred during streaming"
            raise LLMError(
                f"{sentence(self.server_s)} stream ended with an error: {self._said(message)}"
            )
        return chunk

    def _reply(self, completion: Any) -> Reply:
        """A whole completion, read as the one chunk of a stream that brought it all, so it is
        checked and bounded as a streamed one is."""
        if not isinstance(completion, dict) or not completion.get("choices"):
            raise LLMError(f"{sentence(self.server)} returned no choices.")
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
            and fits(wait, deadline)
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
        server = sentence(self.server)
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
            owner = sentence(self.server_s)
            return f"{owner} rate limit was reached: {message} Try again {try_again_at(wait)}."
        return f"{server} answered {error.status_code}: {message}"

    def _unreachable(self, error: Exception) -> str:
        return f"Could not reach {self.server}: {unreachable_detail(error)}"

    def _model_missing(self, error: Any, message: str) -> bool:
        code = error_body(error).get("code")
        if code in {"model_not_found", "model_decommissioned"}:
            return True
        named = self.model.lower() in message.lower() or "model" in message.lower()
        return error.status_code in {400, 404} and named and says_missing(message)

    def _missing_model(self, message: str) -> str:
        return (
            f"{sentence(self.server)} has no model {self.model!r} ({message}). Set "
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
        details = error_body(error)
        reason = clipped(str(details.get("message") or "the reply was malformed"))
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


def _status_message(error: Any) -> str:
    """What the server said in an error response, shortened."""
    return clipped(str(error_body(error).get("message") or error.message))


def _head_of(response: Any, size: int) -> str:
    """The start of a body, reading no more of it than that."""
    head = b""
    for piece in response.iter_bytes():
        head += piece
        if len(head) >= size:
            break
    return head[:size].decode("utf-8", "replace")


def error_body(error: Any) -> dict[str, Any]:
    """The error's details: Groq's SDK keeps the whole body ({"error": {...}}), OpenAI's the inner
    object; vLLM and others put the message at the top."""
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]
    return body if isinstance(body, dict) else {}


def _seconds(amount: float) -> str:
    return f"{amount:g} second{'' if amount == 1 else 's'}"


def _on_attempts(attempts: int) -> str:
    return f", on each of {attempts} attempts" if attempts > 1 else ""
