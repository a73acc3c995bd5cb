"""A fake of Groq's OpenAI-compatible chat completions API, as a real HTTP server on 127.0.0.1.

The real `groq` client talks to it over a socket, so its retries, backoff, timeouts and error
mapping all run for real. The server answers from a queue of scripted responses, one per request,
and records every request it receives so tests can assert on exactly what the client sent.

Use it from any test module (importing the fixture function registers the `groq_server` fixture
there; the same import in tests/conftest.py would make it available to every module):

    from tests.groq_server import groq_server_fixture, tool_call  # noqa: F401

    def test_something(groq_server):
        groq_server.reply("Hello", usage=(12, 3))
        llm = GroqLLM("some-model", api_key="k", base_url=groq_server.base_url)
        ...
        assert groq_server.requests[0].body["model"] == "some-model"

Scripting (each call queues responses, answered in order):

    groq_server.reply(text, tool_calls=[tool_call("name", {"a": 1})], usage=(prompt, completion))
    groq_server.fail(429, "Rate limit reached", headers={"Retry-After": "1"})
    groq_server.fail(500, times=5, headers={"retry-after-ms": "50"})
    groq_server.tool_use_failed("<function=read_file>{bad json</function>")
    groq_server.reply("late", delay=2)  # sleeps 2 s before answering: drives client timeouts
    groq_server.reply("4", reasoning="2 + 2 is 4")  # a reasoning model's separate reasoning
    groq_server.tool_not_in_request("repo_browser.open_file")  # gpt-oss calling a made-up tool
    groq_server.tool_choice_none('{"name": "read_file"}')  # a tool call while tools are off
    groq_server.rate_limited(retry_after=2)  # Groq's 429 with retry-after and x-ratelimit-*
    groq_server.reply("Paris is the capital", finish_reason="length")  # stopped at the limit

Faults of a streamed reply (`chunks` counts the stream's chunks from its first, the role's):

    groq_server.reply("...", cut_after=3)  # its first 3 chunks, then the body ends, no [DONE]
    groq_server.reply("...", drop_after=0)  # the headers, then the connection is reset
    groq_server.reply("...", drop_after=3)  # 3 chunks, then the connection is reset
    groq_server.reply("...", drip=0.5)  # one chunk every 0.5 s, until the client goes away

`drop_after` also resets a reply that is not streamed, right after its headers. Each streamed
reply is recorded in `streams` (`SentStream`: chunks sent, chunks in the reply, whether the
client went away first), so a test can tell that a client cut a drip off.

Like Groq today, it knows a catalogue of models (`CURRENT_MODELS` unless given others) and checks
each request before answering from the script: an unknown model is a 404 `model_not_found`;
`reasoning_format` or `reasoning_effort` sent to a model that does not take it is a 400. gpt-oss
models return their reasoning in `message.reasoning`; qwen3 models do so only when asked for
`reasoning_format=parsed`, and otherwise put it in the answer as `<think>...</think>`. GET
/openai/v1/models lists the catalogue, or answers with the script's next error if it is one.

A request that finds the queue empty, or hits another path, is answered 418 (which Loop's client
does not retry) and the fixture fails the test at teardown.
"""

import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests.chat_server import (
    Completion,
    Error,
    FakeChatServer,
    RecordedRequest,
    SentStream,
    no_proxies,
    tool_call,
)

__all__ = [
    "CHAT_COMPLETIONS_PATH",
    "CURRENT_MODELS",
    "MODELS_PATH",
    "RETRY_NOTE",
    "TOOL_USE_FAILED_MESSAGE",
    "Completion",
    "Error",
    "FakeGroqServer",
    "RecordedRequest",
    "SentStream",
    "groq_server_fixture",
    "tool_call",
]

CHAT_COMPLETIONS_PATH = "/openai/v1/chat/completions"
MODELS_PATH = "/openai/v1/models"

# What the page hears when Groq's reply broke off and is asked for again.
RETRY_NOTE = "\n\n[Groq's reply broke off; Loop asked for it again.]\n\n"

# Groq's production and preview models with tool calling, 2026-11 (llama-3.3-70b-versatile was
# decommissioned on 2026-08-16 and is answered 404 like any unknown model).
CURRENT_MODELS = (
    "openai/gpt-oss-120b",
    "openai/gpt-oss-20b",
    "qwen/qwen3.6-27b",
    "qwen/qwen3-32b",
    "llama-3.1-8b-instant",
)

