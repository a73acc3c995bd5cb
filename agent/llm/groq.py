"""Groq's chat completions with tool calling, through the official `groq` SDK.

Retries live in one layer only, this one (the SDK's own are switched off), because only this layer
knows the run's deadline: a 429, 408/409, 5xx, timeout, a connection that fails or drops (before
the reply or while it streams in) and a stream that ends before its last chunk are retried after
Groq's `retry-after` (or a short backoff) only while the wait still fits in the time the run has
left and in `MAX_WAIT`. Whatever is left after that is an LLMError that ends the run as failed,
saying what happened and, for a rate limit, when to try again.

Each turn is bounded by the time the run has left as a whole, not per read: the SDK's timeout is
capped to it, and a watchdog cuts a reply still coming in when it runs out (ModelTimedOut: the run
halts on its deadline). A reply Groq stopped at the model's output limit (finish reason `length`)
is returned marked as cut.

A 400 the model itself caused (Groq's `tool_use_failed`: a malformed call, a call to a tool that is
not in the request, a tool call when tools are off) is fed back to the model once as an error it can
correct; a second one in a row ends the run. A model that does not exist for the key fails at once.

A run's `interrupt` (set by its owner) ends a wait before a retry at once, raising
Interrupted: a stopped run is never asked for again after a rate limit or an outage; a reply
streaming in stops being read (and shown) at its next piece.
"""

import dataclasses
import email.utils
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import groq
import httpx

from agent.history import loop_note, undelimited
from agent.interrupt import Interrupt
from agent.llm.base import LLMError, Message, ModelTimedOut, Reply, ToolCall, ToolSpec, Usage
from agent.llm.watchdog import Watchdog

logger = logging.getLogger(__name__)

# Models known to call tools well on Groq today, the first being Loop's default. A model that no
# longer exists is answered by naming one of these.
TOOL_CALLING_MODELS = ("openai/gpt-oss-120b", "openai/gpt-oss-20b", "qwen/qwen3.6-27b")

REASONING_EFFORTS = ("low", "medium", "high")

# The longest wait for a rate limit or an outage that Loop sits out inside a run; a longer one
# fails the run at once with the time to try again.
MAX_WAIT = 60.0

# Streamed to the page when a reply broke off and is asked for again: the pieces already shown stay
# until the stored reply replaces them, so the page says why new text follows them.
RETRY_NOTE = "\n\n[Groq's reply broke off; Loop asked for it again.]\n\n"

REJECTED_REPLY_NOTE = loop_note(
    "Your last reply was rejected by the model provider and nothing in it ran: {reason} {hint}"
)


@dataclass(frozen=True)
class ReasoningModel:
    """What a family of Groq reasoning models takes in a request."""

    efforts: frozenset[str]
    # True: ask for reasoning_format=parsed, or the reasoning lands in the answer as <think> text.
    # False: the reasoning already comes in its own field, and reasoning_format is a 400.
    parsed_format: bool


# Longest prefix wins (Groq's reasoning docs and SDK, 2026-11). Other models get neither parameter:
# they answer 400 to both.
REASONING_MODELS = {
    "openai/gpt-oss-": ReasoningModel(frozenset(REASONING_EFFORTS), parsed_format=False),
    "qwen/qwen3.8-": ReasoningModel(frozenset(REASONING_EFFORTS), parsed_format=True),
    "qwen/qwen3": ReasoningModel(frozenset(), parsed_format=True),
}


def reasoning_model(model: str) -> ReasoningModel | None:
    prefixes = [prefix for prefix in REASONING_MODELS if model.startswith(prefix)]
    return REASONING_MODELS[max(prefixes, key=len)] if prefixes else None


