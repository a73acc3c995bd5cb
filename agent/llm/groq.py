"""Groq's chat completions with tool calling, through the official `groq` SDK.

Retries live in one layer only, the SDK's own: it retries 429 (honouring Retry-After), 5xx,
timeouts and dropped connections with exponential backoff, `max_retries` times, each attempt with
the full timeout. Whatever is left after that is an LLMError that ends the
run as failed. Groq's `tool_use_failed` (the model produced a malformed call) is fed back to the
model once as an error; a second one in a row ends the run.
"""

import dataclasses
from typing import Any

import groq

from agent.history import undelimited
from agent.llm.base import LLMError, Message, Reply, ToolCall, ToolSpec, Usage

MALFORMED_CALL_NOTE = """\
[Loop] Your last tool call was malformed and did not run ({error}). Call the tool again with \
arguments that are valid JSON matching its schema, or answer in text."""


class GroqLLM:
    provider = "groq"

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self.model = model
        self.timeout = timeout
        self.client = groq.Groq(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )

    def chat(
        self, messages: list[Message], tools: list[ToolSpec] | None, *, timeout: float | None = None
    ) -> Reply:
        client, limit = self.client, self.timeout
        if timeout is not None and timeout < self.timeout:
            # The run's deadline comes first: one attempt, cut off when the run's time is up.
            limit = max(timeout, 0.001)
            client = self.client.with_options(timeout=limit, max_retries=0)
        return self._chat(client, limit, messages, tools)

    def _chat(
        self, client: groq.Groq, limit: float, messages: list[Message], tools: list[ToolSpec] | None
    ) -> Reply:
        try:
            return self._complete(client, limit, messages, tools)
        except groq.BadRequestError as error:
            failed = _tool_use_failed(error)
            if failed is None:
                raise LLMError(_describe(error)) from None
        retry = [*messages, failed]
        try:
            reply = self._complete(client, limit, retry, tools)
        except groq.BadRequestError as error:
            again = " again, after the first was fed back" if _tool_use_failed(error) else ""
            raise LLMError(f"{_describe(error)}{again}") from None
        return dataclasses.replace(reply, recovered_error=failed["content"])

    def _complete(
        self, client: groq.Groq, limit: float, messages: list[Message], tools: list[ToolSpec] | None
    ) -> Reply:
        options: dict[str, Any] = {"tools": tools, "tool_choice": "auto"} if tools else {}
        try:
            completion = client.chat.completions.create(
                model=self.model, messages=messages, **options
            )
        except groq.BadRequestError:
            raise
        except groq.APITimeoutError:
            raise LLMError(
                f"Groq did not answer within {limit:g} seconds, on any attempt."
            ) from None
        except groq.APIConnectionError as error:
            raise LLMError(f"Could not reach Groq: {error}") from None
        except groq.APIStatusError as error:
            raise LLMError(_describe(error)) from None
        return _reply(completion)


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
        usage=Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0) if usage else Usage(),
    )


def _error_body(error: groq.APIStatusError) -> dict[str, Any]:
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]
    return {}


def _tool_use_failed(error: groq.BadRequestError) -> Message | None:
    """The note that feeds a malformed call back to the model, or None for other 400s."""
    details = _error_body(error)
    if details.get("code") != "tool_use_failed":
        return None
    generation = str(details.get("failed_generation", ""))[:2000]
    reason = (
        f"{details.get('message', 'malformed tool call')} Your own output, quoted as data: "
        f"<<<{undelimited(generation)}>>>"
    )
    return {"role": "user", "content": MALFORMED_CALL_NOTE.format(error=reason)}


def _describe(error: groq.APIStatusError) -> str:
    message = _error_body(error).get("message") or error.message
    return f"Groq answered {error.status_code}: {message}"
