"""Which model a run uses: `mock`, or a Groq model name, from the caller or settings."""

from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from agent.llm.base import LLM
from agent.llm.groq import GroqLLM
from agent.llm.mock import MockLLM

MOCK = "mock"


class ModelUnavailable(ValueError):
    pass


def default_model() -> str:
    if settings.LOOP_MODEL:
        return settings.LOOP_MODEL
    return settings.LOOP_GROQ_MODEL if settings.GROQ_API_KEY else MOCK


@dataclass(frozen=True)
class ModelChoice:
    """Which provider serves a model name, and the name it knows it by: what a run records when
    it is queued. No client is built for it; the run's worker builds one."""

    provider: str
    model: str


def resolve(model: str = "") -> ModelChoice:
    """The model a run will use, checked: ModelUnavailable if it cannot run here."""
    model = model or default_model()
    if model == MOCK:
        return ModelChoice(MockLLM.provider, MockLLM.model)
    if not settings.GROQ_API_KEY:
        raise ModelUnavailable(
            f"Model {model!r} runs on Groq and needs GROQ_API_KEY. Set it, or use the keyless "
            f"model {MOCK!r}."
        )
    return ModelChoice(GroqLLM.provider, model)


def llm_for(model: str = "", *, deltas: Callable[[str], None] | None = None) -> LLM:
    """A client for `model`, built once per run. `deltas`, if given, hears each reply's text as
    it is generated (the reply is then streamed)."""
    choice = resolve(model)
    if choice.provider == MockLLM.provider:
        return MockLLM(deltas, latency=settings.LOOP_MOCK_LATENCY_MS / 1000)
    return GroqLLM(
        choice.model,
        deltas=deltas,
        api_key=settings.GROQ_API_KEY,
        base_url=settings.GROQ_BASE_URL or None,
        timeout=settings.LOOP_GROQ_TIMEOUT,
        max_retries=settings.LOOP_GROQ_MAX_RETRIES,
        reasoning_effort=settings.LOOP_GROQ_REASONING_EFFORT,
    )