class GroqLLM:
    provider = "groq"

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        deltas: Callable[[str], None] | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        reasoning_effort: str = "",
    ) -> None:
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.reasoning_effort = reasoning_effort
        # Hears the answer's text as it is generated; the reply is then streamed, and tool calls
        # are assembled from their pieces.
        self.deltas = deltas
        # Set (by the run's owner) to stop waiting to retry as soon as the run is interrupted.
        self.interrupt: Interrupt | None = None
        self.client = groq.Groq(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    def chat(
        self, messages: list[Message], tools: list[ToolSpec] | None, *, timeout: float | None = None
    ) -> Reply:
        deadline = None if timeout is None else time.monotonic() + timeout
        retried: list[str] = []
        try:
            reply = self._send(messages, tools, deadline, retried)
        except groq.BadRequestError as error:
            note = _rejected_reply_note(error, tools)
            if note is None:
                raise LLMError(self._describe(error)) from None
            reply = self._send_corrected([*messages, note], tools, deadline, retried)
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
        except groq.BadRequestError as error:
            again = " again, after the first was fed back" if _rejected_reply(error) else ""
            raise LLMError(f"{self._describe(error)}{again}") from None
        return dataclasses.replace(reply, recovered_error=messages[-1]["content"])

    def available_models(self) -> list[str]:
        """The models this key can use, as Groq lists them."""
        try:
            return sorted(model.id for model in self.client.models.list().data)
        except groq.APIStatusError as error:
            raise LLMError(self._describe(error)) from None
        except groq.APIConnectionError as error:
            raise LLMError(f"Could not reach Groq: {error}") from None

    def request_options(self, tools: list[ToolSpec] | None) -> dict[str, Any]:
        options: dict[str, Any] = {"tools": tools, "tool_choice": "auto"} if tools else {}
        reasoning = reasoning_model(self.model)
        if reasoning is not None:
            if reasoning.parsed_format:
                options["reasoning_format"] = "parsed"
            if self.reasoning_effort in reasoning.efforts:
                options["reasoning_effort"] = self.reasoning_effort
        return options

    def _send(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        deadline: float | None,
        retried: list[str],
    ) -> Reply:
        """One completion, retried while the wait fits (what went wrong on each attempt retried
        is added to `retried`); a 400 is raised for `chat` to judge."""
        options = self.request_options(tools)
        attempt = 0
        while True:
            limit = self._attempt_limit(deadline)
            pieces = ReplyPieces(self.deltas, self.interrupt)
            watchdog = Watchdog(deadline)
            try:
                with watchdog:
                    return self._attempt(messages, options, limit, watchdog, pieces)
            except groq.BadRequestError:
                raise
            except TRANSIENT_ERRORS as error:
                wait = self._wait_to_retry(error, attempt, limit, deadline, watchdog)
                retried.append(self._describe(error, limit, wait))
                logger.warning("Groq: attempt %d failed, retrying: %s", attempt + 1, retried[-1])
                if pieces.text and self.deltas is not None:
                    self.deltas(RETRY_NOTE)
            except groq.APIError as error:  # an error event in the stream: Groq gave up on it
                raise LLMError(f"Groq's stream ended with an error: {error}") from None
            self._sit_out(wait)
            attempt += 1

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
                f"Groq did not finish its reply within the {limit:.1f} seconds the run had left."
            ) from None
        wait = _retry_wait(error, attempt)
        if not self._may_retry(error, attempt, wait, deadline):
            raise LLMError(self._describe(error, limit, wait, attempt + 1)) from None
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
        so the body, streamed or not, is read within the deadline."""
        streamed = self.deltas is not None
        with self.client.chat.completions.with_streaming_response.create(
            model=self.model,
            messages=messages,
            timeout=limit,
            **({"stream": True} if streamed else {}),
            **options,
        ) as response:
            watchdog.watch(response.http_response)
            if not streamed:
                return _reply(response.parse())
            return pieces.read(response.parse())

    def _deadline_timeout(self, error: Exception, limit: float) -> bool:
        """A timeout while the time the run had left, not the configured timeout, was the cap."""
        timed_out = isinstance(error, (groq.APITimeoutError, httpx.TimeoutException))
        return timed_out and limit < self.timeout

    def _may_retry(
        self, error: Exception, attempt: int, wait: float, deadline: float | None
    ) -> bool:
        return (
            _retryable(error)
            and attempt < self.max_retries
            and wait <= MAX_WAIT
            and _fits(wait, deadline)
        )

    def _attempt_limit(self, deadline: float | None) -> float:
        if deadline is None:
            return self.timeout
        return max(min(self.timeout, deadline - time.monotonic()), 0.001)

    def _describe(
        self, error: Exception, limit: float = 0.0, wait: float = 0.0, attempts: int = 1
    ) -> str:
        if isinstance(error, (groq.APITimeoutError, httpx.TimeoutException)):
            return f"Groq did not answer within {limit:g} seconds{_on_attempts(attempts)}."
        if isinstance(error, StreamCut):
            return (
                "Groq cut its reply short: the stream ended before its last chunk"
                f"{_on_attempts(attempts)}."
            )
        if isinstance(error, httpx.TransportError):
            return (
                f"The connection to Groq broke while its reply came in{_on_attempts(attempts)}: "
                f"{error or type(error).__name__}"
            )
        if not isinstance(error, groq.APIStatusError):
            return f"Could not reach Groq: {error}"
        message = _error_body(error).get("message") or error.message
        if _model_missing(error):
            return self._model_missing(message)
        if error.status_code == 429:
            return f"Groq's rate limit was reached: {message} Try again {_when(wait)}."
        return f"Groq answered {error.status_code}: {message}"

    def _model_missing(self, message: str) -> str:
        current = next(name for name in TOOL_CALLING_MODELS if name != self.model)
        return (
            f"Groq has no model {self.model!r} that this key can use ({message}). Set "
            f"LOOP_GROQ_MODEL (or LOOP_MODEL, or runagent --model) to a current model such as "
            f"{current!r}; `manage.py groqcheck` lists the models your key can use."
        )


def _reply(completion: Any) -> Reply:
    if not completion.choices:
        raise LLMError("Groq returned no choices.")
    message = completion.choices[0].message
    calls = tuple(
        ToolCall(call.id, call.function.name, call.function.arguments or "{}")
        for call in message.tool_calls or ()
    )
    usage = completion.usage
    return Reply(
        text=message.content or "",
        tool_calls=calls,
        # Groq counts reasoning tokens in completion_tokens, as OpenAI does.
        usage=Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0) if usage else Usage(),
        reasoning=getattr(message, "reasoning", None) or "",
        cut=completion.choices[0].finish_reason == "length",
    )


class StreamCut(Exception):
    """A streamed reply ended before its last chunk (the one with the finish reason): what came
    is not the whole reply."""


class ReplyPieces:
    """A reply put together from a stream: text pieces go to `deltas` as they come; a tool call's
    id and name come in its first piece and its arguments in any number of them. Only a stream
    that reached its finish reason is a reply. An interrupted run's reply is read no further."""

    def __init__(
        self, deltas: Callable[[str], None] | None, interrupt: Interrupt | None = None
    ) -> None:
        self.deltas = deltas
        self.interrupt = interrupt
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Any = None
        self.finish_reason: str | None = None

    def read(self, chunks: Iterable[Any]) -> Reply:
        try:
            for chunk in chunks:
                if self.interrupt is not None:
                    self.interrupt.raise_if_set()
                self.take(chunk)
        except TRANSIENT_ERRORS:
            if self.finish_reason is None:
                raise
            # Everything came; only the connection's end (after [DONE]) went wrong.
        return self.reply()

    def take(self, chunk: Any) -> None:
        groq_part = getattr(chunk, "x_groq", None)
        if groq_part is not None and groq_part.error:
            raise LLMError(f"Groq's stream ended with an error: {groq_part.error}")
        for choice in chunk.choices[:1]:
            self.add(choice.delta)
            self.finish_reason = choice.finish_reason or self.finish_reason
        self.usage = (
            getattr(groq_part, "usage", None) or getattr(chunk, "usage", None) or self.usage
        )

    def add(self, delta: Any) -> None:
        if delta.content:
            self.text.append(delta.content)
            if self.deltas is not None:
                self.deltas(delta.content)
        if getattr(delta, "reasoning", None):
            self.reasoning.append(delta.reasoning)
        for piece in delta.tool_calls or ():
            call = self.calls.setdefault(piece.index, {"id": "", "name": "", "arguments": []})
            call["id"] = piece.id or call["id"]
            if piece.function is not None:
                call["name"] = piece.function.name or call["name"]
                call["arguments"].append(piece.function.arguments or "")

    def reply(self) -> Reply:
        if self.finish_reason is None:
            raise StreamCut
        usage = self.usage
        return Reply(
            text="".join(self.text),
            tool_calls=tuple(
                ToolCall(call["id"], call["name"], "".join(call["arguments"]) or "{}")
                for _, call in sorted(self.calls.items())
            ),
            usage=Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0)
            if usage
            else Usage(),
            reasoning="".join(self.reasoning),
            cut=self.finish_reason == "length",
        )


