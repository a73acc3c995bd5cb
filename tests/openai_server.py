"""A fake OpenAI-compatible chat-completions server (Ollama, vLLM, llama.cpp's llama-server, LM
Studio, OpenRouter, OpenAI), as a real HTTP server on 127.0.0.1.

The real `openai` client talks to it over a socket. It answers from a script, exactly as
tests/groq_server.py does (the machinery is tests/chat_server.py), and behaves like OpenAI's own
API unless told to have one of the quirks real servers have:

    from tests.openai_server import MODEL, openai_server_fixture, tool_call  # noqa: F401

    def test_something(openai_server):
        openai_server.behave(call_ids=False, reasoning="think")
        openai_server.reply("4", reasoning="2 + 2", tool_calls=[tool_call("add", {"a": 2})])
        llm = OpenAICompatibleLLM(MODEL, base_url=openai_server.base_url)
        ...

Scripting (answered in order, one per chat request): `reply(...)`, `fail(status, message)`,
`rate_limited(retry_after=1.0)`, with `delay`, `drip`, `cut_after`, `drop_after` and `times` as
FakeGroqServer takes them. `requests`, `streams`, `pending` and `unexpected` are as there.

`behave(**quirks)` (see `Quirks`) sets how the server behaves from then on: usage in a stream only
when asked for with `stream_options.include_usage` (OpenAI) or never asked for; a server that
refuses `stream_options`; a usage chunk whose `choices` is null or missing; tool-call arguments
whole or in pieces; calls without ids, streamed pieces without an index; finish reason "stop"
with calls; reasoning in `reasoning_content`, `reasoning` or `<think>` tags in the content; a
server that cannot take tools (Ollama's, vLLM's and llama.cpp's own error); a key it requires; a
server that answers a request for a stream with the whole reply.

Before the script, each chat request is checked as a server does: a model not in the catalogue is
Ollama's 404 ('model "x" not found, try pulling it first'). GET /v1/models lists the catalogue (or
answers with the script's next error). A chat request with nothing scripted is 418 and fails the
test at teardown; a request to another path is a plain-text 404, as Ollama's (a base URL without
/v1), recorded in `wrong_paths`. `stream_options` without `stream` is OpenAI's 400.

Streamed text comes in pieces of `PIECE` characters, so a <think> tag is split across chunks.
"""

import dataclasses
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from agent.llm import chat_completions
from tests.chat_server import (
    Completion,
    Error,
    FakeChatServer,
    RecordedRequest,
    SentStream,
    no_proxies,
    text_pieces,
    tool_call,
)

__all__ = [
    "CATALOGUE",
    "CHAT_COMPLETIONS_PATH",
    "MODEL",
    "MODELS_PATH",
    "Completion",
    "Error",
    "FakeOpenAIServer",
    "Quirks",
    "RecordedRequest",
    "SentStream",
    "openai_server_fixture",
    "tool_call",
]

MODEL = "llama3.1:8b"
CATALOGUE = (MODEL, "qwen3:8b")

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"

# Streamed text and reasoning come in pieces this long (so "<think>" never comes whole), and
# tool-call arguments (unless whole) in pieces of ARGUMENT_PIECE.
PIECE = 5
ARGUMENT_PIECE = 6

STREAM_OPTIONS_REFUSED = "Unrecognized request argument supplied: stream_options"
STREAM_OPTIONS_UNSTREAMED = (
    "The 'stream_options' parameter is only allowed when 'stream' is enabled."
)


