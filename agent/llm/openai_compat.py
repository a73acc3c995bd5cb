"""Any OpenAI-compatible server (Ollama, vLLM, llama.cpp's llama-server, LM Studio, OpenRouter,
OpenAI itself): the shared chat-completions client with the table of what such servers do their
own way.

Their quirks are handled in the shared client, where Groq benefits too: usage in a streamed reply
only when `stream_options.include_usage` is asked for (and a server that refuses the option is
asked without it from then on), tool-call arguments in many pieces or all at once, a tool call with
no id or no index, arguments sent as a JSON object, `finish_reason` "stop" with calls present,
reasoning in `reasoning_content` or in <think> tags, a server that answers a stream with the whole
reply, a server that cannot call tools (llama.cpp says so with a 500), and a model that writes its
tool call as JSON text. See docs/models.md for each server's settings.
"""

from collections.abc import Callable
from typing import Any

from agent.llm.chat_completions import ChatCompletionsLLM, Dialect, unreachable_detail
from agent.llm.said import scrubbed_url

# Sent as the key to a server that needs none (some proxies insist on one); such servers ignore it.
NO_KEY = "no-key"


def reasoning_options(model: str, effort: str) -> dict[str, Any]:
    """`reasoning_effort` only when it is configured: many servers refuse parameters they do not
    know, and most local models take none."""
    return {"reasoning_effort": effort} if effort else {}


OPENAI_COMPATIBLE = Dialect(
    provider="openai",
    model_setting="LOOP_OPENAI_MODEL",
    check_command="modelcheck",
    base_url_setting="LOOP_OPENAI_BASE_URL",
    asks_stream_usage=True,
    reasoning_options=reasoning_options,
)


def shown_url(base_url: str) -> str:
    """The base URL as messages and pages show it: without any user, password, query (a
    `?key=`) or fragment in it."""
    return scrubbed_url(base_url)


class OpenAICompatibleLLM(ChatCompletionsLLM):
    dialect = OPENAI_COMPATIBLE
    provider = OPENAI_COMPATIBLE.provider

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str = "",
        deltas: Callable[[str], None] | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        reasoning_effort: str = "",
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key or NO_KEY,
            server=f"the model server at {shown_url(base_url)}",
            server_s="the model server's",
            deltas=deltas,
            timeout=timeout,
            max_retries=max_retries,
            reasoning_effort=reasoning_effort,
        )

    def _unreachable(self, error: Exception) -> str:
        return (
            f"Could not reach {self.server} ({unreachable_detail(error)}). Is it running, and "
            "is LOOP_OPENAI_BASE_URL right? `manage.py modelcheck` checks the settings."
        )
