"""The chat-completions shape with tool calling, for Groq and any OpenAI-compatible server.

One implementation serves every server that speaks it, over one HTTP client (plain `httpx2`, no
vendor SDK: Loop builds the request and reads the raw reply itself, so an SDK would only add its
import time, its types and a second error hierarchy to unwrap): building the request, assembling a
streamed reply, reading usage, mapping errors and retrying. What differs between servers (Groq's
paths, reasoning fields and error codes, a server's quirks) is a `Dialect`, a small table each
provider module fills in (`agent/llm/groq.py`, `agent/llm/openai_compat.py`). This module is the
client: a turn, its attempts and retries, and what to say when one fails. Its parts: `replies.py`
reads a reply (streamed or whole), `mistakes.py` knows a model's mistakes and a server's limits,
`waits.py` the server's hints of how long to wait, and `said.py` what of a server's words may be
shown; the HTTP client is netguard's bounded policy (`netguard/bounded.py`).

Retries live in this layer, because only this layer knows the run's deadline: a 429, 408/409,
5xx, timeout, a connection that drops (before the reply or while it streams in) and a stream that
ends before its last chunk are retried after the server's `retry-after` (or a short backoff) only
while the wait still fits in the time the run has left and in `MAX_WAIT`. Whatever is left after
that is an LLMError that ends the run as failed, saying what happened and, for a rate limit, when
to try again. A server that refuses the connection is down: that fails at once, naming its URL.

Each turn is bounded by the time the run has left as a whole, not per read: the HTTP timeout is
capped to it, and a watchdog cuts a reply still coming in when it runs out (ModelTimedOut: the run
halts on its deadline). A reply stopped at the model's output limit (finish reason `length`) is
returned marked as cut.

A reply the model got wrong is a ModelMistake carrying the note that puts it right: a 400 about what
the model generated (Groq's `tool_use_failed`, RejectedGeneration), or a tool call written as JSON
text in the answer instead of being called (ToolCallAsText). The loop feeds the note back
(core.loop.ask_correcting), where the run's log shows it. A model that does not exist fails
at once naming the setting to change and the check to run; so does a server that cannot call
tools.

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
from typing import Any

import httpx2

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
from agent.llm.said import Refused, clipped, listable_name, secrets_of, sentence
from agent.llm.waits import MAX_WAIT, fits, hinted_wait, try_again_at
from agent.llm.watchdog import Watchdog
from core.interrupt import Interrupt
from core.llm import (
    LLMError,
    Message,
    ModelMistake,
    ModelTimedOut,
    RejectedGeneration,
    Reply,
    ToolCallAsText,
    ToolSpec,
)
from core.text import storable, undelimited
from netguard.bounded import bounded_http_client


def _no_rejected_reply(error: "ServerAnswered") -> bool:
    return False


def _no_reasoning_options(model: str, effort: str) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Dialect:
    """What one provider's chat-completions service does its own way; everything else is shared."""

    provider: str  # what a run records as its provider, and the model names' prefix
    model_setting: str  # the setting that names the model, for a model that is not there
    check_command: str  # the `manage.py` command that checks the server and the model
    base_url_setting: str  # the setting that says where the server is, for a redirect
    # The paths of the service under the base URL (relative: they are joined to its path).
    chat_path: str = "chat/completions"
    models_path: str = "models"
    # Ask for usage in streamed replies (stream_options.include_usage): OpenAI's API and most
    # servers send none otherwise. Groq sends it anyway, in `x_groq`.
    asks_stream_usage: bool = False
    # The 400s that are about what the model generated, to be fed back to it once.
    rejected_reply: Callable[["ServerAnswered"], bool] = _no_rejected_reply
    # The request options for a model (reasoning parameters), given the configured effort.
    reasoning_options: Callable[[str, str], dict[str, Any]] = _no_reasoning_options


