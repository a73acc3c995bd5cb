"""`manage.py groqcheck`: does Groq work with this key and model? The one command that calls out."""

import json
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.llm.base import LLMError, ToolSpec
from agent.llm.factory import llm_for
from agent.llm.groq import GroqLLM

NO_KEY = 2
FAILED = 1

ADD_TOOL: ToolSpec = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two whole numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
ADD_TASK = [{"role": "user", "content": "Use the add tool to add 2 and 3."}]


class Command(BaseCommand):
    help = (
        "Check Groq with GROQ_API_KEY: list the models the key can use, say whether the "
        "configured one is among them, and make one tiny tool-calling request with it. "
        "Exit status: 0 works, 1 does not, 2 no key."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--model", default="", help="The model to check (default: LOOP_GROQ_MODEL)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.GROQ_API_KEY:
            raise CommandError(
                "GROQ_API_KEY is not set: there is nothing to check. Without a key Loop runs "
                "on the keyless mock model.",
                returncode=NO_KEY,
            )
        model = options["model"] or settings.LOOP_GROQ_MODEL
        llm = llm_for(model)
        if not isinstance(llm, GroqLLM):
            raise CommandError(f"{model!r} is not a Groq model.", returncode=NO_KEY)
        listed = self.list_models(llm)
        self.check_listed(model, listed)
        self.check_tool_call(llm)

    def list_models(self, llm: GroqLLM) -> list[str]:
        try:
            models = llm.available_models()
        except LLMError as error:
            raise CommandError(
                f"Could not list Groq's models: {error}", returncode=FAILED
            ) from None
        self.stdout.write(f"Models this key can use ({len(models)}):")
        for name in models:
            marker = "  <- configured" if name == llm.model else ""
            self.stdout.write(f"  {name}{marker}")
        return models

    def check_listed(self, model: str, listed: list[str]) -> None:
        if model in listed:
            self.stdout.write(f"The configured model {model!r} is among them.")
            return
        raise CommandError(
            f"The configured model {model!r} is not among them. Set LOOP_GROQ_MODEL to one "
            "that is.",
            returncode=FAILED,
        )

    def check_tool_call(self, llm: GroqLLM) -> None:
        started = time.monotonic()
        try:
            reply = llm.chat(ADD_TASK, [ADD_TOOL])
        except LLMError as error:
            raise CommandError(
                f"The tool-calling request failed: {error}", returncode=FAILED
            ) from None
        took = time.monotonic() - started
        calls = [call for call in reply.tool_calls if call.name == "add"]
        if not calls:
            raise CommandError(
                f"{llm.model} answered without calling the tool: {reply.text[:200]!r}",
                returncode=FAILED,
            )
        arguments = calls[0].arguments
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or {parsed.get("a"), parsed.get("b")} != {2, 3}:
            raise CommandError(
                f"{llm.model} called add with unexpected arguments: {arguments}",
                returncode=FAILED,
            )
        tokens = reply.usage.total_tokens
        self.stdout.write(
            f"Tool call: {llm.model} called add({arguments}) in {took:.2f}s, {tokens} tokens. "
            "Groq works."
        )
