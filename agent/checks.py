"""Start-up checks of the model settings: every model they name can run here, and a configured
model server has a model named on it. `manage.py modelcheck` then checks the server itself."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from agent.llm.factory import OPENAI, ModelChoice, ModelUnavailable, default_model, parse, resolve

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
