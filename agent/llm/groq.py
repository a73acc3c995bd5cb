"""Groq: the shared chat-completions client with Groq's table.

What is Groq's own: where its service lives (`/openai/v1/` under its base URL, as Groq's SDK
has it, so GROQ_BASE_URL names the host), its reasoning models' parameters (`reasoning_format`,
`reasoning_effort`, each taken by some model families and a 400 for the others), its
`tool_use_failed` 400 for a reply the model got wrong (a RejectedGeneration, fed back to the
model once by the loop), usage sent in `x_groq` without being asked for, and the models to
suggest when one is gone. Everything else is `agent/llm/chat_completions.py`.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.llm.chat_completions import ChatCompletionsLLM, Dialect, ServerAnswered, error_body

# Models known to call tools well on Groq today, the first being Loop's default. A model that no
# longer exists is answered by naming one of these.
TOOL_CALLING_MODELS = ("openai/gpt-oss-120b", "openai/gpt-oss-20b", "qwen/qwen3.6-27b")

REASONING_EFFORTS = ("low", "medium", "high")

# Where Groq is when GROQ_BASE_URL does not say.
DEFAULT_BASE_URL = "https://api.groq.com"


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


def reasoning_options(model: str, effort: str) -> dict[str, Any]:
    reasoning = reasoning_model(model)
    if reasoning is None:
        return {}
    options: dict[str, Any] = {"reasoning_format": "parsed"} if reasoning.parsed_format else {}
    if effort in reasoning.efforts:
        options["reasoning_effort"] = effort
    return options


_REJECTED_REPLY_MESSAGES = ("tool call validation failed", "tool choice is none")


def rejected_reply(error: ServerAnswered) -> bool:
    """A 400 about what the model generated, not about the request Loop sent."""
    details = error_body(error)
    message = str(details.get("message", "")).lower()
    return details.get("code") == "tool_use_failed" or any(
        known in message for known in _REJECTED_REPLY_MESSAGES
    )


GROQ = Dialect(
    provider="groq",
    model_setting="LOOP_GROQ_MODEL",
    check_command="groqcheck",
    base_url_setting="GROQ_BASE_URL",
    chat_path="openai/v1/chat/completions",
    models_path="openai/v1/models",
    rejected_reply=rejected_reply,
    reasoning_options=reasoning_options,
)


class GroqLLM(ChatCompletionsLLM):
    dialect = GROQ
    provider = GROQ.provider

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
        super().__init__(
            model,
            base_url=base_url or DEFAULT_BASE_URL,
            api_key=api_key,
            server="Groq",
            server_s="Groq's",
            deltas=deltas,
            timeout=timeout,
            max_retries=max_retries,
            reasoning_effort=reasoning_effort,
        )

    def _model_missing(self, error: ServerAnswered, message: str) -> bool:
        return error.status_code == 404 or super()._model_missing(error, message)

    def _missing_model(self, message: str) -> str:
        current = next(name for name in TOOL_CALLING_MODELS if name != self.model)
        return (
            f"Groq has no model {self.model!r} that this key can use ({message}). Set "
            f"LOOP_GROQ_MODEL (or LOOP_MODEL, or runagent --model) to a current model such as "
            f"{current!r}; `manage.py groqcheck` lists the models your key can use."
        )