class ServerAnswered(Exception):
    """The server answered with an error status; its body is read (as JSON when it is JSON).

    `message` is what the server said, as a person would want it: the body's own message when it
    has one (OpenAI's `{"error": {"message": ...}}`, or at its top as vLLM has it), else the body
    itself or, for an empty one, the status."""

    def __init__(self, response: httpx2.Response) -> None:
        self.status_code = response.status_code
        self.headers = response.headers
        self.path = response.request.url.path
        text = response.text.strip()
        self.body: Any = text
        try:
            self.body = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
            fallback = text or f"Error code: {self.status_code}"
        else:
            fallback = f"Error code: {self.status_code} - {self.body}"
        said = error_body(self).get("message")
        self.message = str(said) if said else fallback
        super().__init__(self.message)


class BadRequest(ServerAnswered):
    """A 400: about what the model generated, an option the server does not take, or the
    request itself; `chat` judges which."""


class NoReply(Exception):
    """The request failed before the reply's headers came in: a connection never made (the
    transport's ConnectError, as its cause), or one that broke or timed out on the way."""


# Servers that answered 400 to stream_options: asked without it from then on, in this process.
_REFUSE_STREAM_OPTIONS: set[str] = set()

# What a request says it accepts: a chat completion is JSON (or its event stream, which servers
# send when `stream` is asked for, whatever this says).
_ACCEPT = "application/json"


