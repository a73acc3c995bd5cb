"""Which model a run uses, and on which provider: `mock`, Groq, or an OpenAI-compatible server.

A model name is what LOOP_MODEL, LOOP_MODELS and `runagent --model` take:

- `mock`: the keyless mock model;
- `groq:<model>` or `openai:<model>`: that model on Groq, or on the server at
  LOOP_OPENAI_BASE_URL (the prefix is the provider; only the first colon counts, so
  `openai:qwen3:8b` is Ollama's `qwen3:8b`);
- a bare name: LOOP_OPENAI_MODEL's name on the OpenAI-compatible server, any other on Groq when
  GROQ_API_KEY is set, else on the OpenAI-compatible server when LOOP_OPENAI_BASE_URL is.

With no LOOP_MODEL the default is the first of LOOP_MODELS, else LOOP_GROQ_MODEL when there is a
Groq key, else LOOP_OPENAI_MODEL when there is a server, else `mock`.
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from agent.llm.groq import GroqLLM
from agent.llm.mock import MockLLM
from agent.llm.openai_compat import OpenAICompatibleLLM
from core.llm import LLM
from rights.effective import Rights

MOCK = "mock"
GROQ = GroqLLM.provider
OPENAI = OpenAICompatibleLLM.provider
PROVIDERS = (MockLLM.provider, GROQ, OPENAI)


class ModelUnavailable(ValueError):
    pass


@dataclass(frozen=True)
class ModelChoice:
    """Which provider serves a model, and the name the provider knows it by: what a run records
    when it is queued. No client is built for it; the run's worker builds one."""

    provider: str
    model: str

    @property
    def name(self) -> str:
        """The name that resolves to this choice wherever it is given (`groq:...`)."""
        return MOCK if self.provider == MockLLM.provider else f"{self.provider}:{self.model}"


def default_model() -> str:
    if settings.LOOP_MODEL:
        return str(settings.LOOP_MODEL)
    if settings.LOOP_MODELS:
        return str(settings.LOOP_MODELS[0])
    if settings.GROQ_API_KEY:
        return f"{GROQ}:{settings.LOOP_GROQ_MODEL}"
    if settings.LOOP_OPENAI_BASE_URL:
        return f"{OPENAI}:{settings.LOOP_OPENAI_MODEL}"
    return MOCK


def parse(name: str) -> ModelChoice:
    """The provider and model a name means (see the module's docstring); not checked."""
    if name == MOCK:
        return ModelChoice(MockLLM.provider, MockLLM.model)
    prefix, colon, rest = name.partition(":")
    if colon and prefix in (GROQ, OPENAI):
        return ModelChoice(prefix, rest)
    return ModelChoice(_provider_of_bare(name), name)


def _provider_of_bare(name: str) -> str:
    served = settings.LOOP_OPENAI_BASE_URL
    if served and name == settings.LOOP_OPENAI_MODEL:
        return OPENAI
    if settings.GROQ_API_KEY or not served:
        return GROQ
    return OPENAI


def resolve(model: "str | ModelChoice" = "") -> ModelChoice:
    """The model a run will use, checked: ModelUnavailable if it cannot run here."""
    choice = model if isinstance(model, ModelChoice) else parse(model or default_model())
    if choice.provider == MockLLM.provider:
        return ModelChoice(MockLLM.provider, MockLLM.model)
    if choice.provider == GROQ:
        return _on_groq(choice)
    if choice.provider == OPENAI:
        return _on_openai_compatible(choice)
    raise ModelUnavailable(
        f"Model {choice.model!r} runs on {choice.provider!r}, which this Loop does not know "
        f"(it knows {', '.join(PROVIDERS)})."
    )


def _on_groq(choice: ModelChoice) -> ModelChoice:
    if not settings.GROQ_API_KEY:
        raise ModelUnavailable(
            f"Model {choice.model!r} runs on Groq and needs GROQ_API_KEY. Set it, set "
            f"LOOP_OPENAI_BASE_URL for an OpenAI-compatible server, or use the keyless model "
            f"{MOCK!r}."
        )
    if not choice.model:
        raise ModelUnavailable("No Groq model is named: set LOOP_GROQ_MODEL.")
    return choice


def _on_openai_compatible(choice: ModelChoice) -> ModelChoice:
    if not settings.LOOP_OPENAI_BASE_URL:
        raise ModelUnavailable(
            f"Model {choice.model!r} runs on an OpenAI-compatible server and needs "
            f"LOOP_OPENAI_BASE_URL (for example http://127.0.0.1:11434/v1 for Ollama). Set it, "
            f"or use the keyless model {MOCK!r}."
        )
    if not choice.model:
        raise ModelUnavailable(
            "LOOP_OPENAI_BASE_URL is set but no model is named: set LOOP_OPENAI_MODEL to one the "
            "server has (`manage.py modelcheck` lists them)."
        )
    return choice


def offered_models(rights: Rights | None = None) -> list[ModelChoice]:
    """The models a person may pick from: the default, then LOOP_MODELS' others, each only if it
    can run here, and, given a person's `rights` (rights.effective.rights_of), only those they
    may use. Empty when none can."""
    names = [default_model(), *settings.LOOP_MODELS]
    if rights is not None:
        names = [name for name in names if rights.allows_model(parse(name).name)]
    offered: list[ModelChoice] = []
    for name in names:
        try:
            choice = resolve(name)
        except ModelUnavailable:
            continue
        if choice not in offered:
            offered.append(choice)
    return offered


def llm_for(model: "str | ModelChoice" = "", *, deltas: Callable[[str], None] | None = None) -> LLM:
    """A client for `model`, built once per run. `deltas`, if given, hears each reply's text as
    it is generated (the reply is then streamed)."""
    choice = resolve(model)
    if choice.provider == MockLLM.provider:
        return MockLLM(deltas, latency=settings.LOOP_MOCK_LATENCY_MS / 1000)
    if choice.provider == OPENAI:
        return OpenAICompatibleLLM(
            choice.model,
            base_url=settings.LOOP_OPENAI_BASE_URL,
            api_key=settings.LOOP_OPENAI_API_KEY,
            deltas=deltas,
            timeout=settings.LOOP_OPENAI_TIMEOUT,
            max_retries=settings.LOOP_OPENAI_MAX_RETRIES,
            reasoning_effort=settings.LOOP_OPENAI_REASONING_EFFORT,
        )
    return GroqLLM(
        choice.model,
        deltas=deltas,
        api_key=settings.GROQ_API_KEY,
        base_url=settings.GROQ_BASE_URL or None,
        timeout=settings.LOOP_GROQ_TIMEOUT,
        max_retries=settings.LOOP_GROQ_MAX_RETRIES,
        reasoning_effort=settings.LOOP_GROQ_REASONING_EFFORT,
    )