def _no_tools_error(server: str, model: str) -> Error:
    """What each server answers to a request with tools it cannot take."""
    if server == "ollama":
        message = f"registry.ollama.ai/library/{model} does not support tools"
        body: dict = {"error": {"message": message, "type": "api_error", "param": None}}
        return Error(400, body)
    if server == "vllm":  # vLLM started without --enable-auto-tool-choice: message at the top
        message = (
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        )
        body = {
            "object": "error",
            "message": message,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
        return Error(400, body)
    if server == "llamacpp":  # llama-server started without --jinja: a 500
        body = {
            "error": {
                "code": 500,
                "message": "tools param requires --jinja flag",
                "type": "server_error",
            }
        }
        return Error(500, body)
    raise ValueError(f"no_tools={server!r}: expected 'ollama', 'vllm' or 'llamacpp'")


# The quirks that take one of a few values.
_CHOICES = {
    "reasoning": ("reasoning_content", "reasoning", "think"),
    "finish_with_calls": ("tool_calls", "stop"),
    "usage_choices": ("empty", "null", "missing"),
}


@dataclass(frozen=True)
class Quirks:
    """How the server behaves; the defaults are OpenAI's own API."""

    usage_only_when_asked: bool = True  # streamed usage only with stream_options.include_usage
    rejects_stream_options: bool = False  # 400 STREAM_OPTIONS_REFUSED
    whole_tool_calls: bool = False  # each call's arguments in one streamed piece
    call_ids: bool = True  # False: tool calls carry no id
    call_index: bool = True  # False: streamed tool-call pieces carry no index
    reasoning: str = "reasoning_content"  # "reasoning_content" | "reasoning" | "think"
    finish_with_calls: str = "tool_calls"  # or "stop"
    no_tools: str | None = None  # "ollama" | "vllm" | "llamacpp"
    requires_key: str | None = None  # 401 unless Authorization: Bearer <it>
    usage_choices: str = "empty"  # the usage chunk's choices: "empty" ([]) | "null" | "missing"
    streams: bool = True  # False: a request asking for a stream gets the whole reply as JSON


class FakeOpenAIServer(FakeChatServer):
    """A threaded HTTP server answering OpenAI-shaped chat completion requests from a script."""

    name = "fake OpenAI-compatible server"
    chat_path = CHAT_COMPLETIONS_PATH
    models_path = MODELS_PATH

    def __init__(self, models: Sequence[str] = CATALOGUE) -> None:
        super().__init__(models)
        self.quirks = Quirks()
        self.wrong_paths: list[str] = []  # requests to paths the server does not have

    @property
    def base_url(self) -> str:
        """What LOOP_OPENAI_BASE_URL takes."""
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "FakeOpenAIServer":
        self.start()
        return self

    def behave(self, **quirks: Any) -> None:
        """How the server behaves from now on (the fields of `Quirks`; others keep theirs)."""
        if quirks.get("no_tools") is not None:
            _no_tools_error(quirks["no_tools"], MODEL)  # an unknown server fails here
        for name, values in _CHOICES.items():
            if name in quirks and quirks[name] not in values:
                raise ValueError(f"{name}={quirks[name]!r}: expected one of {values}")
        with self._lock:
            self.quirks = dataclasses.replace(self.quirks, **quirks)

    def rate_limited(
        self, retry_after: float | None = 1.0, *, reset_tokens: str = "1.4s", times: int = 1
    ) -> None:
        """Queue OpenAI's 429 for spent tokens per minute, with `retry-after` (None leaves it
        out) and the `x-ratelimit-*` headers (the tokens' window resets in `reset_tokens`)."""
        message = (
            "Rate limit reached for llama3.1:8b in organization org-fake on tokens per min (TPM): "
            f"Limit 30000, Used 29500, Requested 1200. Please try again in {reset_tokens}."
        )
        headers = {
            "x-ratelimit-limit-tokens": "30000",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-tokens": reset_tokens,
        }
        if retry_after is not None:
            headers["retry-after"] = f"{retry_after:g}"
        self.fail(429, message, code="rate_limit_exceeded", headers=headers, times=times)

    # --- checking a request as a server does --------------------------------------------------

    def _error_type(self, status: int) -> str:
        return "invalid_request_error" if status < 500 else "server_error"

    def _denied(self, request: RecordedRequest) -> Error | None:
        key = self.quirks.requires_key
        if key is None or request.headers.get("authorization") == f"Bearer {key}":
            return None
        message = "Incorrect API key provided. You can find your API key in your account."
        details = {"message": message, "type": "invalid_request_error", "param": None}
        return Error(401, {"error": {**details, "code": "invalid_api_key"}})

    def _refusal(self, request: RecordedRequest) -> Error | None:
        body = request.body if isinstance(request.body, dict) else {}
        model = body.get("model", "")
        if model not in self.models:
            message = f'model "{model}" not found, try pulling it first'
            return Error(404, {"error": {"message": message, "type": "api_error", "param": None}})
        if "stream_options" in body and not body.get("stream"):
            return Error(400, {"error": {"message": STREAM_OPTIONS_UNSTREAMED, "param": None}})
        if self.quirks.rejects_stream_options and "stream_options" in body:
            details = {"message": STREAM_OPTIONS_REFUSED, "type": "invalid_request_error"}
            return Error(400, {"error": {**details, "param": None, "code": None}})
        if self.quirks.no_tools and body.get("tools"):
            return _no_tools_error(self.quirks.no_tools, model)
        return None

    def _streams(self, request: RecordedRequest) -> bool:
        return self.quirks.streams and super()._streams(request)

    def _unknown_path(self, request: RecordedRequest) -> Error | None:
        """Another path is Ollama's (Go's) plain 404, as a base URL without /v1 meets; kept in
        `wrong_paths` rather than failing the test."""
        self.wrong_paths.append(f"{request.method} {request.path}")
        return Error(404, "404 page not found")

    def _model_list(self) -> dict:
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 1_754_000_000, "owned_by": "library"}
                for name in self.models
            ],
        }

    # --- answering ---------------------------------------------------------------------------

    def _message(self, completion: Completion) -> dict:
        """The reply's message, its reasoning and calls placed as the server places them."""
        message: dict[str, Any] = {"role": "assistant", "content": completion.text}
        where = self.quirks.reasoning
        if completion.reasoning and where == "think":
            message["content"] = f"<think>{completion.reasoning}</think>\n\n{completion.text or ''}"
        elif completion.reasoning:
            message[where] = completion.reasoning
        if completion.tool_calls:
            message["tool_calls"] = [self._call(call) for call in completion.tool_calls]
        return message

    def _call(self, call: dict) -> dict:
        return call if self.quirks.call_ids else {k: v for k, v in call.items() if k != "id"}

    def _finish(self, completion: Completion) -> str:
        if completion.finish_reason:
            return completion.finish_reason
        return self.quirks.finish_with_calls if completion.tool_calls else "stop"

    def _usage(self, completion: Completion) -> dict:
        prompt, generated = completion.usage  # not numbers, to script a server's nonsense
        counted = all(isinstance(count, int | float) for count in completion.usage)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": generated,
            "total_tokens": prompt + generated if counted else None,
        }

    def _head(self, request: RecordedRequest, completion: Completion, kind: str) -> dict:
        requested = request.body.get("model") if isinstance(request.body, dict) else None
        return {
            "id": f"chatcmpl-fake{next(self._ids):08d}",
            "object": kind,
            "created": int(time.time()),
            "model": completion.model or requested or "fake-model",
            "system_fingerprint": "fp_fake",
        }

    def _completion_body(self, completion: Completion, request: RecordedRequest) -> dict:
        choice = {
            "index": 0,
            "message": self._message(completion),
            "logprobs": None,
            "finish_reason": self._finish(completion),
        }
        return {
            **self._head(request, completion, "chat.completion"),
            "choices": [choice],
            "usage": self._usage(completion),
        }

    def _chunks(self, completion: Completion, request: RecordedRequest) -> list[dict]:
        """The completion as the server streams it: the role, the reasoning and the text in
        pieces of PIECE characters, each tool call (its id and name first, then its arguments
        in pieces, or all in one), the finish reason, and the usage in a chunk of its own when
        asked for (or, for a server that is not asked, never)."""
        message = self._message(completion)
        deltas: list[dict] = [{"role": "assistant", "content": ""}]
        for field in ("reasoning_content", "reasoning"):
            deltas += [{field: piece} for piece in text_pieces(message.get(field) or "", PIECE)]
        deltas += [{"content": piece} for piece in text_pieces(message["content"] or "", PIECE)]
        for index, call in enumerate(message.get("tool_calls") or ()):
            deltas += [{"tool_calls": [piece]} for piece in self._call_pieces(index, call)]
        head = self._head(request, completion, "chat.completion.chunk")
        usage_asked = bool((request.body.get("stream_options") or {}).get("include_usage"))
        with_usage = usage_asked or not self.quirks.usage_only_when_asked
        extra = {"usage": None} if usage_asked else {}
        chunks = [{**head, "choices": [_choice(delta, None)], **extra} for delta in [*deltas, {}]]
        chunks[-1]["choices"][0]["finish_reason"] = self._finish(completion)
        if with_usage:
            usage = {**head, "choices": [], "usage": self._usage(completion)}
            if self.quirks.usage_choices != "empty":
                usage["choices"] = None
            if self.quirks.usage_choices == "missing":
                del usage["choices"]
            chunks.append(usage)
        return chunks

    def _call_pieces(self, index: int, call: dict) -> list[dict]:
        arguments = call["function"]["arguments"]
        first: dict[str, Any] = {"index": index, **{k: v for k, v in call.items() if k == "id"}}
        first["type"] = "function"
        if self.quirks.whole_tool_calls:
            first["function"] = dict(call["function"])
            pieces = [first]
        else:
            first["function"] = {"name": call["function"]["name"], "arguments": ""}
            pieces = [first] + [
                {"index": index, "function": {"arguments": part}}
                for part in text_pieces(arguments, ARGUMENT_PIECE)
            ]
        if not self.quirks.call_index:
            for piece in pieces:
                del piece["index"]
        return pieces


def _choice(delta: dict, finish_reason: str | None) -> dict:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


@pytest.fixture(name="openai_server")
def openai_server_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A running FakeOpenAIServer, stopped after the test; fails the test on unscripted
    requests."""
    no_proxies(monkeypatch)
    # A new server on a port an earlier one had is not the server that refused stream_options.
    monkeypatch.setattr(chat_completions, "_REFUSE_STREAM_OPTIONS", set())
    with FakeOpenAIServer() as server:
        yield server
    assert not server.unexpected, (
        f"the fake OpenAI-compatible server got requests it had no answer for: {server.unexpected}"
    )