class ChatCompletionsLLM:
    """One model on one chat-completions server. `server` names it in messages ("Groq", or "the
    model server at <url>"), `server_s` in the possessive."""

    dialect: Dialect
    provider: str

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str,
        server: str,
        server_s: str,
        deltas: Callable[[str], None] | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        reasoning_effort: str = "",
    ) -> None:
        self.provider = self.dialect.provider
        self.model = model
        self.api_key = api_key
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
        self.http = bounded_http_client(
            base_url,
            headers={"Authorization": f"Bearer {api_key}", "Accept": _ACCEPT},
            timeout=timeout,
            refusals=Refused(server, self.dialect.base_url_setting),
        )
        self.secrets = secrets_of(str(self.http.base_url), api_key)
        self.transient_errors: tuple[type[Exception], ...] = (
            ServerAnswered,
            NoReply,
            httpx2.TransportError,
            StreamCut,
        )

    @property
    def base_url(self) -> str:
        return str(self.http.base_url)

    def close(self) -> None:
        """Its connections closed (a run's client is otherwise closed when collected)."""
        self.http.close()

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
        """One reply, or the mistake the model made in it (a ModelMistake, for the loop to feed
        back)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        retried: list[str] = []
        try:
            reply = self._send(messages, tools, deadline, retried)
        except BadRequest as error:
            described = self._describe(error)
            if not self.dialect.rejected_reply(error):
                raise LLMError(described, status=error.status_code) from None
            raise RejectedGeneration(
                described,
                note=self._rejected_reply_note(error, tools),
                again=f"{described} again, after the first was fed back",
                status=error.status_code,
                retried=tuple(retried),
            ) from None
        name = text_tool_call(reply, tools)
        if name is not None:
            raise self._tool_call_as_text(name, tuple(retried))
        return dataclasses.replace(reply, retried=tuple(retried))

    def _tool_call_as_text(self, name: str, retried: tuple[str, ...]) -> ToolCallAsText:
        """A reply that wrote a tool call as JSON text instead of calling it: the page hears that
        the model is asked again (the loop asks, once; a second in a row fails the run saying
        what to do about the server)."""
        if self.deltas is not None:
            self.deltas(f"\n\n[{self.model} wrote a tool call as text; Loop asked it again.]\n\n")
        wrote = f"{self.model} on {self.server} wrote its tool call to {name} as text"
        return ToolCallAsText(
            f"{wrote} instead of calling it.",
            note={"role": "user", "content": TEXT_TOOL_CALL_NOTE.format(name=name)},
            again=(
                f"{wrote} instead of calling it, twice, the second time after being told: "
                f"{SERVER_FLAGS_HINT}."
            ),
            retried=retried,
        )

    def available_models(self) -> list[str]:
        """The models the server lists (GET /models) for this key; entries without a name
        are left out."""
        request = self.http.build_request("GET", self.dialect.models_path)
        try:
            with self._secrets_kept(), self._answer(request) as response:
                listing = self._json(response)
        except ServerAnswered as error:
            raise LLMError(
                self._redacted(self._describe(error)), status=error.status_code
            ) from None
        except (NoReply, httpx2.TransportError) as error:
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
            if isinstance(error, ModelMistake):
                error.again = self._redacted(error.again)
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
            except BadRequest as error:
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
            self._sit_out(wait)
            attempt += 1

    def _refused_stream_options(self, error: ServerAnswered, options: dict[str, Any]) -> bool:
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
        pieces: ReplyPieces,
    ) -> Reply:
        """One request. The response is handed to the watchdog as soon as its headers are in,
        so the body, streamed or not, is read within the deadline. A reply is read as plain
        JSON, a streamed one from its server-sent events, with no typed object made of it."""
        body = {"messages": messages, "model": self.model, **options}
        request = self.http.build_request(
            "POST", self.dialect.chat_path, json=body, timeout=httpx2.Timeout(limit)
        )
        with self._answer(request) as response:
            watchdog.watch(response)
            if not options.get("stream"):
                self._check_content_type(response, "json")
                return self._reply(self._json(response))
            if "json" in response.headers.get("content-type", ""):
                # A server that does not stream sent the whole reply: one chunk of it all.
                return self._read(pieces, [self._whole_chunk(response)])
            self._check_content_type(response, "text/event-stream")
            return self._read(pieces, self._events(EventStream(response)))

    @contextlib.contextmanager
    def _answer(self, request: httpx2.Request) -> Iterator[httpx2.Response]:
        """The response to `request` once its headers are in, its body still to read; an error
        status is raised as ServerAnswered (its body read), a request that got no response as
        NoReply. What the response guard refuses (a redirect off the server, a compressed or
        oversized body) is raised as itself, an LLMError (agent.llm.said.Refused words it)."""
        try:
            response = self.http.send(request, stream=True)
        except httpx2.RequestError as error:  # a transport's error, or too many redirects
            raise NoReply(str(error)) from error
        try:
            if not response.is_success:
                response.read()
                raise (BadRequest if response.status_code == 400 else ServerAnswered)(response)
            yield response
        finally:
            response.close()

    def _read(
        self,
        pieces: ReplyPieces,
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

    def _check_content_type(self, response: httpx2.Response, expected: str) -> None:
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

    def _json(self, response: httpx2.Response) -> Any:
        """A body read whole (at most MAX_BODY_BYTES: the response guard sees to it)."""
        try:
            return json.loads(response.read())
        except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
            raise LLMError(f"{sentence(self.server)} sent a reply that is not JSON.") from None

    def _whole_chunk(self, response: httpx2.Response) -> dict[str, Any]:
        return whole_as_chunk(self._json(response))

    def _events(self, stream: EventStream) -> Iterator[dict[str, Any]]:
        """The data of each server-sent event of a streamed reply, up to `[DONE]`; an event that
        is an error (the server gave up mid-reply) ends the turn with an LLMError."""
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
        return _timed_out(error) and limit < self.timeout

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
        if _unreached(error):
            return False  # nothing listens there: the server is down, or the URL is wrong
        if not isinstance(error, ServerAnswered):  # a timeout or a dropped connection
            return True
        if cannot_call_tools(_status_message(error)):
            return False  # llama.cpp says it with a 500: asking again cannot help
        return error.status_code in {408, 409, 429} or error.status_code >= 500

    def _retry_wait(self, error: Exception, attempt: int) -> float:
        """The server's own hint when it gives one, else a short exponential backoff."""
        if isinstance(error, ServerAnswered):
            hinted = hinted_wait(error.headers)
            if hinted is not None:
                return hinted
        return min(0.5 * 2.0**attempt, 8.0)

    def _attempt_limit(self, deadline: float | None) -> float:
        if deadline is None:
            return self.timeout
        return max(min(self.timeout, deadline - time.monotonic()), 0.001)

    # --- saying what went wrong ---------------------------------------------------------------

    def _describe(
        self, error: Exception, limit: float = 0.0, wait: float = 0.0, attempts: int = 1
    ) -> str:
        server = sentence(self.server)
        if _timed_out(error):
            return f"{server} did not answer within {_seconds(limit)}{_on_attempts(attempts)}."
        if isinstance(error, StreamCut):
            return (
                f"{server} cut its reply short: the stream ended before its last chunk"
                f"{_on_attempts(attempts)}."
            )
        if broken := _broken_connection(error):
            when = "before" if isinstance(error, NoReply) else "while"
            return (
                f"The connection to {self.server} broke {when} its reply came in"
                f"{_on_attempts(attempts)}: {broken or type(broken).__name__}"
            )
        if not isinstance(error, ServerAnswered):
            return self._unreachable(error)
        message = _status_message(error)
        if cannot_call_tools(message):
            return self._cannot_call_tools(message)
        if self._model_missing(error, message):
            return self._missing_model(message)
        if error.status_code == 404:
            return (
                f"{server} answered 404 for {error.path}: {message} Is its base "
                "URL right? An OpenAI-compatible one usually ends in /v1."
            )
        if error.status_code == 429:
            owner = sentence(self.server_s)
            return f"{owner} rate limit was reached: {message} Try again {try_again_at(wait)}."
        return f"{server} answered {error.status_code}: {message}"

    def _unreachable(self, error: Exception) -> str:
        return f"Could not reach {self.server}: {unreachable_detail(error)}"

    def _model_missing(self, error: ServerAnswered, message: str) -> bool:
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

    def _rejected_reply_note(self, error: ServerAnswered, tools: list[ToolSpec] | None) -> Message:
        """The note that feeds a rejected reply back to the model."""
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
    """Why a connection failed: the transport's error under NoReply."""
    cause = error.__cause__
    return str(cause or error) if not isinstance(cause, type(error)) else str(error)