# What may break one attempt and be cured by the next: Groq's statuses and failed connections,
# the transport failing while a reply is read (the SDK does not wrap those), a stream cut short.
TRANSIENT_ERRORS = (groq.APIStatusError, groq.APIConnectionError, httpx.TransportError, StreamCut)


# --- errors -----------------------------------------------------------------------------------


def _error_body(error: groq.APIStatusError) -> dict[str, Any]:
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]
    return {}


def _model_missing(error: groq.APIStatusError) -> bool:
    code = _error_body(error).get("code")
    return error.status_code == 404 or code in {"model_not_found", "model_decommissioned"}


_REJECTED_REPLY_MESSAGES = ("tool call validation failed", "tool choice is none")


def _rejected_reply(error: groq.BadRequestError) -> bool:
    """A 400 about what the model generated, not about the request Loop sent."""
    details = _error_body(error)
    message = str(details.get("message", "")).lower()
    return details.get("code") == "tool_use_failed" or any(
        known in message for known in _REJECTED_REPLY_MESSAGES
    )


def _rejected_reply_note(
    error: groq.BadRequestError, tools: list[ToolSpec] | None
) -> Message | None:
    """The note that feeds a rejected reply back to the model, or None for other 400s."""
    if not _rejected_reply(error):
        return None
    details = _error_body(error)
    reason = str(details.get("message") or "the reply was malformed")
    generation = str(details.get("failed_generation") or "")[:2000]
    if generation:
        reason += f" Your own output, quoted as data: <<<{undelimited(generation)}>>>"
    if tools:
        names = ", ".join(spec["function"]["name"] for spec in tools)
        hint = (
            f"Call one of the tools you have ({names}) with arguments that are valid JSON "
            "matching its schema, or answer in text."
        )
    else:
        hint = "Tools are switched off for this turn: answer in plain text, calling no tool."
    return {"role": "user", "content": REJECTED_REPLY_NOTE.format(reason=reason, hint=hint)}


# --- retries ----------------------------------------------------------------------------------


def _retryable(error: Exception) -> bool:
    if not isinstance(error, groq.APIStatusError):  # a timeout or a dropped connection
        return True
    return error.status_code in {408, 409, 429} or error.status_code >= 500


def _on_attempts(attempts: int) -> str:
    return f", on each of {attempts} attempts" if attempts > 1 else ""


def _fits(wait: float, deadline: float | None) -> bool:
    return deadline is None or time.monotonic() + wait < deadline


def _retry_wait(error: Exception, attempt: int) -> float:
    """Groq's own hint when it gives one, else a short exponential backoff."""
    if isinstance(error, groq.APIStatusError):
        hinted = _hinted_wait(error.response.headers)
        if hinted is not None:
            return hinted
    return min(0.5 * 2**attempt, 8.0)


def _hinted_wait(headers: Mapping[str, str]) -> float | None:
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
    """Groq's reset times look like `7.66s`, `2m59.56s` or `120ms`."""
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
