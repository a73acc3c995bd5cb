"""Which model a run uses: `mock`, or a Groq model name, from the caller or settings."""

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


def llm_for(model: str = "") -> LLM:
    model = model or default_model()
    if model == MOCK:
        return MockLLM(latency=settings.LOOP_MOCK_LATENCY_MS / 1000)
    if not settings.GROQ_API_KEY:
        raise ModelUnavailable(
            f"Model {model!r} runs on Groq and needs GROQ_API_KEY. Set it, or use the keyless "
            f"model {MOCK!r}."
        )
    return GroqLLM(
        model,
        api_key=settings.GROQ_API_KEY,
        base_url=settings.GROQ_BASE_URL or None,
        timeout=settings.LOOP_GROQ_TIMEOUT,
        max_retries=settings.LOOP_GROQ_MAX_RETRIES,
        reasoning_effort=settings.LOOP_GROQ_REASONING_EFFORT,
    )