def _timed_out(error: Exception) -> bool:
    """A timeout, before the reply's headers (under NoReply) or while it was read."""
    cause = error.__cause__ if isinstance(error, NoReply) else error
    return isinstance(cause, httpx2.TimeoutException)


def _unreached(error: Exception) -> bool:
    """A connection never made (refused, or no such host), not one that broke or timed out."""
    if not isinstance(error, NoReply) or _timed_out(error):
        return False
    return _broken_connection(error) is None


def _broken_connection(error: Exception) -> Exception | None:
    """The transport's error of a connection that broke (a reset, a body cut mid-way), as
    raised or under NoReply; None for one that was never made."""
    cause = error.__cause__ if isinstance(error, NoReply) else error
    if isinstance(cause, httpx2.TransportError) and not isinstance(cause, httpx2.ConnectError):
        return cause
    return None


def _status_message(error: ServerAnswered) -> str:
    """What the server said in an error response, shortened."""
    return clipped(error.message)


def _head_of(response: httpx2.Response, size: int) -> str:
    """The start of a body, reading no more of it than that."""
    head = b""
    for piece in response.iter_bytes():
        head += piece
        if len(head) >= size:
            break
    return head[:size].decode("utf-8", "replace")


def error_body(error: ServerAnswered) -> dict[str, Any]:
    """The error's details: OpenAI and Groq put them in {"error": {...}}; vLLM and others put
    the message at the top."""
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]  # type: ignore[no-any-return]
    return body if isinstance(body, dict) else {}


def _seconds(amount: float) -> str:
    return f"{amount:g} second{'' if amount == 1 else 's'}"


def _on_attempts(attempts: int) -> str:
    return f", on each of {attempts} attempts" if attempts > 1 else ""