# What each family takes (Groq's reasoning docs); a model in none of them takes neither parameter.
_EFFORTS = {"openai/gpt-oss-": {"low", "medium", "high"}, "qwen/qwen3": {"none", "default"}}
_PARSED_FORMAT_FAMILY = "qwen/qwen3"

# What Groq sends for a malformed tool call (HTTP 400).
TOOL_USE_FAILED_MESSAGE = (
    "Failed to call a function. Please adjust your prompt. See 'failed_generation' for more "
    "details."
)

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "tokens",
}


class FakeGroqServer(FakeChatServer):
    """A threaded HTTP server answering Groq chat completion requests from a script."""

    name = "fake Groq"
    chat_path = CHAT_COMPLETIONS_PATH
    models_path = MODELS_PATH

    def __init__(self, models: Sequence[str] = CURRENT_MODELS) -> None:
        super().__init__(models)

    @property
    def base_url(self) -> str:
        """What GROQ_BASE_URL takes (the client appends /openai/v1/...)."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "FakeGroqServer":
        self.start()
        return self

    # --- scripting Groq's own errors ----------------------------------------------------------

    def tool_use_failed(self, failed_generation: str, *, times: int = 1) -> None:
        """Queue Groq's 400 for a malformed tool call."""
        body = {
            "error": {
                "message": TOOL_USE_FAILED_MESSAGE,
                "type": "invalid_request_error",
                "code": "tool_use_failed",
                "failed_generation": failed_generation,
            }
        }
        self.fail(400, body=body, times=times)

    def tool_not_in_request(self, tool: str, *, times: int = 1) -> None:
        """Queue Groq's 400 for a call to a tool the request did not offer (gpt-oss invents
        `repo_browser.*` and `container.exec`). Groq sends it with no code."""
        message = (
            "Tool call validation failed: tool call validation failed: attempted to call tool "
            f"'{tool}' which was not in request.tools"
        )
        body = {"error": {"message": message, "type": "invalid_request_error", "param": ""}}
        self.fail(400, body=body, times=times)

    def tool_choice_none(self, failed_generation: str, *, times: int = 1) -> None:
        """Queue Groq's 400 for a tool call in a turn whose request offered no tools."""
        body = {
            "error": {
                "message": "Tool choice is none, but model called a tool",
                "type": "invalid_request_error",
                "code": "tool_use_failed",
                "failed_generation": failed_generation,
            }
        }
        self.fail(400, body=body, times=times)

    def rate_limited(
        self,
        *,
        retry_after: float | None = 2,
        model: str = "openai/gpt-oss-120b",
        reset_tokens: str = "7.66s",
        times: int = 1,
    ) -> None:
        """Queue Groq's free-tier 429: tokens per minute spent, with `retry-after` (whole
        seconds; None leaves it out) and the `x-ratelimit-*` headers."""
        message = (
            f"Rate limit reached for model `{model}` in organization `org_fake` service tier "
            "`on_demand` on tokens per minute (TPM): Limit 8000, Used 7400, Requested 1200. "
            f"Please try again in {reset_tokens}. Need more tokens? Upgrade to Dev Tier today "
            "at https://console.groq.com/settings/billing"
        )
        headers = {
            "x-ratelimit-limit-requests": "1000",
            "x-ratelimit-limit-tokens": "8000",
            "x-ratelimit-remaining-requests": "998",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-requests": "2m52.8s",
            "x-ratelimit-reset-tokens": reset_tokens,
        }
        if retry_after is not None:
            headers["retry-after"] = f"{retry_after:g}"
        self.fail(429, message, code="rate_limit_exceeded", headers=headers, times=times)

    # --- checking a request as Groq does ------------------------------------------------------

    def _error_type(self, status: int) -> str:
        return _ERROR_TYPES.get(status, "internal_server_error")

    def _refusal(self, request: RecordedRequest) -> Error | None:
        """Groq's answer to a request it rejects before generating anything, or None."""
        body = request.body
        model = body.get("model", "") if isinstance(body, dict) else ""
        if model not in self.models:
            message = f"The model `{model}` does not exist or you do not have access to it."
            return _groq_error(404, message, code="model_not_found")
        for parameter, accepted in (
            ("reasoning_format", self._formats(model, body)),
            ("reasoning_effort", _family_value(_EFFORTS, model, set())),
        ):
            value = body.get(parameter)
            if value is not None and value not in accepted:
                why = "is not supported with this model" if not accepted else f"{value!r} invalid"
                return _groq_error(400, f"`{parameter}` {why}", param=parameter)
        return None

    def _formats(self, model: str, body: dict) -> set[str]:
        if not model.startswith(_PARSED_FORMAT_FAMILY):
            return set()
        # raw reasoning cannot be told apart from a tool call, so Groq refuses it with tools.
        return {"parsed", "hidden"} if body.get("tools") else {"parsed", "hidden", "raw"}

    def _model_list(self) -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": 1_754_000_000,
                    "owned_by": name.split("/")[0] if "/" in name else "Meta",
                    "active": True,
                    "context_window": 131_072,
                }
                for name in self.models
            ],
        }

    # --- answering ---------------------------------------------------------------------------

    def _completion_body(self, completion: Completion, request: RecordedRequest) -> dict:
        requested_model = request.body.get("model") if isinstance(request.body, dict) else None
        prompt, generated = completion.usage
        message: dict[str, Any] = {"role": "assistant", "content": completion.text}
        thought = _reasoning_shown(completion.reasoning, requested_model or "", request.body)
        if thought == "field":
            message["reasoning"] = completion.reasoning
        elif thought == "inline":
            message["content"] = f"<think>{completion.reasoning}</think>\n{completion.text or ''}"
        reasoning_tokens = len((completion.reasoning or "").split()) if thought else 0
        if completion.tool_calls:
            message["tool_calls"] = list(completion.tool_calls)
        finish = completion.finish_reason or ("tool_calls" if completion.tool_calls else "stop")
        serial = next(self._ids)
        return {
            "id": f"chatcmpl-fake{serial:08d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": completion.model or requested_model or "fake-model",
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
            "usage": {
                "queue_time": 0.01,
                "prompt_tokens": prompt,
                "prompt_time": 0.002,
                "completion_tokens": generated,
                "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
                "completion_time": 0.02,
                "total_tokens": prompt + generated,
                "total_time": 0.022,
            },
            "system_fingerprint": "fp_fake",
            "x_groq": {"id": f"req_fake{serial:08d}"},
        }

    def _chunks(self, completion: Completion, request: RecordedRequest) -> list[dict]:
        """The completion as Groq streams it: the reasoning, the text in pieces of up to 8
        characters, each tool call's id and name with the first half of its arguments and then
        the rest, and a last chunk with the finish reason and the usage (in `x_groq`)."""
        whole = self._completion_body(completion, request)
        message, usage = whole["choices"][0]["message"], whole["usage"]
        deltas: list[dict] = [{"role": "assistant", "content": ""}]
        if message.get("reasoning"):
            deltas.append({"reasoning": message["reasoning"]})
        text = message.get("content") or ""
        deltas += [{"content": text[i : i + 8]} for i in range(0, len(text), 8)]
        for index, call in enumerate(message.get("tool_calls") or ()):
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            first = {"name": call["function"]["name"], "arguments": arguments[:half]}
            deltas.append(
                {
                    "tool_calls": [
                        {"index": index, "id": call["id"], "type": "function", "function": first}
                    ]
                }
            )
            deltas.append(
                {"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}
            )
        finish = whole["choices"][0]["finish_reason"]
        base = {k: whole[k] for k in ("id", "created", "model", "system_fingerprint")}
        chunks = [
            {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
            }
            for delta in deltas
        ]
        chunks.append(
            {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}],
                "x_groq": {"id": whole["x_groq"]["id"], "usage": usage},
            }
        )
        return chunks


def _groq_error(status: int, message: str, *, code: str = "", param: str = "") -> Error:
    details = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return Error(status, {"error": details})


def _family_value(table: dict[str, set[str]], model: str, default: set[str]) -> set[str]:
    return next((value for prefix, value in table.items() if model.startswith(prefix)), default)


def _reasoning_shown(reasoning: str | None, model: str, body: Any) -> str:
    """Where a reply's reasoning goes: its own `field`, `inline` in the answer, or nowhere."""
    if not reasoning or not isinstance(body, dict):
        return ""
    if model.startswith("openai/gpt-oss-"):
        return "field" if body.get("include_reasoning", True) else ""
    if model.startswith(_PARSED_FORMAT_FAMILY):
        return {"parsed": "field", "hidden": ""}.get(body.get("reasoning_format"), "inline")
    return ""


@pytest.fixture(name="groq_server")
def groq_server_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGroqServer]:
    """A running FakeGroqServer, stopped after the test; fails the test on unscripted requests."""
    no_proxies(monkeypatch)
    with FakeGroqServer() as server:
        yield server
    assert not server.unexpected, (
        f"fake Groq got requests it had no answer for: {server.unexpected}"
    )
