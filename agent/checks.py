"""Start-up checks of the model settings: every model they name can run here, and a configured
model server has a model named on it. `manage.py modelcheck` then checks the server itself."""

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from agent.llm.factory import OPENAI, ModelChoice, ModelUnavailable, default_model, parse, resolve
from agent.llm.said import scrubbed_url
from agent.models import AgentRun

NAME_ONE = (
    "Set LOOP_OPENAI_MODEL to a model the server has (`manage.py modelcheck` lists them), or "
    "name one as openai:<model> in LOOP_MODEL or LOOP_MODELS."
)


@register("llm")
def check_openai_model(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """LOOP_OPENAI_BASE_URL without LOOP_OPENAI_MODEL: an error when runs would use the server
    with no model, a warning when no setting names a model on it (no run uses it). A name in
    LOOP_MODEL or LOOP_MODELS that cannot run is check_named_models' to report."""
    if not settings.LOOP_OPENAI_BASE_URL or settings.LOOP_OPENAI_MODEL:
        return []
    named = _named_models()
    if not named and parse(default_model()) == ModelChoice(OPENAI, ""):
        return [
            Error(
                "LOOP_OPENAI_BASE_URL is set but LOOP_OPENAI_MODEL is not: runs use the model "
                "server and name no model on it, so every run fails.",
                hint=NAME_ONE,
                id="agent.E001",
            )
        ]
    if not any(parse(name).provider == OPENAI for name in named):
        return [
            Warning(
                "LOOP_OPENAI_BASE_URL is set but no model on it is named (LOOP_OPENAI_MODEL, "
                "LOOP_MODEL, LOOP_MODELS): no run uses the model server.",
                hint=NAME_ONE,
                id="agent.W001",
            )
        ]
    return []


@register("llm")
def check_named_models(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Each model LOOP_MODEL and LOOP_MODELS name can run here: the default is an error (every
    run would fail), another of LOOP_MODELS a warning (it is left out of the pick)."""
    problems: list[CheckMessage] = []
    if settings.LOOP_MODEL:
        problems += _unrunnable("LOOP_MODEL", settings.LOOP_MODEL, Error, "agent.E002")
    for position, name in enumerate(settings.LOOP_MODELS):
        if position == 0 and not settings.LOOP_MODEL:
            problems += _unrunnable("LOOP_MODELS", name, Error, "agent.E003")
        else:
            problems += _unrunnable("LOOP_MODELS", name, Warning, "agent.W002")
    return problems


# The longest model name a run records (AgentRun.model); start_run refuses a longer one.
MODEL_CHARS = AgentRun._meta.get_field("model").max_length


@register("llm")
def check_model_name_lengths(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A model name longer than a run records cannot run: every start on it is refused (a vLLM
    server names its model by the path it loaded it from, unless told otherwise)."""
    problems: list[CheckMessage] = []
    named = [("LOOP_MODEL", settings.LOOP_MODEL)] + [
        ("LOOP_MODELS", n) for n in settings.LOOP_MODELS
    ]
    named += [("LOOP_OPENAI_MODEL", settings.LOOP_OPENAI_MODEL)]
    for setting, name in named:
        model = parse(name).model if setting != "LOOP_OPENAI_MODEL" else name
        if MODEL_CHARS is not None and len(model) > MODEL_CHARS:
            problems.append(
                Warning(
                    f"{setting} names {name!r}, whose model name is {len(model)} characters "
                    f"long; Loop records model names of at most {MODEL_CHARS}, so runs on it "
                    "are refused.",
                    hint="Serve the model under a shorter name (vLLM: --served-model-name; "
                    "Ollama: `ollama cp`) and name that.",
                    id="agent.W004",
                )
            )
    return problems


@register("llm", deploy=True)
def check_keys_in_the_clear(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """An API key sent over plain http to another machine can be read (and reused) by anyone on
    the way; on this machine (loopback) or over https it cannot."""
    servers = (
        ("LOOP_OPENAI_API_KEY", settings.LOOP_OPENAI_API_KEY, settings.LOOP_OPENAI_BASE_URL),
        ("GROQ_API_KEY", settings.GROQ_API_KEY, settings.GROQ_BASE_URL),
    )
    return [
        Warning(
            f"{key_setting} is sent over plain http to {scrubbed_url(url)}, another machine: "
            "anyone on the network between can read the key, and every task and answer.",
            hint="Use the server's https:// URL (or a TLS proxy in front of it), or run the "
            "server on this machine (127.0.0.1).",
            id="agent.W003",
        )
        for key_setting, key, url in servers
        if key and _in_the_clear(url)
    ]


def _in_the_clear(url: str) -> bool:
    """Plain http to a host that is not this machine."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http":
        return False
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return True


def _named_models() -> list[str]:
    return [name for name in (settings.LOOP_MODEL, *settings.LOOP_MODELS) if name]


def _unrunnable(
    setting: str, name: str, level: type[Error] | type[Warning], check_id: str
) -> list[CheckMessage]:
    try:
        resolve(name)
    except ModelUnavailable as error:
        outcome = (
            "it is the default model: runs on it fail"
            if level is Error
            else "it is not offered for a conversation"
        )
        return [
            level(
                f"{setting} names {name!r}, which cannot run here ({outcome}): {error}",
                hint=f"Change {setting}, or configure the model's provider (docs/models.md).",
                id=check_id,
            )
        ]
    return []
