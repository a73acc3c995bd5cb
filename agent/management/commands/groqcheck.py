"""`manage.py groqcheck`: `modelcheck` for Groq alone, checking LOOP_GROQ_MODEL by default."""

from typing import ClassVar

from django.conf import settings
from django.core.management.base import CommandError

from agent.llm.factory import GROQ, MOCK, PROVIDERS

from .modelcheck import NOTHING_TO_CHECK
from .modelcheck import Command as ModelCheck


class Command(ModelCheck):
    help = (
        "Check Groq with GROQ_API_KEY: list the models the key can use, say whether the "
        "configured one (LOOP_GROQ_MODEL, or --model) is among them, and make one tiny "
        "tool-calling request with it. Exit status: 0 works, 1 does not, 2 no key. "
        "`modelcheck` does the same for whichever model runs use."
    )

    provider: ClassVar[str | None] = GROQ

    def model_name(self, given: str) -> tuple[str, str]:
        if not settings.GROQ_API_KEY:
            raise CommandError(
                "GROQ_API_KEY is not set: there is nothing to check. Without a key Loop runs "
                "on the keyless mock model, or on LOOP_OPENAI_BASE_URL's server "
                "(`manage.py modelcheck` checks that).",
                returncode=NOTHING_TO_CHECK,
            )
        name, setting = (given, "--model") if given else (settings.LOOP_GROQ_MODEL, "")
        return on_groq(name), setting


def on_groq(name: str) -> str:
    """A bare name is Groq's here, even when a model server has a model of that name (OpenRouter
    names gpt-oss as Groq does)."""
    prefix, colon, _ = name.partition(":")
    return name if name == MOCK or (colon and prefix in PROVIDERS) else f"{GROQ}:{name}"
